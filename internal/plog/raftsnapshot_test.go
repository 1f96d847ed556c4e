package plog_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// snapshotProducer is the idempotent producer of snapshotEntry's first
// entries.
const snapshotProducer = 5

// snapshotTime stamps the producer's batches: now, so that a reopened log
// does not take the producer for expired (producer.id.expiration.ms).
var snapshotTime = time.Now().UnixMilli()

// snapshotEntry is entry i of term 2: for i < 8 a batch of
// snapshotProducer at sequence i-2, else a record naming it.
func snapshotEntry(i uint64) *pb.Entry {
	if i >= 8 {
		return recordEntry(i, 2)
	}
	b := batch.Build(batch.BuildOptions{ProducerID: snapshotProducer, BaseSequence: int32(i - 2), ValueSize: 100, BaseTimestamp: snapshotTime})
	return &pb.Entry{Index: new(i), Term: new(uint64(2)), Type: pb.EntryType_EntryNormal.Enum(), Data: b}
}

// saveApplied saves entries [from, to] of entry (snapshotEntry when nil),
// committed, and applies them.
func saveApplied(t *testing.T, rs *plog.RaftStorage, from, to uint64, entry func(uint64) *pb.Entry) {
	t.Helper()
	if entry == nil {
		entry = snapshotEntry
	}
	for i := from; i <= to; i++ {
		e := entry(i)
		if err := rs.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(i)}, []*pb.Entry{e}, nil, true); err != nil {
			t.Fatal(err)
		}
		applied, err := rs.Entries(i, i+1, math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		rs.Apply(applied)
	}
}

// compactedLeader is a raft log of entries 2..40 (1 KiB segments),
// committed and applied, whose retention.bytes removed every sealed
// segment: its snapshot is past entry 8 (the producer's batches).
func compactedLeader(t *testing.T) (*plog.RaftStorage, *pb.Snapshot) {
	return compactedLeaderOf(t, 40, nil)
}

// compactedLeaderOf is compactedLeader with entries 2..last of entry.
func compactedLeaderOf(t *testing.T, last uint64, entry func(uint64) *pb.Entry) (*plog.RaftStorage, *pb.Snapshot) {
	t.Helper()
	cfg := raftTestConfig(vfs.NewMem(), 1<<10)
	cfg.RetentionBytes = 0
	rs := bootstrapped(t, cfg)
	saveApplied(t, rs, 2, last, entry)
	if err := rs.Log().EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	snap, err := rs.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := rs.FirstIndex(); snap.GetMetadata().GetIndex() < 8 || first != snap.GetMetadata().GetIndex()+1 {
		t.Fatalf("snapshot at %d, first index %d after retention", snap.GetMetadata().GetIndex(), first)
	}
	if got, want := rs.Log().LogStartOffset(), rs.EndOffset(snap.GetMetadata().GetIndex()); got != want {
		t.Fatalf("log start %d, want the first kept entry's offset %d", got, want)
	}
	return rs, snap
}

// TestRaftRetentionIsASnapshot: retention.bytes on a raft log removes whole
// segments of applied entries and makes the snapshot at the last entry
// removed: FirstIndex past it, Term of its index kept, Entries below it
// ErrCompacted, the data small (no record: the producer table before the
// first kept entry), the ConfState the log's. Fails on the plain log's
// retention (segments removed behind the raft index's back, no snapshot).
func TestRaftRetentionIsASnapshot(t *testing.T) {
	rs, snap := compactedLeader(t)
	k := snap.GetMetadata().GetIndex()
	if tm, err := rs.Term(k); err != nil || tm != 2 {
		t.Fatalf("Term(%d) = %d, %v after the compaction; want 2", k, tm, err)
	}
	if _, err := rs.Entries(k, k+1, math.MaxUint64); err == nil {
		t.Fatalf("Entries(%d) below the first index answered", k)
	}
	if n := len(snap.GetData()); n > 512 {
		t.Fatalf("snapshot data of %d bytes: more than the producer table", n)
	}
	if vs := snap.GetMetadata().GetConfState().GetVoters(); len(vs) != 1 || vs[0] != 1 {
		t.Fatalf("snapshot voters %v", vs)
	}
	es, err := rs.Entries(k+1, 41, math.MaxUint64)
	if err != nil || len(es) != int(40-k) {
		t.Fatalf("Entries above the snapshot: %d, %v", len(es), err)
	}
}

// installCase is a follower's raft log on mem: entries 2..5, committed to
// 3, behind the leader's snapshot.
func installCase(t *testing.T, fs vfs.FS) *plog.RaftStorage {
	t.Helper()
	rs := bootstrapped(t, raftTestConfig(fs, 1<<10))
	for i := uint64(2); i <= 5; i++ {
		if err := rs.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(min(i, 3))}, []*pb.Entry{snapshotEntry(i)}, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// checkInstalled fails unless follower holds the leader's log from the
// snapshot on: the same first and last index, the same bytes from the
// log start, and the producer's state (a retry of its last batch, below
// the log start, known as a duplicate).
func checkInstalled(t *testing.T, leader, follower *plog.RaftStorage) {
	t.Helper()
	lf, _ := leader.FirstIndex()
	ff, _ := follower.FirstIndex()
	ll, _ := leader.LastIndex()
	fl, _ := follower.LastIndex()
	if lf != ff || ll != fl {
		t.Fatalf("follower holds [%d, %d], leader [%d, %d]", ff, fl, lf, ll)
	}
	a, b := leader.Log(), follower.Log()
	if a.LogStartOffset() != b.LogStartOffset() || a.HighWatermark() != b.HighWatermark() {
		t.Fatalf("follower: log start %d, high watermark %d; leader %d, %d", b.LogStartOffset(), b.HighWatermark(), a.LogStartOffset(), a.HighWatermark())
	}
	if !bytes.Equal(readBytes(t, a), readBytes(t, b)) {
		t.Fatal("the follower's bytes from the log start differ from the leader's")
	}
	ps, err := b.Producers()
	if err != nil || len(ps) != 1 || ps[0].ProducerID != snapshotProducer || ps[0].LastSequence != 5 {
		t.Fatalf("follower's producers %+v, %v; want producer %d at sequence 5", ps, err, snapshotProducer)
	}
}

// readBytes is every byte of l from its log start to its high watermark.
func readBytes(t *testing.T, l *plog.Log) []byte {
	t.Helper()
	var out []byte
	for from := l.LogStartOffset(); from < l.HighWatermark(); {
		res, err := l.Read(from, 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range res.Chunks {
			buf := make([]byte, ch.Len)
			if _, err := ch.File.ReadAt(buf, ch.Pos); err != nil {
				t.Fatal(err)
			}
			out = append(out, buf...)
			for p := buf; len(p) > 0; {
				h, _ := batch.ParseHeader(p)
				from = h.LastOffset() + 1
				p = p[h.Size():]
			}
		}
		res.Release()
	}
	return out
}

// catchUp saves and applies the leader's entries after the follower's
// last on the follower.
func catchUp(t *testing.T, leader, follower *plog.RaftStorage) {
	t.Helper()
	fl, _ := follower.LastIndex()
	ll, _ := leader.LastIndex()
	es, err := leader.Entries(fl+1, ll+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(ll)}, es, nil, true); err != nil {
		t.Fatal(err)
	}
	follower.Apply(es)
}

// TestRaftInstallSnapshot: a follower whose log (entries 2..5, 4 and 5 not
// committed) ends before the leader's first index takes the leader's
// snapshot: its log emptied, begun again at the first kept entry's
// offset, the producer table the snapshot's; then the leader's entries,
// and it holds the leader's bytes; reopened, the same. Fails when a
// snapshot is refused over a log holding entries (step 2's rule).
func TestRaftInstallSnapshot(t *testing.T) {
	leader, snap := compactedLeader(t)
	mem := vfs.NewMem()
	follower := installCase(t, mem)
	if err := follower.Save(nil, nil, snap, true); err != nil {
		t.Fatal(err)
	}
	if hwm, want := follower.Log().HighWatermark(), leader.EndOffset(snap.GetMetadata().GetIndex()); hwm != want {
		t.Fatalf("high watermark %d after the install, want the snapshot's end %d", hwm, want)
	}
	catchUp(t, leader, follower)
	checkInstalled(t, leader, follower)
	follower.Close()
	checkInstalled(t, leader, openRaft(t, raftTestConfig(mem, 1<<10)))
}

// TestRaftCrashDuringInstall: the install of a leader's snapshot crashed
// at each of its file operations in turn (the operation fails, the disk
// keeps what was synced): the log reopens, either as it was (then takes
// the snapshot again) or with the snapshot installed, never a mixture
// (the old segments read as entries after the snapshot, or no segment to
// write to); then it takes the leader's entries and holds its bytes.
// Fails when Open does not finish the removal (the old segments read as
// the entries after the snapshot: crashes at operations 6 to 9), or when a
// log left with no segment is not begun at the snapshot's offset (the
// same crashes).
func TestRaftCrashDuringInstall(t *testing.T) {
	leader, snap := compactedLeader(t)
	for n := 1; ; n++ {
		mem := vfs.NewMem()
		installCase(t, mem).Close()
		ops, armed := 0, false
		var crashed *vfs.MemFS
		fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, name string) error {
			if crashed != nil {
				return errors.New("crashed")
			}
			if !armed {
				return nil
			}
			switch op {
			case vfs.OpCreate, vfs.OpRemove, vfs.OpRename, vfs.OpSyncDir, vfs.OpSync, vfs.OpWrite, vfs.OpWritev, vfs.OpTruncate:
				if ops++; ops == n {
					crashed = mem.Crash(nil)
					return errors.New("killed")
				}
			}
			return nil
		}))
		follower, err := plog.OpenRaftStorage(raftTestConfig(fs, 1<<10))
		if err != nil {
			t.Fatal(err)
		}
		armed = true // count the install's operations only
		err = follower.Save(nil, nil, snap, true)
		armed = false
		follower.Close()
		if crashed == nil {
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the install takes %d file operations, each crashed in turn", n-1)
			return
		}
		t.Run(fmt.Sprint("op", n), func(t *testing.T) {
			rs, err := plog.OpenRaftStorage(raftTestConfig(crashed, 1<<10))
			if err != nil {
				t.Fatalf("reopening after a crash at operation %d of the install: %v", n, err)
			}
			defer rs.Close()
			if first, _ := rs.FirstIndex(); first != snap.GetMetadata().GetIndex()+1 {
				// As it was: the entries up to its commit index at least.
				if last, _ := rs.LastIndex(); first != 2 || last < 3 || last > 5 {
					t.Fatalf("neither the old log nor the snapshot: [%d, %d]", first, last)
				}
				if err := rs.Save(nil, nil, snap, true); err != nil {
					t.Fatal(err)
				}
			}
			catchUp(t, leader, rs)
			checkInstalled(t, leader, rs)
		})
	}
}

// txnEntry is entry i of TestRaftSnapshotOpenTransaction: 2 producer 7's
// first transactional batch, 31 its abort marker, records between.
func txnEntry(i uint64) *pb.Entry {
	var b []byte
	switch i {
	case 2:
		b = batch.Build(batch.BuildOptions{ProducerID: 7, ValueSize: 100, BaseTimestamp: snapshotTime, Attributes: batch.AttrTransactional})
	case 31:
		b = batch.BuildControl(7, 0, false, 0, snapshotTime)
	default:
		return recordEntry(i, 2)
	}
	return &pb.Entry{Index: new(i), Term: new(uint64(2)), Type: pb.EntryType_EntryNormal.Enum(), Data: b}
}

// TestRaftSnapshotOpenTransaction: a transaction begun in an entry that
// retention removed is open in the snapshot: the follower that installs it
// holds its LSO where the leader does (at the log start, below the high
// watermark), and the abort marker after it makes the same
// aborted-transactions entry on both (first offset 0, from the snapshot),
// the LSO then at the high watermark. Fails when the snapshot's producers
// do not carry their open transactions into the log's (the follower's LSO
// at its high watermark).
func TestRaftSnapshotOpenTransaction(t *testing.T) {
	leader, snap := compactedLeaderOf(t, 30, txnEntry)
	follower := installCase(t, vfs.NewMem())
	if err := follower.Save(nil, nil, snap, true); err != nil {
		t.Fatal(err)
	}
	catchUp(t, leader, follower)
	for name, rs := range map[string]*plog.RaftStorage{"leader": leader, "follower": follower} {
		l := rs.Log()
		if lso := l.LastStableOffset(); lso != l.LogStartOffset() || lso >= l.HighWatermark() {
			t.Fatalf("%s: LSO %d with the transaction open, want the log start %d (high watermark %d)", name, lso, l.LogStartOffset(), l.HighWatermark())
		}
	}
	saveApplied(t, leader, 31, 31, txnEntry)
	catchUp(t, leader, follower)
	var aborted [][]plog.AbortedTxn
	for name, rs := range map[string]*plog.RaftStorage{"leader": leader, "follower": follower} {
		l := rs.Log()
		if lso := l.LastStableOffset(); lso != l.HighWatermark() {
			t.Fatalf("%s: LSO %d after the abort, want the high watermark %d", name, lso, l.HighWatermark())
		}
		res, err := l.ReadCommitted(l.LogStartOffset(), 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		got := append([]plog.AbortedTxn(nil), res.Aborted...)
		res.Release()
		if len(got) != 1 || got[0].ProducerID != 7 || got[0].FirstOffset != 0 {
			t.Fatalf("%s: aborted %+v, want producer 7's from offset 0", name, got)
		}
		aborted = append(aborted, got)
	}
	if aborted[0][0] != aborted[1][0] {
		t.Fatalf("aborted entries differ: %+v and %+v", aborted[0], aborted[1])
	}
}
