package plog

import (
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
