// Command kfake runs franz-go's kfake as a Kafka-protocol broker in its own
// process, a peer for `sushka bench --vs`: in memory (default), with a data
// directory (-data-dir: page cache, synced on segment roll and shutdown) or
// with -sync-writes (fsync per batch). It serves the passport document on
// -admin at /v1/runtime, with its pid, like `sushka serve`.
//
//	go run ./kfake -listen 127.0.0.1:19093 -admin 127.0.0.1:19645 -data-dir /work/benchdata/kfake -sync-writes
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sushka-io/sushka/bench"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:19093", "Kafka listener (kfake binds 127.0.0.1 and takes the port)")
	admin := flag.String("admin", "127.0.0.1:19645", `HTTP address for /v1/runtime ("" for none)`)
	dataDir := flag.String("data-dir", "", "persist to this directory (kfake.DataDir); empty: in memory")
	syncWrites := flag.Bool("sync-writes", false, "fsync every batch (kfake.SyncWrites; needs -data-dir)")
	partitions := flag.Int("partitions", 1, "default partitions of auto-created topics")
	flag.Parse()

	_, portStr, err := net.SplitHostPort(*listen)
	if err != nil {
		fail(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		fail(err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(*partitions)}
	durability := "in memory: nothing is written to a disk"
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
		durability = "data dir, page cache: synced on segment roll and shutdown (kfake default)"
		if *syncWrites {
			opts = append(opts, kfake.SyncWrites())
			durability = "data dir, fsync per batch before the ack (kfake.SyncWrites)"
		}
	} else if *syncWrites {
		fail(fmt.Errorf("-sync-writes needs -data-dir"))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	doc := bench.PeerRuntime("kfake (franz-go pkg/kfake)", *dataDir, durability)
	if *admin != "" {
		l, err := net.Listen("tcp", *admin)
		if err != nil {
			fail(err)
		}
		go bench.ServeRuntime(l, doc)
	}
	fmt.Fprintf(os.Stderr, "kfake pid %d listening on %v; %s; storage %s\n", os.Getpid(), c.ListenAddrs(), durability, doc.Storage)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kfake:", err)
	os.Exit(1)
}
