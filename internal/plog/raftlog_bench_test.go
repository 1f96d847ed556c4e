package plog

import (
	"fmt"
	"math"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/vfs"
)

// BenchmarkRaftSave: one entry of a 1 KiB record batch per Save, fsynced
// (mustSync), on the plog storage (store=plog), on etcd's MemoryStorage
// (store=mem: no disk, the floor) and, for the same batch, plain plog
// Append with AckForced (store=append: today's produce path, writer
// goroutine and publisher). On the OS filesystem in SUSHKA_BENCH_DIR.
func BenchmarkRaftSave(b *testing.B) {
	for _, store := range []string{"plog", "mem", "append"} {
		b.Run("store="+store, func(b *testing.B) { benchRaftSave(b, store) })
	}
}

func benchBatch() []byte {
	return batch.Build(batch.BuildOptions{Records: 1, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
}

func openRaftBench(b *testing.B) *RaftStorage {
	cfg := DefaultConfig(vfs.OS(), benchDir(b))
	cfg.Logger, cfg.RetentionTime = quietLogger, -1
	rs, err := OpenRaftStorage(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	return rs
}

func benchRaftSave(b *testing.B, store string) {
	proto := benchBatch()
	b.SetBytes(int64(len(proto)))
	var save func(i uint64) error
	switch store {
	case "append":
		l := openBench(b, WriteSyscall)
		buf := append([]byte(nil), proto...)
		save = func(uint64) error { _, err := l.Append(buf, AckForced); return err }
	default:
		var s raftnode.Storage = raftnode.NewMemStorage()
		if store == "plog" {
			s = openRaftBench(b)
		}
		save = func(i uint64) error {
			e := &pb.Entry{Index: new(i), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum(),
				Data: append([]byte(nil), proto...)}
			return s.Save(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(i - 1)}, []*pb.Entry{e}, nil, true)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := save(uint64(i) + 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRaftEntries: Entries of 1,000 entries of 1 KiB batches at once
// (a follower catching up, maxSize unlimited) from the plog storage (read
// from the segment files: the page cache) and from MemoryStorage.
func BenchmarkRaftEntries(b *testing.B) {
	for _, store := range []string{"plog", "mem"} {
		b.Run("store="+store, func(b *testing.B) {
			const n = 1000
			proto := benchBatch()
			var s raftnode.Storage = raftnode.NewMemStorage()
			if store == "plog" {
				s = openRaftBench(b)
			}
			var es []*pb.Entry
			for i := uint64(1); i <= n; i++ {
				es = append(es, &pb.Entry{Index: new(i), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum(),
					Data: append([]byte(nil), proto...)})
			}
			if err := s.Save(nil, es, nil, true); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(n * len(proto)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := s.Entries(1, n+1, math.MaxUint64)
				if err != nil || len(got) != n {
					b.Fatal(fmt.Sprint(len(got), err))
				}
			}
		})
	}
}
