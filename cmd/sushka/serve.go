package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/internal/diskprobe"
	"github.com/sushka-io/sushka/internal/meta"
)

// serveFlags are `sushka serve`'s flags; each can also be set with the
// environment variable SUSHKA_<FLAG_IN_UPPER_SNAKE_CASE>.
type serveFlags struct {
	dataDir           string
	listen            string
	advertisedAddr    string
	adminListen       string
	autoCreateTopics  bool
	defaultPartitions int32
	nodeID            int32
	maxPartitions     int32
	maxAllPartitions  int64
	maxRequestBytes   int32
	logLevel          string
	logFormat         string
	retention         time.Duration
	retentionBytes    int64
	segmentBytes      int64
	shutdownTimeout   time.Duration
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker (Kafka protocol)",
		Long: `Run a single-node Sushka broker speaking the Apache Kafka wire protocol.

Point any Kafka client at --listen (kcat -b 127.0.0.1:9092 -L). Every flag can
also be set with an environment variable: --data-dir is SUSHKA_DATA_DIR, and so on.
Producers with acks=all are acknowledged only after fdatasync.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "./sushka-data", "data directory (partition logs and metadata)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:9092", "Kafka protocol listener host:port")
	fl.StringVar(&f.advertisedAddr, "advertised-addr", "", "host:port clients are told to connect to (default: the listen address, with the real port when :0)")
	fl.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9644", `admin HTTP listener (/metrics, /healthz, /debug/pprof/, /v1/runtime); "" disables it`)
	fl.BoolVar(&f.autoCreateTopics, "auto-create-topics", true, "create unknown topics named in metadata requests")
	fl.Int32Var(&f.defaultPartitions, "default-partitions", 1, "partition count of auto-created topics")
	fl.Int32Var(&f.nodeID, "node-id", 0, "this broker's node ID")
	fl.Int32Var(&f.maxPartitions, "max-partitions-per-topic", 10000, "largest partition count a topic may have")
	fl.Int64Var(&f.maxAllPartitions, "max-partitions", meta.DefaultMaxPartitions, "most partitions of all topics together on this broker (-1: no limit)")
	fl.Int32Var(&f.maxRequestBytes, "max-request-bytes", 100<<20, "largest request accepted; larger frames close the connection")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fl.DurationVar(&f.retention, "log-retention", 0, "default retention time of topics (log.retention.ms; 0: Kafka's 7 days, negative: unlimited)")
	fl.Int64Var(&f.retentionBytes, "log-retention-bytes", 0, "default retention bytes per partition (log.retention.bytes; 0: unlimited)")
	fl.Int64Var(&f.segmentBytes, "log-segment-bytes", 0, "default segment size (log.segment.bytes; 0: 1 GiB)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown may take before connections are dropped")
	return cmd
}

func init() { rootCmd.AddCommand(newServeCmd()) }

// flagsFromEnv sets every flag not given on the command line from
// SUSHKA_<NAME> (dashes become underscores).
func flagsFromEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed {
			return
		}
		env := "SUSHKA_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if serr := fs.Set(fl.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, serr)
			}
		}
	})
	return err
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func runServe(ctx context.Context, f serveFlags) error {
	logger, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	dataDir, _ := filepath.Abs(f.dataDir)
	storage, serr := diskprobe.Describe(dataDir)
	storageDesc := storage.String()
	if serr != nil {
		storageDesc = "unknown (" + serr.Error() + ")"
	}

	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another broker running? choose another --listen)", f.listen, err)
	}
	defer l.Close()
	advertised := f.advertisedAddr
	if host, _, _ := net.SplitHostPort(l.Addr().String()); advertised == "" && net.ParseIP(host).IsUnspecified() {
		// Listening on all interfaces: tell clients this host's name, as
		// Kafka does, with the real port.
		name, herr := os.Hostname()
		if herr != nil {
			return fmt.Errorf("--listen %s listens on every interface and the host name is unknown (%v): set --advertised-addr", f.listen, herr)
		}
		advertised = net.JoinHostPort(name, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	start := time.Now()
	b, err := broker.New(broker.Config{
		DataDir:               dataDir,
		AdvertisedAddr:        advertised,
		AutoCreateTopics:      broker.Bool(f.autoCreateTopics),
		DefaultPartitions:     f.defaultPartitions,
		NodeID:                f.nodeID,
		MaxPartitionsPerTopic: f.maxPartitions,
		MaxPartitions:         f.maxAllPartitions,
		MaxRequestBytes:       f.maxRequestBytes,
		Logger:                logger,
		Registry:              reg,
		RetentionTime:         f.retention,
		RetentionBytes:        f.retentionBytes,
		SegmentBytes:          f.segmentBytes,
	})
	if err != nil {
		return err
	}
	recovered := time.Since(start)

	serveErr := make(chan error, 1)
	go func() { serveErr <- b.Serve(l) }()
	for b.AdvertisedAddr() == "" {
		select {
		case err := <-serveErr:
			b.Shutdown(context.Background())
			return err
		case <-time.After(time.Millisecond):
		}
	}

	var adminSrv *http.Server
	adminAddr := "disabled"
	if f.adminListen != "" {
		al, err := net.Listen("tcp", f.adminListen)
		if err != nil {
			b.Shutdown(context.Background())
			return fmt.Errorf("admin listener on %s: %w (choose another --admin-listen, or \"\" to disable)", f.adminListen, err)
		}
		adminAddr = al.Addr().String()
		adminSrv = &http.Server{Handler: adminMux(b, reg, dataDir, storageDesc), ReadHeaderTimeout: 10 * time.Second}
		go adminSrv.Serve(al)
	}

	fmt.Fprintf(os.Stderr, `sushka %s (%s, GOMAXPROCS=%d)
  kafka listener   %s (advertised %s)
  admin listener   %s
  data directory   %s (%s)
  durability       acks=all → fdatasync before ack; acks=1 → page cache; acks=0 → queued
  cluster id       %s, node %d; recovered in %s
`, version, runtime.Version(), runtime.GOMAXPROCS(0), l.Addr(), b.AdvertisedAddr(), adminAddr, dataDir, storageDesc,
		b.ClusterID(), f.nodeID, recovered.Round(time.Millisecond))
	if storage.Volatile {
		logger.Warn("the data directory is on a volatile filesystem: acknowledged data is lost at reboot", "storage", storageDesc)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigs:
		logger.Info("shutting down gracefully; send the signal again to exit at once", "signal", sig.String())
	case err := <-serveErr:
		b.Shutdown(context.Background())
		return fmt.Errorf("serving: %w", err)
	case <-ctxDone(ctx):
	}
	go func() {
		sig := <-sigs
		logger.Warn("second signal: exiting at once", "signal", sig.String())
		os.Exit(1)
	}()
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if adminSrv != nil {
		adminSrv.Shutdown(sctx)
	}
	if err := b.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

func ctxDone(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}

// runtimeProfile is /v1/runtime: what the broker process actually got
// (MEASURING.md: the runtime profile and the storage passport).
type runtimeProfile struct {
	Version    string `json:"version"`
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	GOGC       string `json:"gogc"`
	GOMEMLIMIT string `json:"gomemlimit"`
	DataDir    string `json:"data_dir"`
	Storage    string `json:"storage"`
	Durability string `json:"durability"`
	ClusterID  string `json:"cluster_id"`
	Advertised string `json:"advertised_addr"`
}

func currentGOGC() string {
	pct := debug.SetGCPercent(-1)
	debug.SetGCPercent(pct)
	if pct < 0 {
		return "off"
	}
	return strconv.Itoa(pct)
}

func adminMux(b *broker.Broker, reg *prometheus.Registry, dataDir, storage string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/v1/runtime", func(w http.ResponseWriter, _ *http.Request) {
		limit := debug.SetMemoryLimit(-1)
		memLimit := "unlimited"
		if limit != 1<<63-1 {
			memLimit = strconv.FormatInt(limit, 10)
		}
		p := runtimeProfile{
			Version: version, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
			GOGC: currentGOGC(), GOMEMLIMIT: memLimit, DataDir: dataDir, Storage: storage,
			Durability: "acks=all → fdatasync before ack", ClusterID: b.ClusterID(), Advertised: b.AdvertisedAddr(),
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(p); err != nil && !errors.Is(err, net.ErrClosed) {
			return
		}
	})
	return mux
}
