// Command natsserver runs a NATS server with JetStream for the tests and
// benchmarks of stream/nats. It lives in a Go module of its own so that
// nats-server and what it pulls in stay out of Sushka's go.mod; the
// helper stream/nats/natstest builds it with `go build` and runs it as a
// child process.
//
//	natsserver -store-dir DIR [-listen 127.0.0.1:0]
//
// It listens on -listen (port 0: a free port chosen by the kernel), keeps
// JetStream's file storage in -store-dir, prints its client URL
// (nats://127.0.0.1:PORT) as the only line of its standard output once it
// accepts connections, and shuts down when its standard input closes (so
// it never outlives the test that started it) or on SIGTERM/SIGINT.
// Errors go to standard error with exit status 1.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "client listener host:port (port 0: any free port)")
	storeDir := flag.String("store-dir", "", "JetStream file storage directory (required)")
	flag.Parse()
	if *storeDir == "" {
		fail(fmt.Errorf("-store-dir is required"))
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		fail(fmt.Errorf("-listen %q: %w", *listen, err))
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		fail(fmt.Errorf("-listen %q: port: %w", *listen, err))
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		Host:      host,
		Port:      port,
		JetStream: true,
		StoreDir:  *storeDir,
		NoSigs:    true, // this program handles its signals
		NoLog:     true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		fail(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fail(fmt.Errorf("nats-server on %s not ready within 30 s", *listen))
	}
	fmt.Println(srv.ClientURL())

	stop := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent closes our stdin or dies
		stop <- struct{}{}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stop <- struct{}{}
	}()
	<-stop
	srv.Shutdown()
	srv.WaitForShutdown()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "natsserver:", err)
	os.Exit(1)
}
