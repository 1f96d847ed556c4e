package plog_test

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/vfs"
)

// The cases of etcd raft's storage_test.go (for MemoryStorage), run
// against both implementations of raftnode.Storage: MemStorage (etcd's
// MemoryStorage) and plog's RaftStorage, and the latter once more with the
// storage closed and reopened from its files before every check. Entries
// are record batches (a plog storage stores nothing else as a normal
// entry); they are compared by index, term, type and record value, since
// the plog storage patches each batch's base offset and leader epoch.
// Compact and CreateSnapshot are MemoryStorage's own API, outside
// raft.Storage: the plog storage's snapshots are the log start (a later
// step), so their cases are not ported.

type storageImpl struct {
	name string
	// open returns an empty storage and a function that returns it as a
	// restart would see it (the same one for MemStorage).
	open func(t *testing.T) (raftnode.Storage, func() raftnode.Storage)
}

func storageImpls() []storageImpl {
	plogImpl := func(reopenEach bool) func(t *testing.T) (raftnode.Storage, func() raftnode.Storage) {
		return func(t *testing.T) (raftnode.Storage, func() raftnode.Storage) {
			cfg := raftTestConfig(vfs.NewMem(), 256)
			rs := openRaft(t, cfg)
			cur := rs
			return rs, func() raftnode.Storage {
				if !reopenEach {
					return cur
				}
				if err := cur.Close(); err != nil {
					t.Fatal(err)
				}
				cur = openRaft(t, cfg)
				return cur
			}
		}
	}
	return []storageImpl{
		{"MemStorage", func(*testing.T) (raftnode.Storage, func() raftnode.Storage) {
			s := raftnode.NewMemStorage()
			return s, func() raftnode.Storage { return s }
		}},
		{"plog", plogImpl(false)},
		{"plog-reopened", plogImpl(true)},
	}
}

// raftTestConfig is a raft log in /p of fs with segments of segmentBytes.
func raftTestConfig(fs vfs.FS, segmentBytes int64) plog.Config {
	cfg := plog.DefaultConfig(fs, "/p")
	cfg.SegmentBytes = segmentBytes
	cfg.FileCache = plog.NewFileCache(16)
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func openRaft(t testing.TB, cfg plog.Config) *plog.RaftStorage {
	t.Helper()
	rs, err := plog.OpenRaftStorage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// ents are entries index, index+1, … with the given terms (etcd's
// index(i).terms(…)), each a batch of one record whose value names it.
func ents(index uint64, terms ...uint64) []*pb.Entry {
	var out []*pb.Entry
	for i, term := range terms {
		out = append(out, recordEntry(index+uint64(i), term))
	}
	return out
}

func recordEntry(index, term uint64) *pb.Entry {
	v := fmt.Sprintf("value %d/%d", index, term)
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryType_EntryNormal.Enum(),
		Data: batch.BuildRecords([]batch.KeyValue{{Value: []byte(v)}}, 0, 1700000000000)}
}

// describe renders entries as index/term/type/value for comparison.
func describe(t testing.TB, es []*pb.Entry) []string {
	t.Helper()
	var out []string
	for _, e := range es {
		d := fmt.Sprintf("%d/%d/%v", e.GetIndex(), e.GetTerm(), e.GetType())
		if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
			err := batch.ForEachKeyValue(e.Data, func(_ int32, _, value []byte) error {
				d += "/" + string(value)
				return nil
			})
			if err != nil {
				t.Fatalf("entry %d: %v", e.GetIndex(), err)
			}
		} else {
			d += fmt.Sprintf("/%x", e.Data)
		}
		out = append(out, d)
	}
	return out
}

// withLog saves a snapshot at (snapIndex, snapIndex) and entries after it
// with terms (etcd's MemoryStorage{ents: index(snapIndex).terms(snapIndex, …)}).
func withLog(t *testing.T, s raftnode.Storage, snapIndex uint64, terms ...uint64) {
	t.Helper()
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(snapIndex), Term: new(snapIndex),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := s.Save(nil, nil, snap, true); err != nil {
		t.Fatal(err)
	}
	if len(terms) > 0 {
		if err := s.Save(nil, ents(snapIndex+1, terms...), nil, true); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRaftStorageTerm(t *testing.T) {
	cases := []struct {
		i    uint64
		err  error
		term uint64
	}{
		{2, raft.ErrCompacted, 0},
		{3, nil, 3},
		{4, nil, 4},
		{5, nil, 5},
		{6, raft.ErrUnavailable, 0},
	}
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			withLog(t, s, 3, 4, 5)
			s = again()
			for _, c := range cases {
				term, err := s.Term(c.i)
				if !errors.Is(err, c.err) || term != c.term {
					t.Errorf("Term(%d) = %d, %v; want %d, %v", c.i, term, err, c.term, c.err)
				}
			}
		})
	}
}

func TestRaftStorageEntries(t *testing.T) {
	all := ents(4, 4, 5, 6)
	size := func(i int) uint64 { return uint64(proto.Size(all[i])) }
	cases := []struct {
		lo, hi, maxSize uint64
		err             error
		want            []*pb.Entry
	}{
		{2, 6, math.MaxUint64, raft.ErrCompacted, nil},
		{3, 4, math.MaxUint64, raft.ErrCompacted, nil},
		{4, 5, math.MaxUint64, nil, ents(4, 4)},
		{4, 6, math.MaxUint64, nil, ents(4, 4, 5)},
		{4, 7, math.MaxUint64, nil, ents(4, 4, 5, 6)},
		// even if maxsize is zero, the first entry should be returned
		{4, 7, 0, nil, ents(4, 4)},
		// limit to 2
		{4, 7, size(0) + size(1), nil, ents(4, 4, 5)},
		{4, 7, size(0) + size(1) + size(2)/2, nil, ents(4, 4, 5)},
		{4, 7, size(0) + size(1) + size(2) - 1, nil, ents(4, 4, 5)},
		// all
		{4, 7, size(0) + size(1) + size(2), nil, ents(4, 4, 5, 6)},
	}
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			withLog(t, s, 3, 4, 5, 6)
			s = again()
			for _, c := range cases {
				got, err := s.Entries(c.lo, c.hi, c.maxSize)
				if !errors.Is(err, c.err) || !slices.Equal(describe(t, got), describe(t, c.want)) {
					t.Errorf("Entries(%d, %d, %d) = %v, %v; want %v, %v", c.lo, c.hi, c.maxSize,
						describe(t, got), err, describe(t, c.want), c.err)
				}
			}
		})
	}
}

func TestRaftStorageLastIndex(t *testing.T) {
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			withLog(t, s, 3, 4, 5)
			s = again()
			if last, err := s.LastIndex(); err != nil || last != 5 {
				t.Fatalf("LastIndex = %d, %v; want 5", last, err)
			}
			if err := s.Save(nil, ents(6, 5), nil, true); err != nil {
				t.Fatal(err)
			}
			s = again()
			if last, err := s.LastIndex(); err != nil || last != 6 {
				t.Fatalf("LastIndex = %d, %v; want 6", last, err)
			}
		})
	}
}

func TestRaftStorageFirstIndex(t *testing.T) {
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			withLog(t, s, 3, 4, 5)
			s = again()
			if first, err := s.FirstIndex(); err != nil || first != 4 {
				t.Fatalf("FirstIndex = %d, %v; want 4", first, err)
			}
		})
	}
}

// TestRaftStorageAppend is etcd's TestStorageAppend through Save: entries
// at or below the snapshot are ignored, a conflicting tail is truncated.
func TestRaftStorageAppend(t *testing.T) {
	cases := []struct {
		entries []*pb.Entry
		want    []*pb.Entry // the log after the snapshot at 3
	}{
		{ents(1, 1, 2), ents(4, 4, 5)},
		{ents(3, 3, 4, 5), ents(4, 4, 5)},
		{ents(3, 3, 6, 6), ents(4, 6, 6)},
		{ents(3, 3, 4, 5, 5), ents(4, 4, 5, 5)},
		// Truncate incoming entries, truncate the existing entries and append.
		{ents(2, 3, 3, 5), ents(4, 5)},
		// Truncate the existing entries and append.
		{ents(4, 5), ents(4, 5)},
		// Direct append.
		{ents(6, 5), ents(4, 4, 5, 5)},
	}
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			for _, c := range cases {
				s, again := impl.open(t)
				withLog(t, s, 3, 4, 5)
				if err := s.Save(nil, c.entries, nil, true); err != nil {
					t.Fatal(err)
				}
				s = again()
				last, _ := s.LastIndex()
				got, err := s.Entries(4, last+1, math.MaxUint64)
				if err != nil || !slices.Equal(describe(t, got), describe(t, c.want)) {
					t.Errorf("after %v: %v, %v; want %v", describe(t, c.entries), describe(t, got), err, describe(t, c.want))
				}
			}
		})
	}
}

func TestRaftStorageApplySnapshot(t *testing.T) {
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	// A raft log's snapshot data has its format (raftsnapshot.go); to
	// MemStorage it is opaque.
	data := func(i uint64) []byte { return plog.SnapshotDataForTest(i + 1) }
	snap := func(i uint64) *pb.Snapshot {
		return &pb.Snapshot{Data: data(i), Metadata: &pb.SnapshotMetadata{Index: new(i), Term: new(i), ConfState: cs}}
	}
	cases := []struct {
		name  string
		snaps []*pb.Snapshot
		err   error
	}{
		{"normal case", []*pb.Snapshot{snap(4)}, nil},
		{"snapshot out of date", []*pb.Snapshot{snap(4), snap(3)}, raft.ErrSnapOutOfDate},
		{"bootstrap with confState", []*pb.Snapshot{{Data: data(0), Metadata: &pb.SnapshotMetadata{ConfState: cs}}}, nil},
	}
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			for _, c := range cases {
				s, again := impl.open(t)
				var err error
				for _, sn := range c.snaps {
					err = s.Save(nil, nil, sn, true)
				}
				if !errors.Is(err, c.err) {
					t.Errorf("%s: %v, want %v", c.name, err, c.err)
				}
				if c.err != nil || raft.IsEmptySnap(c.snaps[len(c.snaps)-1]) {
					continue // Save ignores an empty snapshot (raft's IsEmptySnap), as raftnode does
				}
				s = again()
				got, err := s.Snapshot()
				want := c.snaps[len(c.snaps)-1]
				if err != nil || got.GetMetadata().GetIndex() != want.GetMetadata().GetIndex() ||
					!slices.Equal(got.GetMetadata().GetConfState().GetVoters(), cs.GetVoters()) {
					t.Errorf("%s: Snapshot() = %v, %v", c.name, got, err)
				}
			}
		})
	}
}

// TestRaftStorageBootstrap: an empty storage presents no entries and no
// snapshot until raftnode's bootstrap snapshot at index 1, term 1; then
// the first entry is index 2, and a restart finds the voters.
func TestRaftStorageBootstrap(t *testing.T) {
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			hs, _, _ := s.InitialState()
			if first != 1 || last != 0 || !raft.IsEmptyHardState(hs) {
				t.Fatalf("empty: first %d, last %d, hard state %v", first, last, hs)
			}
			boot := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
				ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
			if err := s.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, nil, boot, true); err != nil {
				t.Fatal(err)
			}
			s = again()
			first, _ = s.FirstIndex()
			last, _ = s.LastIndex()
			term, err := s.Term(1)
			hs, cs, _ := s.InitialState()
			if first != 2 || last != 1 || term != 1 || err != nil || hs.GetTerm() != 1 || hs.GetCommit() != 1 ||
				!slices.Equal(cs.GetVoters(), []uint64{1, 2, 3}) {
				t.Fatalf("bootstrapped: first %d, last %d, term(1) %d %v, hard state %v, conf %v", first, last, term, err, hs, cs)
			}
		})
	}
}

// TestRaftStorageNonRecordEntries: raft's empty leader entry and
// configuration changes (both kinds) come back as they were saved.
func TestRaftStorageNonRecordEntries(t *testing.T) {
	cc, _ := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(uint64(3))})
	cc2, _ := proto.Marshal(&pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(4))}}})
	in := []*pb.Entry{
		{Index: new(uint64(4)), Term: new(uint64(4)), Type: pb.EntryType_EntryNormal.Enum()},
		recordEntry(5, 4),
		{Index: new(uint64(6)), Term: new(uint64(4)), Type: pb.EntryType_EntryConfChange.Enum(), Data: cc},
		{Index: new(uint64(7)), Term: new(uint64(5)), Type: pb.EntryType_EntryConfChangeV2.Enum(), Data: cc2},
	}
	for _, impl := range storageImpls() {
		t.Run(impl.name, func(t *testing.T) {
			s, again := impl.open(t)
			withLog(t, s, 3)
			if err := s.Save(nil, in, nil, true); err != nil {
				t.Fatal(err)
			}
			s = again()
			got, err := s.Entries(4, 8, math.MaxUint64)
			if err != nil || !slices.Equal(describe(t, got), describe(t, in)) {
				t.Fatalf("got %v, %v; want %v", describe(t, got), err, describe(t, in))
			}
		})
	}
}
