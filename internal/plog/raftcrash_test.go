package plog_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Crash tests of the raft storage on vfs's crash simulation and fault
// injection: what a Save acknowledged survives, whole, with its term; what
// it did not may be gone but is never half there; the hard state never
// runs ahead of the entries it commits.

// saveAll saves entries [from, to] of term, one Save each, with the hard
// state's commit at commit (0: none).
func saveAll(t *testing.T, rs *plog.RaftStorage, from, to, term, commit uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		var hs *pb.HardState
		if commit > 0 {
			hs = &pb.HardState{Term: new(term), Vote: new(uint64(1)), Commit: new(min(commit, i))}
		}
		if err := rs.Save(hs, ents(i, term), nil, true); err != nil {
			t.Fatal(err)
		}
	}
}

// bootstrapped is a raft storage on fs bootstrapped as raftnode does it
// (snapshot at 1, term 1).
func bootstrapped(t *testing.T, cfg plog.Config) *plog.RaftStorage {
	t.Helper()
	rs := openRaft(t, cfg)
	boot := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := rs.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, nil, boot, true); err != nil {
		t.Fatal(err)
	}
	return rs
}

// checkLog fails unless rs holds exactly entries 2..last with the terms
// given by term(i), each the value recordEntry wrote, at consecutive
// offsets from 0.
func checkLog(t *testing.T, rs *plog.RaftStorage, last uint64, term func(uint64) uint64) {
	t.Helper()
	got, err := rs.LastIndex()
	if err != nil || got != last {
		t.Fatalf("LastIndex = %d, %v; want %d", got, err, last)
	}
	if last < 2 {
		return
	}
	es, err := rs.Entries(2, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	var want []*pb.Entry
	for i := uint64(2); i <= last; i++ {
		want = append(want, recordEntry(i, term(i)))
		if tm, err := rs.Term(i); err != nil || tm != term(i) {
			t.Fatalf("Term(%d) = %d, %v; want %d", i, tm, err, term(i))
		}
	}
	if !slices.Equal(describe(t, es), describe(t, want)) {
		t.Fatalf("entries %v, want %v", describe(t, es), describe(t, want))
	}
	for k, e := range es {
		// One record per entry: entry i is at offset i-2.
		if off := int64(uint64(e.Data[0])<<56 | uint64(e.Data[1])<<48 | uint64(e.Data[2])<<40 | uint64(e.Data[3])<<32 |
			uint64(e.Data[4])<<24 | uint64(e.Data[5])<<16 | uint64(e.Data[6])<<8 | uint64(e.Data[7])); off != int64(k) {
			t.Fatalf("entry %d at offset %d, want %d", e.GetIndex(), off, k)
		}
	}
}

func constTerm(term uint64) func(uint64) uint64 { return func(uint64) uint64 { return term } }

// TestRaftTornLastBatch: the last batch of the active segment torn (its
// last bytes never reached the disk) is dropped by recovery with it, the
// raft index ends before it, and the log takes a new entry at its index.
func TestRaftTornLastBatch(t *testing.T) {
	for _, cut := range []int64{1, 20, 60} {
		t.Run(fmt.Sprintf("cut%d", cut), func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := raftTestConfig(mem, 1<<20)
			rs := bootstrapped(t, cfg)
			saveAll(t, rs, 2, 9, 2, 0)
			crashed := mem.Crash(nil)
			// The torn tail: the segment's last cut bytes lost.
			seg := path.Join(cfg.Dir, "00000000000000000000.log")
			f, err := crashed.OpenReadWrite(seg)
			if err != nil {
				t.Fatal(err)
			}
			size, _ := f.Size()
			if err := f.Truncate(size - cut); err != nil {
				t.Fatal(err)
			}
			f.Sync()
			f.Close()
			rs = openRaft(t, raftTestConfig(crashed, 1<<20))
			checkLog(t, rs, 8, constTerm(2))
			// A new leader's entry 9 takes the torn one's place and offset.
			saveAll(t, rs, 9, 10, 3, 0)
			rs.Close()
			rs = openRaft(t, raftTestConfig(crashed, 1<<20))
			checkLog(t, rs, 10, func(i uint64) uint64 { return map[bool]uint64{true: 3, false: 2}[i >= 9] })
		})
	}
}

// TestRaftKillBeforeSync: the process killed between Save's write and its
// fsync (the crash taken as the fsync is attempted, with the unsynced
// pages reaching the disk out of order, torn or not at all). Every Save
// that returned is there; the killed one's entry is whole or gone; the
// hard state on disk never commits past the log.
func TestRaftKillBeforeSync(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			var crashed *vfs.MemFS
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, name string) error {
				if op == vfs.OpSync && strings.HasSuffix(name, ".log") && armed.Load() {
					armed.Store(false)
					crashed = mem.CrashOutOfOrder(rng)
					return errors.New("killed")
				}
				return nil
			}))
			cfg := raftTestConfig(fs, 1<<20)
			rs := bootstrapped(t, cfg)
			acked := 2 + uint64(rng.IntN(7))
			saveAll(t, rs, 2, acked, 2, acked) // each commits itself: raft-state moves with the term
			armed.Store(true)
			err := rs.Save(&pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(acked + 1)},
				ents(acked+1, 3, 3), nil, true)
			if err == nil || crashed == nil {
				t.Fatalf("the killed Save returned %v", err)
			}
			if err := rs.Save(nil, ents(acked+3, 3), nil, true); err == nil {
				t.Fatal("a Save after a failed fsync succeeded: the error must be sticky")
			}
			rs.Close()
			rs = openRaft(t, raftTestConfig(crashed, 1<<20))
			last, _ := rs.LastIndex()
			if last < acked || last > acked+2 {
				t.Fatalf("last index %d after the crash, acknowledged %d", last, acked)
			}
			checkLog(t, rs, last, func(i uint64) uint64 { return map[bool]uint64{true: 3, false: 2}[i > acked] })
			hs, _, _ := rs.InitialState()
			if hs.GetTerm() != 2 || hs.GetCommit() > last {
				t.Fatalf("hard state %v after the crash: the killed Save's term, or a commit past the log (%d)", hs, last)
			}
		})
	}
}

// TestRaftStateTornRename: a crash while raft-state is replaced (after the
// temp file's fsync, before or after the rename reaches the disk) leaves
// the old hard state or the new one, never a mixture; a damaged raft-state
// refuses to open (a vote given must not be forgotten).
func TestRaftStateTornRename(t *testing.T) {
	for _, at := range []vfs.Op{vfs.OpRename, vfs.OpSyncDir} {
		for seed := int64(1); seed <= 10; seed++ {
			t.Run(fmt.Sprintf("%v/%d", at, seed), func(t *testing.T) {
				mem := vfs.NewMem()
				var armed atomic.Bool
				var crashed *vfs.MemFS
				rng := rand.New(rand.NewPCG(uint64(seed), 0))
				fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, name string) error {
					if !armed.Load() || op != at || op == vfs.OpRename && !strings.HasSuffix(name, "raft-state.tmp") {
						return nil
					}
					armed.Store(false)
					if op == vfs.OpSyncDir {
						// After the rename, before the directory's sync:
						// the rename may or may not have reached the disk.
						crashed = mem.Crash(rng)
					} else {
						crashed = mem.Crash(nil)
					}
					return errors.New("killed")
				}))
				rs := bootstrapped(t, raftTestConfig(fs, 1<<20))
				saveAll(t, rs, 2, 3, 2, 3)
				armed.Store(true)
				if err := rs.Save(&pb.HardState{Term: new(uint64(5)), Vote: new(uint64(3)), Commit: new(uint64(3))}, nil, nil, true); err == nil {
					t.Fatal("the killed hard state Save succeeded")
				}
				rs.Close()
				rs = openRaft(t, raftTestConfig(crashed, 1<<20))
				hs, _, _ := rs.InitialState()
				// The old file holds the commit index of when it was last
				// written (the commit may lag on disk: raft recomputes it).
				old := hs.GetTerm() == 2 && hs.GetVote() == 1 && hs.GetCommit() <= 3
				replaced := hs.GetTerm() == 5 && hs.GetVote() == 3 && hs.GetCommit() == 3
				if !old && !replaced {
					t.Fatalf("hard state %v after the crash: neither the old (2, 1, ≤3) nor the new (5, 3, 3)", hs)
				}
				if at == vfs.OpRename && !old {
					t.Fatalf("hard state %v: the rename never happened", hs)
				}
				checkLog(t, rs, 3, constTerm(2))
				names, _ := crashed.List("/p")
				for _, n := range names {
					if strings.HasSuffix(n, ".tmp") {
						t.Fatalf("%s left after recovery", n)
					}
				}
			})
		}
	}
	t.Run("damaged", func(t *testing.T) {
		mem := vfs.NewMem()
		cfg := raftTestConfig(mem, 1<<20)
		rs := bootstrapped(t, cfg)
		saveAll(t, rs, 2, 3, 2, 3)
		rs.Close()
		f, err := mem.OpenReadWrite(path.Join(cfg.Dir, "raft-state"))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte{9}, 7) // the term's low byte
		f.Close()
		var ce *plog.CorruptionError
		if _, err := plog.OpenRaftStorage(cfg); !errors.As(err, &ce) {
			t.Fatalf("open with a damaged raft-state: %v, want a *CorruptionError", err)
		}
	})
}

// TestRaftFollowerTruncation: a follower's tail replaced from an index in
// an earlier, sealed segment (raft's conflict): the segments after it go
// with their sidecars, the segment holding the cut keeps the entries
// before it, the new entries take the offsets after them; the log reopens
// to the same entries, also after a crash right after the truncation, and
// a missing sidecar is rebuilt.
func TestRaftFollowerTruncation(t *testing.T) {
	for _, cutAt := range []uint64{3, 5, 8, 11} { // cutAt 5 and 8: inside sealed segments; 11: the last entry
		t.Run(fmt.Sprint(cutAt), func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := raftTestConfig(mem, 256) // about three entries per segment
			rs := bootstrapped(t, cfg)
			saveAll(t, rs, 2, 11, 2, 2)
			// Closed and reopened: the recovery point is the log's end, and
			// the truncation must move it down first.
			rs.Close()
			rs = openRaft(t, cfg)
			segsBefore := countSuffix(t, mem, cfg.Dir, ".log")
			if segsBefore < 3 {
				t.Fatalf("%d segments: the test needs the cut in a sealed one", segsBefore)
			}
			if err := rs.Save(nil, ents(cutAt, 3, 3, 3), nil, true); err != nil {
				t.Fatal(err)
			}
			term := func(i uint64) uint64 { return map[bool]uint64{true: 3, false: 2}[i >= cutAt] }
			checkLog(t, rs, cutAt+2, term)
			crashed := mem.Crash(nil) // everything the truncation did is durable
			rs.Close()
			for _, fs := range []*vfs.MemFS{mem, crashed} {
				rs = openRaft(t, raftTestConfig(fs, 256))
				checkLog(t, rs, cutAt+2, term)
				if n, s := countSuffix(t, fs, cfg.Dir, ".raftindex"), countSuffix(t, fs, cfg.Dir, ".log"); n != s-1 {
					t.Fatalf("%d sidecars for %d segments (want one per sealed segment)", n, s)
				}
				rs.Close()
			}
			// A sidecar lost is rebuilt by the scan.
			names, _ := mem.List(cfg.Dir)
			for _, n := range names {
				if strings.HasSuffix(n, ".raftindex") {
					mem.Remove(path.Join(cfg.Dir, n))
					break
				}
			}
			rs = openRaft(t, raftTestConfig(mem, 256))
			checkLog(t, rs, cutAt+2, term)
			if n, s := countSuffix(t, mem, cfg.Dir, ".raftindex"), countSuffix(t, mem, cfg.Dir, ".log"); n != s-1 {
				t.Fatalf("%d sidecars for %d segments after the rebuild", n, s)
			}
			// Committed entries are never truncated.
			if err := rs.Save(nil, ents(2, 4), nil, true); !errors.Is(err, plog.ErrRaftEntry) {
				t.Fatalf("truncating a committed entry: %v, want ErrRaftEntry", err)
			}
		})
	}
}

func countSuffix(t *testing.T, fs vfs.FS, dir, suffix string) int {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, suffix) {
			n++
		}
	}
	return n
}

// TestRaftBadEntryChangesNothing: a Save whose entries include one that is
// not a record batch is refused (ErrRaftEntry) before the log changes: no
// conflicting tail is truncated for it, nothing is appended.
func TestRaftBadEntryChangesNothing(t *testing.T) {
	rs := bootstrapped(t, raftTestConfig(vfs.NewMem(), 256))
	saveAll(t, rs, 2, 6, 2, 0)
	bad := ents(4, 3, 3)
	bad[1].Data = []byte("not a record batch")
	if err := rs.Save(nil, bad, nil, true); !errors.Is(err, plog.ErrRaftEntry) {
		t.Fatalf("Save of a bad entry: %v, want ErrRaftEntry", err)
	}
	checkLog(t, rs, 6, constTerm(2))
	// Not sticky: the next valid Save goes through.
	saveAll(t, rs, 7, 7, 2, 0)
	checkLog(t, rs, 7, constTerm(2))
}
