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
	"regexp"
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
	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/diskprobe"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/internal/server"
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
	maxRequestMemory  int64
	maxConnections    int
	maxConnsPerIP     int
	idleTimeout       time.Duration
	frameReadTimeout  time.Duration
	writeTimeout      time.Duration
	adminAllowRemote  bool
	adminPprof        bool
	logLevel          string
	logFormat         string
	retention         time.Duration
	retentionBytes    int64
	segmentBytes      int64
	// The log defaults given on the command line or in the environment
	// (nil: not given, the broker's default).
	retentionSet         *time.Duration
	retentionBytesSet    *int64
	segmentBytesSet      *int64
	shutdownTimeout      time.Duration
	maxOpenSegmentFiles  int
	recoveryThreads      int
	segmentFileIdle      time.Duration
	producerIDExpiration time.Duration
	syncInterval         time.Duration
	earlyWriteback       int64
	maxFetchWait         time.Duration

	// Listeners and TLS (listeners.go).
	listenGiven         bool // --listen given (or SUSHKA_LISTEN)
	listeners           string
	advertisedListeners string
	listenerProtocolMap string
	tlsCertFile         string
	tlsKeyFile          string
	tlsClientCAFile     string
	tlsClientAuth       string
	adminToken          string
	adminClientCAFile   string
	// Authorization (ACLs).
	authorizer           bool
	superUsers           string
	allowEveryoneIfNoACL bool

	// SASL (user.go for the users).
	saslMechanisms         string
	bootstrapUser          string
	connectionsMaxReauthMs int64
	fetchSessionSlots      int

	// Cluster mode (serve_cluster.go).
	cluster clusterFlags
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker (Kafka protocol)",
		Long: `Run a single-node Sushka broker speaking the Apache Kafka wire protocol.

Point any Kafka client at --listen (kcat -b 127.0.0.1:9092 -L), or give several
listeners with their security protocols, as Kafka's listeners:
  --listeners PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093 --tls-cert-file broker.crt --tls-key-file broker.key
(` + "`sushka tls init`" + ` makes a CA and the certificates). A node of a cluster adds
  --node-id 1 --peer-listen 127.0.0.1:9193 --controller-voters 0@127.0.0.1:9192,1@127.0.0.1:9193,2@127.0.0.1:9194
(every node a controller voter; partitions have one replica in this version). Every flag can also be set
with an environment variable: --data-dir is SUSHKA_DATA_DIR, and so on.
Producers with acks=all are acknowledged only after fdatasync.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			f.listenGiven = fl.Changed("listen")
			if fl.Changed("log-retention") {
				f.retentionSet = &f.retention
			}
			if fl.Changed("log-retention-bytes") {
				f.retentionBytesSet = &f.retentionBytes
			}
			if fl.Changed("log-segment-bytes") {
				f.segmentBytesSet = &f.segmentBytes
			}
			if f.maxOpenSegmentFiles < 1 {
				return fmt.Errorf("--max-open-segment-files %d: must be at least 1", f.maxOpenSegmentFiles)
			}
			if f.recoveryThreads < 1 {
				return fmt.Errorf("--recovery-threads %d: must be at least 1", f.recoveryThreads)
			}
			if f.segmentFileIdle < 0 {
				return fmt.Errorf("--segment-file-idle-timeout %s: must be at least 0", f.segmentFileIdle)
			}
			if f.producerIDExpiration < time.Millisecond {
				return fmt.Errorf("--producer-id-expiration %s: must be at least 1ms", f.producerIDExpiration)
			}
			if f.syncInterval < 0 {
				return fmt.Errorf("--sync-interval %s: must be at least 0", f.syncInterval)
			}
			if f.earlyWriteback < 0 {
				return fmt.Errorf("--early-writeback-bytes %d: must be at least 0", f.earlyWriteback)
			}
			if f.maxFetchWait < time.Millisecond {
				return fmt.Errorf("--max-fetch-wait %s: must be at least 1ms", f.maxFetchWait)
			}
			if _, err := acl.ParseSuperUsers(f.superUsers); err != nil {
				return fmt.Errorf("--super-users %q: %w", f.superUsers, err)
			}
			if _, err := sasl.ParseMechanisms(strings.Split(f.saslMechanisms, ",")); err != nil {
				return fmt.Errorf("--sasl-enabled-mechanisms %q: %w", f.saslMechanisms, err)
			}
			if _, _, err := parseBootstrapUser(f.bootstrapUser); err != nil {
				return err
			}
			if f.connectionsMaxReauthMs < 0 {
				return fmt.Errorf("--connections-max-reauth-ms %d: must be at least 0 (0: no limit)", f.connectionsMaxReauthMs)
			}
			if f.fetchSessionSlots < 0 {
				return fmt.Errorf("--fetch-session-slots %d: must be at least 0 (0: no fetch sessions)", f.fetchSessionSlots)
			}
			if _, err := checkCluster(f); err != nil {
				return err
			}
			return runServe(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "./sushka-data", "data directory (partition logs and metadata)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:9092", "Kafka protocol listener host:port: one PLAINTEXT listener (the shorthand of --listeners PLAINTEXT://HOST:PORT)")
	fl.StringVar(&f.advertisedAddr, "advertised-addr", "", "host:port clients of --listen are told to connect to (default: the listen address, with the real port when :0)")
	fl.StringVar(&f.listeners, "listeners", "", `Kafka listeners NAME://host:port,... (Kafka's listeners), NAME a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or a name mapped by --listener-security-protocol-map; replaces --listen`)
	fl.StringVar(&f.advertisedListeners, "advertised-listeners", "", "NAME://host:port,... clients of each listener are told to connect to (Kafka's advertised.listeners; default: each listener's address)")
	fl.StringVar(&f.listenerProtocolMap, "listener-security-protocol-map", "", "NAME:PROTOCOL,... security protocol of listeners not named after one, such as EXTERNAL:SASL_SSL,INTERNAL:PLAINTEXT (Kafka's listener.security.protocol.map)")
	fl.StringVar(&f.tlsCertFile, "tls-cert-file", "", "PEM certificate (chain) of SSL and SASL_SSL listeners, reloaded when it changes (sushka tls init makes one)")
	fl.StringVar(&f.tlsKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file, reloaded with it")
	fl.StringVar(&f.tlsClientCAFile, "tls-client-ca-file", "", "PEM CAs client certificates are verified against (with --tls-client-auth requested or required)")
	fl.StringVar(&f.tlsClientAuth, "tls-client-auth", "none", "client certificates on TLS listeners: none, requested or required (Kafka's ssl.client.auth); on SSL the principal is User:<subject DN>")
	fl.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9644", `admin HTTP listener (/metrics, /healthz, /v1/runtime; /debug/pprof/ with --admin-pprof): open on loopback, on any other address it needs --admin-token or --admin-tls-client-ca-file; "" disables it`)
	fl.StringVar(&f.adminToken, "admin-token", "", "bearer token the admin listener requires (Authorization: Bearer TOKEN); prefer SUSHKA_ADMIN_TOKEN, the command line is visible to other users")
	fl.StringVar(&f.adminClientCAFile, "admin-tls-client-ca-file", "", "serve the admin listener over HTTPS (--tls-cert-file/--tls-key-file) and require client certificates of these CAs")
	fl.BoolVar(&f.adminAllowRemote, "admin-allow-remote", false, "no longer enough on its own: a non-loopback --admin-listen needs --admin-token or --admin-tls-client-ca-file")
	fl.MarkDeprecated("admin-allow-remote", "a non-loopback --admin-listen needs --admin-token or --admin-tls-client-ca-file")
	fl.BoolVar(&f.adminPprof, "admin-pprof", false, "serve /debug/pprof/ on the admin listener (profiles, goroutine stacks, the command line)")
	fl.BoolVar(&f.autoCreateTopics, "auto-create-topics", true, "create unknown topics named in metadata requests")
	fl.Int32Var(&f.defaultPartitions, "default-partitions", 1, "partition count of auto-created topics")
	fl.Int32Var(&f.nodeID, "node-id", 0, "this broker's node ID (in a cluster: one of --controller-voters)")
	fl.StringVar(&f.cluster.peerListen, "peer-listen", "", "host:port of the peer listener a node of a cluster replicates on (the address --controller-voters names for it); empty: a single node")
	fl.StringVar(&f.cluster.controllerVoters, "controller-voters", "", "the cluster's controller voters ID@HOST:PORT,... with each voter's peer listener (KRaft's controller.quorum.voters), the same on every node; empty: a single node")
	fl.StringVar(&f.cluster.rack, "rack", "", "this node's rack, for rack-aware replica placement (broker.rack)")
	fl.StringVar(&f.cluster.peerTLSCertFile, "peer-tls-cert-file", "", "PEM node certificate of the peer link (subject CN node-<node id + 1>; sushka tls init makes one), reloaded when it changes; with --peer-tls-key-file and --peer-tls-ca-file")
	fl.StringVar(&f.cluster.peerTLSKeyFile, "peer-tls-key-file", "", "PEM private key of --peer-tls-cert-file")
	fl.StringVar(&f.cluster.peerTLSCAFile, "peer-tls-ca-file", "", "PEM CAs the peers' node certificates are verified against (a CA for the peer link alone)")
	fl.DurationVar(&f.cluster.sessionTimeout, "broker-session-timeout", broker.DefaultSessionTimeout, "the active controller fences a node not heard from for this long (broker.session.timeout.ms)")
	fl.DurationVar(&f.cluster.heartbeat, "broker-heartbeat-interval", broker.DefaultHeartbeatInterval, "how often a node heartbeats to the active controller (broker.heartbeat.interval.ms)")
	fl.Int32Var(&f.maxPartitions, "max-partitions-per-topic", 10000, "largest partition count a topic may have")
	fl.Int64Var(&f.maxAllPartitions, "max-partitions", meta.DefaultMaxPartitions, "most partitions of all topics together on this broker (-1: no limit)")
	fl.Int32Var(&f.maxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest request accepted; larger frames close the connection (socket.request.max.bytes)")
	fl.Int64Var(&f.maxRequestMemory, "max-request-memory", server.DefaultMaxRequestMemory, "request bytes all connections may hold in memory together; a connection waits (stops reading) while it is used up (queued.max.request.bytes)")
	fl.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections, "open client connections; more are accepted and closed at once (max.connections)")
	fl.IntVar(&f.maxConnsPerIP, "max-connections-per-ip", server.DefaultMaxConnectionsPerIP, "open client connections from one IP (max.connections.per.ip)")
	fl.DurationVar(&f.idleTimeout, "connections-max-idle", server.DefaultIdleTimeout, "close connections with nothing in flight and no traffic for this long (connections.max.idle.ms)")
	fl.DurationVar(&f.frameReadTimeout, "frame-read-timeout", server.DefaultFrameReadTimeout, "close a connection whose request, once started, has not fully arrived within this")
	fl.DurationVar(&f.writeTimeout, "write-timeout", server.DefaultWriteTimeout, "close a connection whose response makes no progress for this long (a client that stopped reading)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	// The defaults shown are Kafka's; a flag not given leaves the broker's
	// default (reported as DEFAULT_CONFIG), a flag given is used as it is.
	fl.DurationVar(&f.retention, "log-retention", 168*time.Hour, "default retention time of topics (log.retention.ms; negative: unlimited; 0: segments are deleted once rolled)")
	fl.Int64Var(&f.retentionBytes, "log-retention-bytes", -1, "default retention bytes per partition (log.retention.bytes; negative: unlimited; 0: only the active segment is kept)")
	fl.Int64Var(&f.segmentBytes, "log-segment-bytes", 1<<30, "default segment size (log.segment.bytes; at least 1 MiB)")
	fl.IntVar(&f.maxOpenSegmentFiles, "max-open-segment-files", broker.DefaultMaxOpenSegmentFiles, "idle segment files kept open across all partitions (opened on use, least recently used closed first)")
	fl.IntVar(&f.recoveryThreads, "recovery-threads", broker.DefaultRecoveryThreads(), "partition logs opened (recovered: every batch read and checked) at once at start-up (num.recovery.threads.per.data.dir; default one per core, 2 to 8; each holds at most two 16 MiB read blocks)")
	fl.DurationVar(&f.segmentFileIdle, "segment-file-idle-timeout", broker.DefaultSegmentFileIdleTimeout, "close a segment file unused for this long, so idle partitions hold no descriptor (Redpanda's readers_cache_eviction_timeout_ms; 0: closed only by --max-open-segment-files)")
	fl.DurationVar(&f.producerIDExpiration, "producer-id-expiration", broker.DefaultProducerIDExpiration, "forget an idempotent producer's sequence state in a partition after it has not produced there for this long (producer.id.expiration.ms)")
	fl.DurationVar(&f.syncInterval, "sync-interval", broker.DefaultSyncInterval, "least time between a partition's fsyncs when no acks=all append waits (acks=0/1 records become visible up to this much later; 0: fsync back to back)")
	fl.Int64Var(&f.earlyWriteback, "early-writeback-bytes", broker.DefaultEarlyWritebackBytes, "acks=all: once this many bytes are written and not yet being written back, start their writeback (sync_file_range) before the fsync that needs them, so it has less left to write (RocksDB's bytes_per_sync; a hint: the fsync still makes each acknowledged record durable; 0: off)")
	fl.IntVar(&f.fetchSessionSlots, "fetch-session-slots", broker.DefaultFetchSessionSlots, "incremental fetch sessions (KIP-227) kept broker-wide, least valuable evicted first (max.incremental.fetch.session.cache.slots; 0: none, every fetch is full)")
	fl.DurationVar(&f.maxFetchWait, "max-fetch-wait", broker.DefaultMaxFetchWait, "longest a fetch may wait for data (caps the client's MaxWaitMs)")
	fl.BoolVar(&f.authorizer, "authorizer", false, "check every request against the ACLs (sushka acl); without an ACL nothing is allowed but to super users (Kafka's authorizer.class.name; off: everything allowed)")
	fl.StringVar(&f.superUsers, "super-users", "", `principals allowed everything, separated by ";" ("User:admin;User:ops"; Kafka's super.users)`)
	fl.BoolVar(&f.allowEveryoneIfNoACL, "allow-everyone-if-no-acl-found", false, "with --authorizer, allow requests on resources no ACL names (allow.everyone.if.no.acl.found)")
	fl.StringVar(&f.saslMechanisms, "sasl-enabled-mechanisms", strings.Join(sasl.DefaultMechanisms, ","), "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners (Kafka's sasl.enabled.mechanisms); all verify against the SCRAM credentials")
	fl.StringVar(&f.bootstrapUser, "bootstrap-user", "", "NAME:PASSWORD: give NAME SCRAM-SHA-256 and SCRAM-SHA-512 credentials at start if it has none (how a first administrator exists; prefer the env SUSHKA_BOOTSTRAP_USER)")
	fl.Int64Var(&f.connectionsMaxReauthMs, "connections-max-reauth-ms", 0, "SASL session lifetime in ms: clients re-authenticate before it ends or are disconnected (KIP-368, Kafka's connections.max.reauth.ms; 0: no limit)")
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

// raiseOpenFileLimit raises RLIMIT_NOFILE's soft limit to the hard limit
// (every connection and segment is a descriptor; Go does this too since
// 1.19, but a broker must not depend on it silently) and returns the limits
// in force for the banner.
func raiseOpenFileLimit() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur, lim.Max, nil
}

func runServe(ctx context.Context, f serveFlags) error {
	logger, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	adminRemote, adminAuth, err := checkAdminListen(f)
	if err != nil {
		return err
	}
	specs, err := parseListeners(f)
	if err != nil {
		return err
	}
	tlsCfg, err := listenerTLS(f, specs, logger)
	if err != nil {
		return err
	}
	openFiles := "unknown"
	if soft, hard, err := raiseOpenFileLimit(); err == nil {
		openFiles = fmt.Sprintf("%d (hard limit %d)", soft, hard)
	} else {
		logger.Warn("cannot read the open file limit", "err", err)
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

	voters, err := checkCluster(f)
	if err != nil {
		return err
	}
	sockets, listeners, err := listen(specs, tlsCfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range sockets {
			l.Close()
		}
	}()
	// The admin socket opens with the Kafka ones, so a client that sees
	// the Kafka port up finds the admin port listening too (its requests
	// wait in the backlog until the broker has recovered and serves them).
	var al net.Listener
	if f.adminListen != "" {
		if al, err = net.Listen("tcp", f.adminListen); err != nil {
			return fmt.Errorf("admin listener on %s: %w (choose another --admin-listen, or \"\" to disable)", f.adminListen, err)
		}
		defer al.Close()
	}

	cluster, err := clusterConfig(f, voters, logger)
	if err != nil {
		return err
	}
	if cluster != nil {
		defer cluster.PeerListener.Close()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(runtimeLatencyMetrics)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bootstrapName, bootstrapPassword, _ := parseBootstrapUser(f.bootstrapUser)
	earlyWriteback := f.earlyWriteback
	if earlyWriteback == 0 {
		earlyWriteback = -1 // broker.Config: 0 is the default, negative off
	}
	start := time.Now()
	b, err := broker.New(broker.Config{
		DataDir:                   dataDir,
		Listeners:                 listeners,
		AutoCreateTopics:          broker.Bool(f.autoCreateTopics),
		DefaultPartitions:         f.defaultPartitions,
		NodeID:                    f.nodeID,
		Cluster:                   cluster,
		MaxPartitionsPerTopic:     f.maxPartitions,
		MaxPartitions:             f.maxAllPartitions,
		MaxRequestBytes:           f.maxRequestBytes,
		MaxRequestMemory:          f.maxRequestMemory,
		MaxConnections:            f.maxConnections,
		MaxConnectionsPerIP:       f.maxConnsPerIP,
		IdleTimeout:               f.idleTimeout,
		FrameReadTimeout:          f.frameReadTimeout,
		WriteTimeout:              f.writeTimeout,
		Logger:                    logger,
		Registry:                  reg,
		RetentionTime:             f.retentionSet,
		RetentionBytes:            f.retentionBytesSet,
		SegmentBytes:              f.segmentBytesSet,
		MaxOpenSegmentFiles:       f.maxOpenSegmentFiles,
		RecoveryThreads:           f.recoveryThreads,
		SegmentFileIdleTimeout:    zeroMeansNone(f.segmentFileIdle),
		ProducerIDExpiration:      f.producerIDExpiration,
		MaxFetchWait:              f.maxFetchWait,
		SyncInterval:              zeroMeansNone(f.syncInterval),
		EarlyWritebackBytes:       earlyWriteback,
		Authorizer:                f.authorizer,
		SuperUsers:                superUsers(f.superUsers),
		AllowEveryoneIfNoACLFound: f.allowEveryoneIfNoACL,
		SASLMechanisms:            strings.Split(f.saslMechanisms, ","),
		BootstrapUser:             bootstrapName,
		BootstrapPassword:         bootstrapPassword,
		ConnectionsMaxReauth:      time.Duration(f.connectionsMaxReauthMs) * time.Millisecond,
		FetchSessionSlots:         fetchSessionSlotsConfig(f.fetchSessionSlots),
	})
	if err != nil {
		return err
	}
	recovered := time.Since(start)

	// Every shutdown, on an error path too, is bounded: a client that
	// stopped reading must not keep a failed broker around.
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
		defer cancel()
		return b.Shutdown(sctx)
	}
	serveErr := make(chan error, len(sockets))
	for i, l := range sockets {
		go func() { serveErr <- b.ServeListener(listeners[i].Name, l) }()
	}
	for !allServed(b) {
		select {
		case err := <-serveErr:
			shutdown()
			return err
		case <-time.After(time.Millisecond):
		}
	}

	var adminSrv *http.Server
	adminAddr := "disabled"
	if al != nil {
		adminAddr = al.Addr().String() + ", " + adminAuth.describe()
		if f.adminPprof {
			adminAddr += ", with /debug/pprof/"
		}
		if adminRemote {
			adminAddr += ", reachable from other hosts"
		}
		adminSrv = &http.Server{Handler: adminAuth.wrap(adminMux(b, reg, dataDir, storageDesc, f.adminPprof)), ReadHeaderTimeout: 10 * time.Second, TLSConfig: adminAuth.tls,
			ErrorLog: slog.NewLogLogger(logger.With("component", "admin").Handler(), slog.LevelWarn)}
		if adminAuth.tls != nil {
			go adminSrv.ServeTLS(al, "", "")
		} else {
			go adminSrv.Serve(al)
		}
	}

	fmt.Fprintf(os.Stderr, `sushka %s (%s, GOMAXPROCS=%d)
%s  admin listener   %s
  data directory   %s (%s)
  durability       acks=all → fdatasync before ack; acks=1 → ack from the page cache; acks=0 → no answer; consumers see a record once it is fsynced
  limits           request memory %s, request %s; connections %d (%d per IP); idle %s, frame read %s, write %s
  open files       %s
  cluster id       %s, node %d; recovered in %s
%s`, version, runtime.Version(), runtime.GOMAXPROCS(0), listenerBanner(b, f), adminAddr, dataDir, storageDesc,
		humanBytes(f.maxRequestMemory), humanBytes(int64(f.maxRequestBytes)), f.maxConnections, f.maxConnsPerIP,
		f.idleTimeout, f.frameReadTimeout, f.writeTimeout, openFiles,
		b.ClusterID(), f.nodeID, recovered.Round(time.Millisecond), saslBanner(b, f, logger))
	fmt.Fprintf(os.Stderr, "  authorization    %s\n%s", authorizationDesc(f), clusterBanner(f, cluster))
	if storage.Volatile {
		logger.Warn("the data directory is on a volatile filesystem: acknowledged data is lost at reboot", "storage", storageDesc)
	}
	if adminRemote && adminAuth.tls == nil {
		logger.Warn("the admin listener is reachable from other hosts over plain HTTP: its bearer token crosses the network in clear", "admin_listen", adminAddr)
	}
	if int64(f.maxRequestBytes) > f.maxRequestMemory {
		logger.Warn("--max-request-bytes is above --max-request-memory: requests larger than the memory budget are refused", "max_request_bytes", f.maxRequestBytes, "max_request_memory", f.maxRequestMemory)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigs:
		logger.Info("shutting down gracefully; send the signal again to exit at once", "signal", sig.String())
	case err := <-serveErr:
		shutdown()
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

// allServed reports whether every listener of b is served (its
// advertised endpoint known).
func allServed(b *broker.Broker) bool {
	for _, ln := range b.Listeners() {
		if ln.Advertised == "" {
			return false
		}
	}
	return true
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

// runtimeLatencyMetrics are the Go runtime's histograms a request's tail
// may come from, exported beside the defaults: how long runnable goroutines
// waited for a thread (go_sched_latencies_seconds) and the GC's
// stop-the-world pauses (go_sched_pauses_total_gc_seconds).
var runtimeLatencyMetrics = collectors.GoRuntimeMetricsRule{
	Matcher: regexp.MustCompile(`^/sched/(latencies|pauses/total/gc):seconds$`),
}

// adminMux serves the admin endpoints; /debug/pprof/ only with withPprof
// (it exposes the command line, goroutine stacks and CPU time on demand).
func adminMux(b *broker.Broker, reg *prometheus.Registry, dataDir, storage string, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
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

// fetchSessionSlotsConfig maps --fetch-session-slots (0: none) to
// broker.Config.FetchSessionSlots (0: the default, negative: none).
func fetchSessionSlotsConfig(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// zeroMeansNone maps a flag's duration whose 0 means none (--sync-interval:
// no pacing; --segment-file-idle-timeout: no timeout) to the broker.Config
// field's (0: the default, negative: none).
func zeroMeansNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// superUsers is --super-users as a list (validated in RunE).
func superUsers(s string) []string {
	users, _ := acl.ParseSuperUsers(s)
	return users
}

// authorizationDesc is the banner's authorization line.
func authorizationDesc(f serveFlags) string {
	if !f.authorizer {
		return "off: every client may do everything (--authorizer turns ACLs on)"
	}
	noACL := "denied"
	if f.allowEveryoneIfNoACL {
		noACL = "allowed"
	}
	supers := strings.Join(superUsers(f.superUsers), ", ")
	if supers == "" {
		supers = "none"
	}
	return fmt.Sprintf("ACLs (sushka acl); a resource without ACLs: %s; super users: %s", noACL, supers)
}

// parseBootstrapUser splits --bootstrap-user NAME:PASSWORD ("" is none).
func parseBootstrapUser(s string) (name, password string, err error) {
	if s == "" {
		return "", "", nil
	}
	name, password, ok := strings.Cut(s, ":")
	if !ok || name == "" || password == "" {
		return "", "", errors.New("--bootstrap-user: want NAME:PASSWORD (SUSHKA_BOOTSTRAP_USER keeps it out of the process list)")
	}
	return name, password, nil
}

// saslBanner is the banner's SASL line, when a listener uses SASL; it
// warns when no user could authenticate.
func saslBanner(b *broker.Broker, f serveFlags, logger *slog.Logger) string {
	for _, ln := range b.Listeners() {
		if !ln.Protocol.SASL() {
			continue
		}
		users := b.ScramUserCount()
		if users == 0 {
			logger.Warn("a SASL listener is served and no SCRAM user exists: nobody can authenticate; start with --bootstrap-user NAME:PASSWORD (or SUSHKA_BOOTSTRAP_USER)")
		}
		lifetime := "no session limit"
		if f.connectionsMaxReauthMs > 0 {
			lifetime = fmt.Sprintf("sessions of %s, then re-authentication", time.Duration(f.connectionsMaxReauthMs)*time.Millisecond)
		}
		return fmt.Sprintf("  sasl             %s; SCRAM users: %d; %s\n", strings.Join(strings.Split(f.saslMechanisms, ","), ", "), users, lifetime)
	}
	return ""
}
