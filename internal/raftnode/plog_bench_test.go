package raftnode

import (
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// BenchmarkOneVoterProduce is docs/replication.md section 5's latency gate:
// one raft group with one voter on plog's RaftStorage (path=raft: propose a
// 1 KiB record batch, wait until it is applied: saved, fsynced, committed)
// against today's produce path for the same batch (path=plain: plog Append
// with AckForced). Closed loop, one at a time; ns/op is the latency, p50
// and p99 are reported too. On the OS filesystem in SUSHKA_BENCH_DIR.
func BenchmarkOneVoterProduce(b *testing.B) {
	b.Run("path=raft", benchOneVoterRaft)
	b.Run("path=plain", benchOneVoterPlain)
}

func benchStorageDir(b *testing.B) string {
	root := os.Getenv("SUSHKA_BENCH_DIR")
	if root == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(root, "raftnode-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func benchLogConfig(b *testing.B) plog.Config {
	cfg := plog.DefaultConfig(vfs.OS(), benchStorageDir(b))
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.RetentionTime = -1
	return cfg
}

// closedLoop produces b.N copies of a 1 KiB record batch through produce,
// one at a time, and reports each one's latency.
func closedLoop(b *testing.B, produce func(records []byte) error) {
	proto := batch.Build(batch.BuildOptions{Records: 1, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(proto)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := produce(slices.Clone(proto)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func benchOneVoterRaft(b *testing.B) {
	rs, err := plog.OpenRaftStorage(benchLogConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	n, err := New(Config{ID: 1, Cluster: 1, Listener: ln, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	applied := make(chan struct{}, 1)
	err = n.AddGroup(GroupConfig{ID: 1, Voters: []uint64{1}, Storage: rs, Apply: func(entries []*pb.Entry) {
		for _, e := range entries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
				applied <- struct{}{}
			}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	n.Start()
	b.Cleanup(func() { n.Stop(); rs.Close() })
	if err := n.Campaign(1); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if l, _ := n.Leader(1); l == 1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no leader")
		}
	}
	errs := make(chan error, 1)
	closedLoop(b, func(records []byte) error {
		n.Propose(1, records, func(err error) { errs <- err })
		if err := <-errs; err != nil {
			return err
		}
		<-applied
		return nil
	})
}

func benchOneVoterPlain(b *testing.B) {
	l, err := plog.Open(benchLogConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	closedLoop(b, func(records []byte) error {
		_, err := l.Append(records, plog.AckForced)
		return err
	})
}
