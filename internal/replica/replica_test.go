package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
)

// sameLogs fails unless every live replica holds the same data batches, at
// the same offsets, byte for byte, and returns them.
func (c *testCluster) sameLogs() []record {
	c.t.Helper()
	var first []record
	firstID := 0
	for i, p := range c.parts {
		if c.isStopped(i) {
			continue
		}
		got := readAll(c.t, p.Log())
		if first == nil && firstID == 0 {
			first, firstID = got, i+1
			continue
		}
		if len(got) != len(first) {
			c.t.Fatalf("node %d holds %d batches, node %d %d", i+1, len(got), firstID, len(first))
		}
		for k := range got {
			if got[k].offset != first[k].offset || !bytes.Equal(got[k].raw, first[k].raw) {
				c.t.Fatalf("batch %d: node %d has offset %d (%d bytes), node %d offset %d (%d bytes), or the bytes differ",
					k, i+1, got[k].offset, len(got[k].raw), firstID, first[k].offset, len(first[k].raw))
			}
		}
	}
	return first
}

// TestProduceVisibleEverywhere: acks=all, acks=1 and acks=0 batches
// appended on the leader are on all three replicas at the offsets the
// leader answered, byte for byte; an acks=all answer comes only once the
// leader's high watermark (the committed end) is past the batch; every
// replica's high watermark ends at the same offset; a follower refuses an
// append with ErrNotLeader, and OnLeader told every node of the leader.
func TestProduceVisibleEverywhere(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	l := c.part(1).Log()
	type acked struct {
		offset int64
		value  string
	}
	var want []acked
	var unanswered []string
	for i := range 60 {
		v := fmt.Sprintf("v%d", i)
		ack := []plog.AckPolicy{plog.AckForced, plog.AckWritten, plog.AckNone}[i%3]
		res, err := appendWithin(l, value(v), ack)
		if err != nil {
			t.Fatalf("append %d (ack %d): %v", i, ack, err)
		}
		switch ack {
		case plog.AckForced:
			if hwm := l.HighWatermark(); hwm <= res.BaseOffset {
				t.Fatalf("acks=all answered at offset %d with the high watermark at %d: not committed", res.BaseOffset, hwm)
			}
			fallthrough
		case plog.AckWritten:
			want = append(want, acked{res.BaseOffset, v})
		default:
			unanswered = append(unanswered, v)
		}
	}
	for _, follower := range []uint64{2, 3} {
		if _, err := appendWithin(c.part(follower).Log(), value("refused"), plog.AckForced); !errors.Is(err, plog.ErrNotLeader) {
			t.Fatalf("append on follower %d: %v, want ErrNotLeader", follower, err)
		}
	}
	// Everything written is committed in the end (acks=0 included).
	c.tickUntil(200, "all 60 batches committed on the leader", func() bool {
		return len(readAll(t, l)) == 60
	})
	hwm := l.HighWatermark()
	c.awaitHWM(hwm)
	got := c.sameLogs()
	at := map[int64]string{}
	for _, r := range got {
		at[r.offset] = r.value
	}
	for _, w := range want {
		if at[w.offset] != w.value {
			t.Fatalf("offset %d holds %q, the leader answered %q there", w.offset, at[w.offset], w.value)
		}
	}
	for i, p := range c.parts {
		if h := p.Log().HighWatermark(); h != hwm {
			t.Fatalf("node %d's high watermark %d, the leader's %d", i+1, h, hwm)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := uint64(1); id <= 3; id++ {
		if ls := c.leaders[id]; len(ls) == 0 || ls[len(ls)-1] != 1 {
			t.Fatalf("node %d: OnLeader reported %v, want the last to be node 1", id, ls)
		}
	}
}

// TestLeaderStoppedDuringAcksAll: four producers append acks=all through
// whichever replica leads while the leader's node is stopped: every
// acknowledged batch is on both surviving replicas at the offset it was
// answered with; no batch is there twice; unacknowledged ones may be
// there or not.
func TestLeaderStoppedDuringAcksAll(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	stopTicks := c.ticking()
	defer stopTicks()
	var (
		mu    sync.Mutex
		acked = map[string]int64{}
		tried int
	)
	const producers, perProducer = 4, 40
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; i < perProducer && time.Now().Before(deadline); {
				leader := c.leader()
				if leader == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				v := fmt.Sprintf("p%d-%d@%d", p, i, leader)
				mu.Lock()
				tried++
				mu.Unlock()
				res, err := appendWithin(c.part(leader).Log(), value(v), plog.AckForced)
				if err != nil {
					if !errors.Is(err, plog.ErrNotLeader) {
						t.Errorf("append on node %d: %v, want ErrNotLeader", leader, err)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked[v] = res.BaseOffset
				mu.Unlock()
				i++
			}
		}()
	}
	// Stop the leader once a third is acknowledged.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= producers*perProducer/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches acknowledged in 10 s", n)
		}
	}
	c.stop(1)
	wg.Wait()
	if len(acked) != producers*perProducer {
		t.Fatalf("%d of %d batches acknowledged", len(acked), producers*perProducer)
	}
	leader := c.leader()
	if leader == 0 {
		t.Fatal("no leader after the producers finished")
	}
	c.awaitHWM(c.part(leader).Log().HighWatermark())
	got := c.sameLogs()
	at := map[string]int64{}
	for _, r := range got {
		if _, dup := at[r.value]; dup {
			t.Fatalf("%s is in the log twice", r.value)
		}
		at[r.value] = r.offset
	}
	for v, off := range acked {
		if o, ok := at[v]; !ok || o != off {
			t.Fatalf("%s acknowledged at offset %d; in the new leader's log: %v at %d", v, off, ok, o)
		}
	}
	// The stopped leader's committed prefix is the survivors'.
	old := readAll(t, c.part(1).Log())
	if len(old) > len(got) {
		t.Fatalf("the old leader committed %d batches, the survivors hold %d", len(old), len(got))
	}
	for k := range old {
		if !bytes.Equal(old[k].raw, got[k].raw) {
			t.Fatalf("batch %d of the old leader's committed log differs from the survivors'", k)
		}
	}
	t.Logf("%d acknowledged of %d tried; %d in the log", len(acked), tried, len(got))
}

// TestIdempotentRetryAfterFailover: an idempotent producer's batches
// acknowledged by the first leader, which then stops; its retry of the last
// one on the new leader is answered with the original offset and not
// written again (the followers applied the producer table from the
// committed entries), the next sequence is taken, a gap is
// OUT_OF_ORDER_SEQUENCE_NUMBER.
func TestIdempotentRetryAfterFailover(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	const producer = 9
	var offsets []int64
	for seq := int32(0); seq < 6; seq++ {
		res, err := appendWithin(c.part(1).Log(), idempotent(producer, seq), plog.AckForced)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, res.BaseOffset)
	}
	c.awaitHWM(offsets[5] + 1)
	c.stop(1)
	leader := c.awaitLeader(200)
	l := c.part(leader).Log()
	for _, seq := range []int32{5, 4} {
		res, err := appendWithin(l, idempotent(producer, seq), plog.AckForced)
		if err != nil || res.BaseOffset != offsets[seq] {
			t.Fatalf("retry of sequence %d on the new leader: offset %d, %v; want the original %d", seq, res.BaseOffset, err, offsets[seq])
		}
	}
	next, err := appendWithin(l, idempotent(producer, 6), plog.AckForced)
	if err != nil || next.BaseOffset <= offsets[5] {
		t.Fatalf("sequence 6: offset %d, %v", next.BaseOffset, err)
	}
	if _, err := appendWithin(l, idempotent(producer, 8), plog.AckForced); !errors.Is(err, plog.ErrOutOfOrderSequence) {
		t.Fatalf("sequence 8 after 6: %v, want ErrOutOfOrderSequence", err)
	}
	c.awaitHWM(next.BaseOffset + 1)
	seen := map[int32]int{}
	for _, r := range c.sameLogs() {
		if r.producer == producer {
			seen[r.seq]++
		}
	}
	for seq := int32(0); seq <= 6; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("sequence %d is in the log %d times", seq, seen[seq])
		}
	}
	if len(seen) != 7 {
		t.Fatalf("sequences in the log: %v", seen)
	}
}

// TestPartitionedLeaderTruncated: the leader cut off from both followers
// takes acks=all batches that cannot commit; it steps down (CheckQuorum)
// and answers every one with ErrNotLeader while still cut off, never
// success; the others elect and commit; healed, the old leader's
// uncommitted tail is replaced by the new leader's entries.
func TestPartitionedLeaderTruncated(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	if _, err := appendWithin(c.part(1).Log(), value("committed"), plog.AckForced); err != nil {
		t.Fatal(err)
	}
	c.cut(1, true)
	const lost = 5
	answers := make(chan error, lost)
	for i := range lost {
		go func() {
			_, err := appendWithin(c.part(1).Log(), value(fmt.Sprintf("lost-%d", i)), plog.AckForced)
			answers <- err
		}()
	}
	// Written by the old leader, never committed.
	c.tickUntil(100, "the old leader's tail written", func() bool {
		_, err := c.part(1).Storage().LastIndex()
		return err == nil && c.part(1).Log().HighWatermark() < c.writtenEnd(1)
	})
	var newLeader uint64
	c.tickUntil(200, "a new leader, the old one stepped down", func() bool {
		newLeader = 0
		for _, id := range []uint64{2, 3} {
			if c.part(id).Leading() {
				newLeader = id
			}
		}
		return newLeader != 0 && !c.part(1).Leading() && len(answers) == lost
	})
	for range lost {
		if err := <-answers; !errors.Is(err, plog.ErrNotLeader) {
			t.Fatalf("a batch of the cut-off leader answered %v, want ErrNotLeader", err)
		}
	}
	res, err := appendWithin(c.part(newLeader).Log(), value("after"), plog.AckForced)
	if err != nil {
		t.Fatal(err)
	}
	c.cut(1, false)
	c.awaitHWM(res.BaseOffset + 1)
	for _, r := range c.sameLogs() {
		if bytes.HasPrefix([]byte(r.value), []byte("lost-")) {
			t.Fatalf("%s, never acknowledged, is in the log", r.value)
		}
	}
	end := c.writtenEnd(newLeader)
	c.tickUntil(200, "the old leader's log ends where the new leader's does", func() bool { return c.writtenEnd(1) == end })
}

// writtenEnd is the offset after the last batch node id's log holds,
// committed or not.
func (c *testCluster) writtenEnd(id uint64) int64 {
	rs := c.part(id).Storage()
	last, err := rs.LastIndex()
	if err != nil {
		c.t.Fatal(err)
	}
	return rs.EndOffset(last)
}

// transactional is a batch of one record of producer id's transaction,
// epoch 0, at sequence seq.
func transactional(id int64, seq int32) []byte {
	return batch.Build(batch.BuildOptions{ProducerID: id, BaseSequence: seq, ValueSize: 8,
		BaseTimestamp: time.Now().UnixMilli(), Attributes: batch.AttrTransactional})
}

// TestTransactionsOnEveryReplica: a transaction's batches and its markers
// go through raft and every replica applies them: while it is open, every
// replica's last stable offset stays at its first batch; committed, the
// LSO reaches the high watermark everywhere; an aborted one is in every
// replica's aborted index (ReadCommitted), and the state survives a
// failover: the new leader still has the next transaction open and fences
// a marker of an older coordinator epoch.
func TestTransactionsOnEveryReplica(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	l := c.part(1).Log()
	ctx := context.Background()
	first, err := appendWithin(l, transactional(11, 0), plog.AckForced)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendWithin(l, transactional(11, 1), plog.AckForced); err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(first.BaseOffset + 2)
	for i, p := range c.parts {
		if lso := p.Log().LastStableOffset(); lso != first.BaseOffset {
			t.Fatalf("node %d: LSO %d with the transaction open from %d", i+1, lso, first.BaseOffset)
		}
	}
	commit, err := l.WriteTxnMarker(ctx, plog.TxnMarker{ProducerID: 11, Commit: true, CoordinatorEpoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(commit + 1)
	for i, p := range c.parts {
		if lso, hwm := p.Log().LastStableOffset(), p.Log().HighWatermark(); lso != hwm {
			t.Fatalf("node %d: LSO %d, high watermark %d after the commit", i+1, lso, hwm)
		}
	}
	// An aborted transaction, then one left open.
	aborted, err := appendWithin(l, transactional(11, 2), plog.AckForced)
	if err != nil {
		t.Fatal(err)
	}
	abort, err := l.WriteTxnMarker(ctx, plog.TxnMarker{ProducerID: 11, CoordinatorEpoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	open, err := appendWithin(l, transactional(11, 3), plog.AckForced)
	if err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(open.BaseOffset + 1)
	for i, p := range c.parts {
		res, err := p.Log().ReadCommitted(aborted.BaseOffset, 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(res.Aborted, func(a plog.AbortedTxn) bool {
			return a.ProducerID == 11 && a.FirstOffset == aborted.BaseOffset && a.LastOffset == abort
		})
		res.Release()
		if !found {
			t.Fatalf("node %d: the transaction aborted at %d not in its aborted index", i+1, abort)
		}
	}
	c.stop(1)
	leader := c.awaitLeader(200)
	nl := c.part(leader).Log()
	if lso := nl.LastStableOffset(); lso != open.BaseOffset {
		t.Fatalf("new leader: LSO %d, the open transaction begins at %d", lso, open.BaseOffset)
	}
	if _, err := nl.WriteTxnMarker(ctx, plog.TxnMarker{ProducerID: 11, Commit: true, CoordinatorEpoch: 2}); !errors.Is(err, plog.ErrCoordinatorFenced) {
		t.Fatalf("a marker of an older coordinator epoch on the new leader: %v, want ErrCoordinatorFenced", err)
	}
	end, err := nl.WriteTxnMarker(ctx, plog.TxnMarker{ProducerID: 11, Commit: true, CoordinatorEpoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(end + 1)
	if lso, hwm := nl.LastStableOffset(), nl.HighWatermark(); lso != hwm {
		t.Fatalf("new leader: LSO %d, high watermark %d after the commit", lso, hwm)
	}
}

// TestRetryOfUncommittedBatchAfterFailover: five replicas; the leader takes
// an idempotent batch (acks=1) that reaches one follower only (the others
// are cut off from it), then hands leadership to that follower, which
// leads with the batch in its log uncommitted. The producer's retry on it is refused until it has
// applied its own term's first entry (which commits the batch), then
// answered with the batch's offset: the batch is in the log once.
func TestRetryOfUncommittedBatchAfterFailover(t *testing.T) {
	// The window it probes (between winning and applying the term's first
	// entry) is a few hundred microseconds: rounds in fresh clusters.
	for round := range 8 {
		t.Run(fmt.Sprint(round), testRetryOfUncommittedBatch)
	}
}

func testRetryOfUncommittedBatch(t *testing.T) {
	c := newCluster(t, 5)
	c.elect(1)
	const producer = 21
	for seq := int32(0); seq < 5; seq++ {
		if _, err := appendWithin(c.part(1).Log(), idempotent(producer, seq), plog.AckForced); err != nil {
			t.Fatal(err)
		}
	}
	c.awaitHWM(c.part(1).Log().HighWatermark())
	for _, id := range []uint64{3, 4, 5} {
		c.nodes[0].CutPeer(id, true)
		c.nodes[id-1].CutPeer(1, true)
	}
	res, err := appendWithin(c.part(1).Log(), idempotent(producer, 5), plog.AckWritten)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := c.part(1).Storage().LastIndex()
	// No tick while the others are cut off (they would elect among
	// themselves): replication needs none.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if l2, _ := c.part(2).Storage().LastIndex(); l2 == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch did not reach node 2")
		}
	}
	if hwm := c.part(2).Log().HighWatermark(); hwm > res.BaseOffset {
		t.Fatalf("node 2's high watermark %d: the batch at %d is committed already", hwm, res.BaseOffset)
	}
	// The producer retries on node 2 as fast as it can from before node 2
	// leads: a leader that took appends before applying its term's first
	// entry would take the retry for a new batch.
	type answer struct {
		res plog.AppendResult
		err error
	}
	retried := make(chan answer, 1)
	go func() {
		for deadline := time.Now().Add(appendTimeout); ; {
			res, err := appendWithin(c.part(2).Log(), idempotent(producer, 5), plog.AckForced)
			if !errors.Is(err, plog.ErrNotLeader) || time.Now().After(deadline) {
				retried <- answer{res, err}
				return
			}
		}
	}()
	// Leadership handed to node 2 (raft's transfer: it campaigns at once,
	// and the others, cut off from node 1 but not from it, vote for it; an
	// election after node 1 stopped could as well elect one of them, whose
	// shorter logs would replace the batch).
	if err := c.nodes[0].TransferLeadership(group, 2); err != nil {
		t.Fatal(err)
	}
	var retry answer
	for i := 0; ; i++ {
		select {
		case retry = <-retried:
		default:
			if i == 200 {
				t.Fatal("no answer to the retry on node 2 after 200 ticks")
			}
			c.tick()
			continue
		}
		break
	}
	if retry.err != nil || retry.res.BaseOffset != res.BaseOffset {
		t.Fatalf("retry on the new leader: offset %d, %v; want the original %d", retry.res.BaseOffset, retry.err, res.BaseOffset)
	}
	c.awaitHWM(res.BaseOffset + 1)
	n := 0
	for _, r := range readAll(t, c.part(2).Log()) {
		if r.producer == producer && r.seq == 5 {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("sequence 5 is in the log %d times", n)
	}
}
