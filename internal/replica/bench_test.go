package replica

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Benchmarks of the replicated partition, on the OS filesystem under
// $SUSHKA_BENCH_DIR (a temporary directory otherwise), docs/benchmarks.md
// "The replicated partition". Same-process: the nodes, the disk and the
// producers share the machine; ratios, not capacity.

func benchDir(b *testing.B) string {
	root := os.Getenv("SUSHKA_BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "replica-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func benchLogConfig(dir string) plog.Config {
	cfg := plog.DefaultConfig(vfs.OS(), dir)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.RetentionTime = -1
	return cfg
}

// benchReplicas starts voters nodes on loopback (a real 100 ms ticker),
// each with a replica of one partition in dir, and returns the leader's
// log once it takes appends, and every replica's.
func benchReplicas(b *testing.B, voters int) (*plog.Log, []*plog.Log) {
	return benchReplicasISR(b, voters, 1)
}

// benchReplicasISR is benchReplicas with min.insync.replicas minISR.
func benchReplicasISR(b *testing.B, voters, minISR int) (*plog.Log, []*plog.Log) {
	dir := benchDir(b)
	ids := make([]uint64, voters)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	var nodes []*raftnode.Node
	var parts []*Partition
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		n, err := raftnode.New(raftnode.Config{ID: id, Cluster: 1, Listener: ln, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		p, err := Open(Config{Node: n, Group: 1, Voters: ids, Log: benchLogConfig(fmt.Sprintf("%s/node%d", dir, id)), MinInsyncReplicas: minISR})
		if err != nil {
			b.Fatal(err)
		}
		nodes, parts = append(nodes, n), append(parts, p)
	}
	for _, a := range nodes {
		for _, c := range nodes {
			if a != c {
				a.AddPeer(c.ID(), c.Addr())
			}
		}
		a.Start()
	}
	b.Cleanup(func() {
		for i, n := range nodes {
			n.Stop()
			parts[i].Close()
		}
	})
	if err := nodes[0].Campaign(1); err != nil {
		b.Fatal(err)
	}
	// Leading, and every replica in its ISR (a new leader's ISR is itself
	// and the followers that acknowledged in its term: with min.isr 3 an
	// append in the milliseconds before the last one did is refused).
	for deadline := time.Now().Add(10 * time.Second); !parts[0].Leading() || len(parts[0].ISR()) < voters; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no leader with every replica in sync")
		}
	}
	var logs []*plog.Log
	for _, p := range parts {
		logs = append(logs, p.Log())
	}
	return parts[0].Log(), logs
}

// closedLoop appends b.N copies of a 1 KiB record batch one at a time and
// reports each one's latency.
func closedLoop(b *testing.B, l *plog.Log, ack plog.AckPolicy) {
	proto := batch.Build(batch.BuildOptions{Records: 1, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(proto)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := l.Append(slices.Clone(proto), ack); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkOneVoterProduce is docs/replication.md section 5's latency gate
// for the replicated partition: a one-voter replica (Append AckForced: a
// proposal saved, fsynced, committed and applied) against the plain Log's
// Append AckForced, same batch, same disk. Closed loop, one at a time.
func BenchmarkOneVoterProduce(b *testing.B) {
	b.Run("path=replicated", func(b *testing.B) {
		leader, _ := benchReplicas(b, 1)
		closedLoop(b, leader, plog.AckForced)
	})
	b.Run("path=plain", func(b *testing.B) {
		l, err := plog.Open(benchLogConfig(benchDir(b)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		closedLoop(b, l, plog.AckForced)
	})
}

// BenchmarkMinISR: rf=3, acks=all, one 1 KiB batch at a time (closed loop)
// with min.insync.replicas 1, 2 (raft's majority: the ISR checked before
// each proposal and at its apply) and 3 (answered once every replica holds
// it): docs/benchmarks.md "min.insync.replicas".
func BenchmarkMinISR(b *testing.B) {
	for _, minISR := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("minisr=%d", minISR), func(b *testing.B) {
			leader, _ := benchReplicasISR(b, 3, minISR)
			closedLoop(b, leader, plog.AckForced)
		})
	}
}

// BenchmarkProduceThroughput: 16 producers append 16 KiB batches (16
// records of 1 KiB) concurrently, b.N batches in all, until every replica's
// high watermark has them: records/s and the process's CPU (user + system,
// every replica's included) per GB produced. rf=3 with acks=all and acks=1,
// rf=1 (one voter) and the plain Log with acks=all.
func BenchmarkProduceThroughput(b *testing.B) {
	for _, tc := range []struct {
		name string
		rf   int // 0: the plain Log
		ack  plog.AckPolicy
	}{
		{"rf=3/acks=all", 3, plog.AckForced},
		{"rf=3/acks=1", 3, plog.AckWritten},
		{"rf=1/acks=all", 1, plog.AckForced},
		{"plain/acks=all", 0, plog.AckForced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var leader *plog.Log
			var all []*plog.Log
			if tc.rf == 0 {
				l, err := plog.Open(benchLogConfig(benchDir(b)))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				leader, all = l, []*plog.Log{l}
			} else {
				leader, all = benchReplicas(b, tc.rf)
			}
			throughput(b, leader, all, tc.ack)
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func throughput(b *testing.B, leader *plog.Log, all []*plog.Log, ack plog.AckPolicy) {
	const producers, records = 16, 16
	proto := batch.Build(batch.BuildOptions{Records: records, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	b.SetBytes(int64(len(proto)))
	start, cpu0 := time.Now(), cpuTime()
	b.ResetTimer()
	var wg sync.WaitGroup
	var next sync.Mutex
	left := b.N
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if left == 0 {
					next.Unlock()
					return
				}
				left--
				next.Unlock()
				if _, err := leader.Append(slices.Clone(proto), ack); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	end := int64(b.N * records) // offsets: the data, plus raft's leader entry
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Microsecond) {
		done := true
		for _, l := range all {
			if l.HighWatermark() < end {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("not replicated within a minute")
		}
	}
	b.StopTimer()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.ReportMetric(float64(b.N*records)/elapsed.Seconds(), "records/s")
	gb := float64(b.N) * float64(len(proto)) / 1e9
	b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
}
