// Command jetstream is the NATS JetStream peer for `sushka bench`: JetStream
// does not speak Kafka, so it comes as two programs in one binary.
//
//	jetstream serve -listen 127.0.0.1:14222 -admin 127.0.0.1:19646 -store-dir DIR [-sync always]
//
// runs nats-server (the Go module, embedded) in its own process with file
// storage: -sync default keeps the server's default (fsync every 2 minutes,
// acks from the page cache) and -sync always is `sync_interval: always`
// (fsync before every ack). /v1/runtime on -admin is its passport.
//
//	jetstream bench -server nats://127.0.0.1:14222
//
// is one round of load in its own process: it creates a fresh stream (file
// storage, one replica), publishes records of SUSHKA_BENCH_RECORD_SIZE
// bytes with PublishAsync, open loop at SUSHKA_BENCH_RATE (latency from the
// due time to the PubAck) or closed loop with SUSHKA_BENCH_WINDOW
// outstanding when SUSHKA_BENCH_MAX=true, for SUSHKA_BENCH_DURATION, and
// prints one bench.RoundResult as JSON on its last line. That is the
// --vs-exec protocol of `sushka bench`, which runs it for each interleaved
// round. Codecs do not apply (JetStream stores what it is sent).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sushka-io/sushka/bench"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: jetstream serve|bench [flags]"))
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "bench":
		runBench(os.Args[2:])
	default:
		fail(fmt.Errorf("unknown command %q: serve or bench", os.Args[1]))
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:14222", "client listener")
	admin := fs.String("admin", "127.0.0.1:19646", `HTTP address for /v1/runtime ("" for none)`)
	storeDir := fs.String("store-dir", "", "JetStream file storage directory (required)")
	sync := fs.String("sync", "default", `"default" (server default sync interval) or "always" (sync_interval: always)`)
	_ = fs.Parse(args)
	if *storeDir == "" {
		fail(fmt.Errorf("-store-dir is required"))
	}
	host, portStr, err := net.SplitHostPort(*listen)
	if err != nil {
		fail(err)
	}
	port, _ := strconv.Atoi(portStr)
	opts := &server.Options{Host: host, Port: port, JetStream: true, StoreDir: *storeDir, NoSigs: true}
	durability := "file storage, default sync interval (fsync every 2 min): PubAck from the page cache"
	switch *sync {
	case "default":
	case "always":
		opts.SyncAlways = true
		durability = "file storage, sync_interval: always (fsync before every PubAck)"
	default:
		fail(fmt.Errorf("-sync %q: default or always", *sync))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fail(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		fail(fmt.Errorf("nats-server did not start"))
	}
	doc := bench.PeerRuntime("nats-server "+server.VERSION+" JetStream", *storeDir, durability)
	if *admin != "" {
		l, err := net.Listen("tcp", *admin)
		if err != nil {
			fail(err)
		}
		go bench.ServeRuntime(l, doc)
	}
	fmt.Fprintf(os.Stderr, "nats-server %s pid %d on %s; %s; storage %s\n", server.VERSION, os.Getpid(), *listen, durability, doc.Storage)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
}

func env(name, def string) string {
	if v := os.Getenv("SUSHKA_BENCH_" + name); v != "" {
		return v
	}
	return def
}

func runBench(args []string) {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	url := fs.String("server", "nats://127.0.0.1:14222", "NATS server URL")
	size := fs.Int("record-size", atoi(env("RECORD_SIZE", "1024")), "record size (SUSHKA_BENCH_RECORD_SIZE)")
	rate := fs.Float64("rate", atof(env("RATE", "10000")), "offered records/s (SUSHKA_BENCH_RATE)")
	maxMode := fs.Bool("max", env("MAX", "false") == "true", "closed loop (SUSHKA_BENCH_MAX)")
	window := fs.Int("window", atoi(env("WINDOW", "10000")), "outstanding publishes in the closed loop (SUSHKA_BENCH_WINDOW)")
	duration := fs.Duration("duration", dur(env("DURATION", "10s")), "round length (SUSHKA_BENCH_DURATION)")
	drain := fs.Duration("drain", dur(env("DRAIN", "30s")), "wait for outstanding acks (SUSHKA_BENCH_DRAIN)")
	_ = fs.Parse(args)

	ctx := context.Background()
	nc, err := nats.Connect(*url)
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	var futures sync.Map // *nats.Msg → func(error)
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(max(*window, 1)*2+1000),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) {
			if f, ok := futures.LoadAndDelete(m); ok {
				f.(func(error))(nil)
			}
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			if f, ok := futures.LoadAndDelete(m); ok {
				f.(func(error))(err)
			}
		}))
	if err != nil {
		fail(err)
	}
	name := fmt.Sprintf("BENCH_%d", time.Now().UnixNano())
	subject := "bench." + name
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	stream, err := js.CreateStream(sctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage, Replicas: 1})
	cancel()
	if err != nil {
		fail(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = js.DeleteStream(dctx, stream.CachedInfo().Config.Name)
		cancel()
	}()
	payloads := bench.Payloads(4096, *size)
	// Warm: one publish through before the clock starts.
	if _, err := js.Publish(ctx, subject, payloads[0]); err != nil {
		fail(err)
	}
	op := func(seq int64, _ time.Time, done func(error)) {
		m := &nats.Msg{Subject: subject, Data: payloads[int(seq)%len(payloads)]}
		futures.Store(m, done)
		if _, err := js.PublishMsgAsync(m); err != nil {
			if f, ok := futures.LoadAndDelete(m); ok {
				f.(func(error))(err)
			}
		}
	}
	var l bench.LoadResult
	if *maxMode {
		l = bench.ClosedLoop(ctx, *window, *duration, *drain, op)
	} else {
		l = bench.OpenLoop(ctx, *rate, *duration, *drain, op)
	}
	var r bench.RoundResult
	r.FromLoad(l, l.Acked*int64(*size))
	r.Note = "JetStream PublishAsync, file storage, 1 replica; latency to the PubAck"
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func atoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		fail(err)
	}
	return v
}

func atof(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fail(err)
	}
	return v
}

func dur(s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		fail(err)
	}
	return v
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "jetstream:", err)
	os.Exit(1)
}
