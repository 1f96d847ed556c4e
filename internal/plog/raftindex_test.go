package plog

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestRaftIndexInMemoryOnlyActive: only the active segment's index array
// is in memory; the sealed segments' are in their sidecars, after writing
// and after a reopen, and Entries reads them back from there.
func TestRaftIndexInMemoryOnlyActive(t *testing.T) {
	cfg := DefaultConfig(vfs.NewMem(), "/p")
	cfg.SegmentBytes, cfg.Logger = 256, quietLogger
	for round := 0; round < 2; round++ {
		rs, err := OpenRaftStorage(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := rs.Save(&pb.HardState{Term: new(uint64(1))}, nil, nil, true); err != nil {
				t.Fatal(err)
			}
			for i := uint64(1); i <= 20; i++ {
				e := &pb.Entry{Index: new(i), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum(),
					Data: batch.BuildRecords([]batch.KeyValue{{Value: []byte("v")}}, 0, 0)}
				if err := rs.Save(nil, []*pb.Entry{e}, nil, true); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(rs.segs) < 4 {
			t.Fatalf("%d segments", len(rs.segs))
		}
		var inMemory uint64
		for i, r := range rs.segs {
			sealed := i < len(rs.segs)-1
			if sealed != r.onDisk || sealed && r.entries != nil {
				t.Fatalf("round %d: segment %d of %d: onDisk %v, %d entries in memory", round, i, len(rs.segs), r.onDisk, len(r.entries))
			}
			inMemory += uint64(len(r.entries))
		}
		if last := rs.segs[len(rs.segs)-1]; inMemory != last.count {
			t.Fatalf("round %d: %d entries in memory, the active segment has %d", round, inMemory, last.count)
		}
		es, err := rs.Entries(1, 21, 1<<30)
		if err != nil || len(es) != 20 {
			t.Fatalf("round %d: %d entries, %v", round, len(es), err)
		}
		for i, e := range es {
			if h, _ := batch.ParseHeader(e.Data); h.BaseOffset != int64(i) || e.GetIndex() != uint64(i+1) {
				t.Fatalf("round %d: entry %d at offset %d", round, e.GetIndex(), h.BaseOffset)
			}
		}
		rs.Close()
	}
}

// TestRaftStorageMemory: the heap an idle, bootstrapped raft log costs
// beyond a plain Log of the same empty partition (the RaftStorage, its
// segment array, term runs and snapshot), over 1,000 partitions on one
// in-memory filesystem. Loose bound: the regression gate for issue 12's
// per-partition budget; the figure is in docs/replication.md §3b.
func TestRaftStorageMemory(t *testing.T) {
	const n = 1000
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	measure := func(raft bool) uint64 {
		fs := vfs.NewMem()
		cache := NewFileCache(64)
		keep := make([]any, 0, n)
		before := heap()
		for i := range n {
			cfg := DefaultConfig(fs, fmt.Sprintf("/p%d", i))
			cfg.Logger, cfg.FileCache = quietLogger, cache
			if !raft {
				l, err := Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				keep = append(keep, l)
				continue
			}
			rs, err := OpenRaftStorage(cfg)
			if err != nil {
				t.Fatal(err)
			}
			boot := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
			if err := rs.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, nil, boot, true); err != nil {
				t.Fatal(err)
			}
			keep = append(keep, rs)
		}
		per := (heap() - before) / n
		runtime.KeepAlive(keep)
		return per
	}
	plain, raft := measure(false), measure(true)
	t.Logf("heap per idle partition (with its in-memory files): plain Log %d B, raft log %d B (+%d B)", plain, raft, int64(raft)-int64(plain))
	if raft > plain+4<<10 {
		t.Fatalf("a raft log costs %d B more than a plain one, want at most 4 KiB", raft-plain)
	}
}

// TestOpenRaftStorageRefusesAPlainLog: a partition written by Produce (no
// raft-state, no raft-snapshot) is not taken for a raft log.
func TestOpenRaftStorageRefusesAPlainLog(t *testing.T) {
	fs := vfs.NewMem()
	cfg := DefaultConfig(fs, "/p")
	cfg.Logger, cfg.SegmentBytes = quietLogger, 256
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // a few segments
		if _, err := l.Append(batch.BuildRecords([]batch.KeyValue{{Value: []byte("v")}}, 0, 0), AckForced); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if rs, err := OpenRaftStorage(cfg); !errors.Is(err, ErrNotRaftLog) {
		if rs != nil {
			rs.Close()
		}
		t.Fatalf("OpenRaftStorage of a plain log: %v, want ErrNotRaftLog", err)
	}
	names, _ := fs.List("/p")
	for _, name := range names {
		if strings.HasSuffix(name, raftIndexSuffix) || strings.HasPrefix(name, "raft-") {
			t.Fatalf("refusing the plain log left %s in its directory", name)
		}
	}
}
