package plog_test

import (
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// idempotentEpoch is the timestamp of idempotentEnts' first batch; each
// next one is a second later.
var idempotentEpoch = time.Now().UnixMilli()

// idempotentEnts are entries index, index+1, … of term term, each a batch
// of one record from idempotent producer 7, sequences seq, seq+1, ….
func idempotentEnts(index, term uint64, seq int32, n int) []*pb.Entry {
	var out []*pb.Entry
	for i := range n {
		b := batch.Build(batch.BuildOptions{ValueSize: 16, ProducerID: 7, BaseSequence: seq + int32(i), BaseTimestamp: idempotentEpoch + int64(i)*1000})
		out = append(out, &pb.Entry{Index: new(index + uint64(i)), Term: new(term), Type: pb.EntryType_EntryNormal.Enum(), Data: b})
	}
	return out
}

// TestRaftReadNeverPastHighWatermark: a raft log's active segment holds
// five entries of which three are committed and applied: Read and
// ReadCommitted return the three, never a byte of the two others (step 2's
// Read returned the segment's whole chunk), the high watermark is their
// end, a long poll is woken only by the next applied entry; reopened, the
// producer table holds the applied entries' sequences only.
func TestRaftReadNeverPastHighWatermark(t *testing.T) {
	mem := vfs.NewMem()
	cfg := raftTestConfig(mem, 1<<20)
	rs := bootstrapped(t, cfg)
	es := idempotentEnts(2, 2, 0, 5)
	if err := rs.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(4))}, es, nil, true); err != nil {
		t.Fatal(err)
	}
	l := rs.Log()
	if hwm := l.HighWatermark(); hwm != 0 {
		t.Fatalf("high watermark %d before anything is applied, want 0", hwm)
	}
	wait := l.Wait()
	rs.Apply(es[:3])
	select {
	case <-wait:
	default:
		t.Fatal("a long poll not woken by the applied entries")
	}
	if hwm := l.HighWatermark(); hwm != 3 {
		t.Fatalf("high watermark %d after applying entries 2-4, want 3", hwm)
	}
	for _, committed := range []bool{false, true} {
		for from := int64(0); from <= 3; from++ {
			read := l.Read
			if committed {
				read = l.ReadCommitted
			}
			res, err := read(from, 1<<20, true)
			if err != nil {
				t.Fatal(err)
			}
			var last int64 = from - 1
			for _, c := range res.Chunks {
				buf := make([]byte, c.Len)
				if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
					t.Fatal(err)
				}
				for len(buf) > 0 {
					h, err := batch.ParseHeader(buf)
					if err != nil {
						t.Fatal(err)
					}
					if h.LastOffset() >= 3 {
						t.Fatalf("read(committed %v) from %d returned offset %d, past the high watermark 3", committed, from, h.LastOffset())
					}
					last = h.LastOffset()
					buf = buf[h.Size():]
				}
			}
			res.Release()
			if last != 2 {
				t.Fatalf("read(committed %v) from %d ended at offset %d, want 2", committed, from, last)
			}
		}
	}
	// ListOffsets by time sees no uncommitted batch either (entry 5, offset
	// 3, is a second later than entry 4).
	if off, _, found, err := l.OffsetForTimestamp(idempotentEpoch + 3000); err != nil || found {
		t.Fatalf("offset for the timestamp of the uncommitted entry 5: %d, found %v, %v; want none", off, found, err)
	}
	if off, _, found, err := l.OffsetForTimestamp(idempotentEpoch + 2000); err != nil || !found || off != 2 {
		t.Fatalf("offset for the timestamp of entry 4: %d, found %v, %v; want 2", off, found, err)
	}
	wait = l.Wait()
	rs.Apply(es[3:4])
	select {
	case <-wait:
	default:
		t.Fatal("a long poll not woken by the next applied entry")
	}
	if hwm := l.HighWatermark(); hwm != 4 {
		t.Fatalf("high watermark %d, want 4", hwm)
	}
	// Entry 6 is not committed: the table reopened holds sequences 0-2 of
	// the committed entries 2-4 (the hard state on disk says 4).
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	rs = openRaft(t, cfg)
	if got := rs.Applied(); got != 4 {
		t.Fatalf("Applied %d after reopening, want 4", got)
	}
	ps, err := rs.Log().Producers()
	if err != nil || len(ps) != 1 || ps[0].LastSequence != 2 {
		t.Fatalf("producers after reopening: %+v, %v; want producer 7 at sequence 2", ps, err)
	}
	// And it takes no append: it does not lead.
	if _, err := rs.Log().Append(batch.BuildRecords([]batch.KeyValue{{Value: []byte("x")}}, 0, 0), plog.AckForced); !errors.Is(err, plog.ErrNotLeader) {
		t.Fatalf("append to a raft log that does not lead: %v, want ErrNotLeader", err)
	}
}

// TestRaftProposalReplaced: a leader's acks=all batch saved at index 3 in
// term 2, then replaced at that index by a new leader's entry of term 3,
// committed and applied, without this replica having been told it lost
// leadership: the batch is answered ErrNotLeader, never success. The test
// plays raft's part (Save, then Apply), as the storage tests do.
func TestRaftProposalReplaced(t *testing.T) {
	rs := bootstrapped(t, raftTestConfig(vfs.NewMem(), 1<<20))
	type proposal struct {
		data []byte
		done func(index, term uint64, err error)
	}
	props := make(chan proposal, 1)
	rs.SetProposer(plog.ProposerFunc(func(data []byte, done func(index, term uint64, err error)) { props <- proposal{data, done} }))
	rs.LeaderChanged(true, 2)
	if rs.Leading() {
		t.Fatal("leading before an entry of its term is applied")
	}
	// raft's empty entry of the new leader, committed and applied.
	empty := &pb.Entry{Index: new(uint64(2)), Term: new(uint64(2)), Type: pb.EntryType_EntryNormal.Enum()}
	if err := rs.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(2))}, []*pb.Entry{empty}, nil, true); err != nil {
		t.Fatal(err)
	}
	rs.Apply([]*pb.Entry{empty})
	if !rs.Leading() {
		t.Fatal("not leading after its term's entry applied")
	}
	answers := make(chan error, 1)
	go func() {
		_, err := rs.Log().Append(batch.BuildRecords([]batch.KeyValue{{Value: []byte("mine")}}, 0, 0), plog.AckForced)
		answers <- err
	}()
	p := <-props
	mine := &pb.Entry{Index: new(uint64(3)), Term: new(uint64(2)), Type: pb.EntryType_EntryNormal.Enum(), Data: p.data}
	if err := rs.Save(nil, []*pb.Entry{mine}, nil, true); err != nil {
		t.Fatal(err)
	}
	p.done(3, 2, nil)
	theirs := recordEntry(3, 3)
	if err := rs.Save(&pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(3))}, []*pb.Entry{theirs}, nil, true); err != nil {
		t.Fatal(err)
	}
	rs.Apply([]*pb.Entry{theirs})
	select {
	case err := <-answers:
		if !errors.Is(err, plog.ErrNotLeader) {
			t.Fatalf("a batch whose entry was replaced answered %v, want ErrNotLeader", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a batch whose entry was replaced is not answered")
	}
	if rs.Leading() {
		t.Fatal("still taking appends after applying a later term's entry")
	}
}

// TestRaftProducersExpire: an idempotent producer idle for
// producer.id.expiration.ms is forgotten by a raft log's Apply at its next
// check (every producer.id.expiration.check.interval.ms), as by the plain
// log's writer; an active one is kept.
func TestRaftProducersExpire(t *testing.T) {
	start := time.Now()
	clk := clock.NewManual(start)
	cfg := raftTestConfig(vfs.NewMem(), 1<<20)
	cfg.Clock = clk
	cfg.ProducerIDExpiration = time.Hour
	rs := bootstrapped(t, cfg)
	save := func(es []*pb.Entry) {
		t.Helper()
		last := es[len(es)-1].GetIndex()
		if err := rs.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(last)}, es, nil, true); err != nil {
			t.Fatal(err)
		}
		rs.Apply(es)
	}
	build := func(index uint64, producer int64, seq int32) *pb.Entry {
		b := batch.Build(batch.BuildOptions{ValueSize: 8, ProducerID: producer, BaseSequence: seq, BaseTimestamp: clk.Now().UnixMilli()})
		return &pb.Entry{Index: new(index), Term: new(uint64(2)), Type: pb.EntryType_EntryNormal.Enum(), Data: b}
	}
	save([]*pb.Entry{build(2, 7, 0), build(3, 8, 0)})
	clk.Advance(59 * time.Minute)
	save([]*pb.Entry{build(4, 8, 1)}) // producer 8 active
	clk.Advance(11 * time.Minute)     // 7 idle for 70 min, 8 for 11; the check is due
	save([]*pb.Entry{build(5, 9, 0)})
	ps, err := rs.Log().Producers()
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.ProducerID)
	}
	if len(ids) != 2 || ids[0] != 8 || ids[1] != 9 {
		t.Fatalf("producers %v after producer 7 idled for 70 minutes, want [8 9]", ids)
	}
}
