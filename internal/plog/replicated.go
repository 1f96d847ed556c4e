package plog

import (
	"errors"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// The replicated partition (docs/replication.md section 3c): a Log opened
// over a RaftStorage takes Append and Enqueue on the group's leader only,
// and each batch becomes one raft entry.
//
//   - Enqueue validates the batch as a plain log does (validateRecords: CRC,
//     magic, sizes, compression, records), takes exactly one batch (one
//     entry; Kafka's produce v3+ rule), stamps LogAppendTime and the
//     leader's term (partitionLeaderEpoch), checks the idempotent producer's
//     sequence against the applied producer table plus this leader's
//     proposals in flight (Kafka's leader checks against its log end: a
//     duplicate is answered with its original's offset, a gap is
//     ErrOutOfOrderSequence, an older epoch ErrInvalidProducerEpoch), then
//     hands it to the Proposer (raftnode.Node.ProposeSaved).
//   - AckWritten is answered once the leader saved the entry (its offset is
//     assigned by Save), AckForced once it is applied: committed on a
//     majority, each replica having fsynced it, and the high watermark past
//     it. A proposal whose entry is not the one applied at its index (a new
//     leader's replaced it), or that is in flight when this replica stops
//     leading, is answered ErrNotLeader: never success.
//   - Apply (every replica, committed entries in order) records each batch
//     in the producer table and the transactions, then moves the high
//     watermark to the end of what it applied: Read, long polls and
//     ListOffsets never see past it.
//   - A new leader takes appends only once it has applied an entry of its
//     own term (raft's empty entry, appended when it won): everything its
//     predecessors committed is then in its producer table, so a producer's
//     retry after a failover is deduplicated.

// Proposer hands one batch to the partition's raft group and calls done
// once, when the entry is saved in the leader's log (index and term) or
// with the error that refused it (a plog error: ErrNotLeader,
// ErrBatchTooLarge, …; the glue in internal/replica maps raftnode's).
type Proposer func(data []byte, done func(index, term uint64, err error))

// ErrNotLeader is an append to a replicated partition this replica does not
// lead, has not yet finished taking over, or stopped leading with the
// append in flight (NOT_LEADER_OR_FOLLOWER: retriable, the client refreshes
// its metadata). An append answered with it may still be committed by the
// next leader; an idempotent producer's retry is then deduplicated.
var ErrNotLeader = errors.New("log: not the partition's leader")

// raftProposal is one batch proposed by this leader, until it is applied
// or this replica stops leading.
type raftProposal struct {
	req *appendReq // nil once answered (AckWritten after Save) or for AckNone
	ack AckPolicy

	producerID        int64 // -1: not idempotent
	epoch             int16
	firstSeq, lastSeq int32
	transactional     bool
	marker            bool // a transaction marker (WriteTxnMarker)

	index, term uint64 // set when saved (0 before)
	base        int64  // set when saved
	// dups are duplicates of this batch (an idempotent producer's
	// retries) waiting for its answer.
	dups []*appendReq
}

// SetProposer makes the log take appends through p (nil: none; appends
// are then ErrNotLeader).
func (rs *RaftStorage) SetProposer(p Proposer) {
	rs.rmu.Lock()
	rs.proposer = p
	rs.rmu.Unlock()
}

// Applied is the last index applied to the log's producers and
// transactions: the GroupConfig.Applied to restart its raft group with.
func (rs *RaftStorage) Applied() uint64 {
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	return rs.applied
}

// LeaderChanged tells the log whether this replica leads its group, in
// which term (raftnode's GroupConfig.OnLeader, through internal/replica).
// Every proposal in flight from an earlier leadership is answered
// ErrNotLeader.
func (rs *RaftStorage) LeaderChanged(leading bool, term uint64) {
	if !leading {
		term = 0
	}
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	if term == rs.leaderTerm {
		return
	}
	rs.leaderTerm = term
	for _, p := range rs.inflight {
		rs.answerLocked(p, AppendResult{}, fmt.Errorf("%w: leadership lost with the batch in flight", ErrNotLeader))
	}
	clear(rs.inflight)
	rs.inflight = rs.inflight[:0]
	clear(rs.byProducer)
}

// producers lists the applied producer table (Log.Producers).
func (rs *RaftStorage) producers() []ProducerInfo {
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	return rs.l.w.producers.snapshot()
}

// Leading reports whether this replica leads and takes appends: it leads
// and has applied an entry of its own term.
func (rs *RaftStorage) Leading() bool {
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	return rs.takesAppendsLocked()
}

func (rs *RaftStorage) takesAppendsLocked() bool {
	return rs.proposer != nil && rs.leaderTerm != 0 && rs.appliedTerm == rs.leaderTerm
}

// enqueue proposes records, validated by Log.Enqueue.
func (rs *RaftStorage) enqueue(records []byte, ack AckPolicy) (Pending, error) {
	h, _ := batch.ParseHeader(records) // validated
	if h.Size() != len(records) {
		return Pending{}, fmt.Errorf("%w: a replicated partition takes one record batch per produce, got %d bytes after the first", batch.ErrInvalidRecord, len(records)-h.Size())
	}
	if h.Control() {
		return Pending{}, fmt.Errorf("%w: control batch from a producer", batch.ErrInvalidRecord)
	}
	return rs.propose(records, ack, nil)
}

// propose checks records (one batch, or marker m's control batch, which
// WriteTxnMarker waits for as AckForced) against the producer's state at
// this leader's log end and proposes it.
func (rs *RaftStorage) propose(records []byte, ack AckPolicy, m *TxnMarker) (Pending, error) {
	h, _ := batch.ParseHeader(records)
	l := rs.l
	appendTime := int64(-1)
	if l.config().TimestampType == LogAppendTime {
		appendTime = l.clock.Now().UnixMilli()
	}
	rs.proposeMu.Lock()
	defer rs.proposeMu.Unlock()
	rs.rmu.Lock()
	if !rs.takesAppendsLocked() {
		rs.rmu.Unlock()
		return Pending{}, ErrNotLeader
	}
	term := rs.leaderTerm
	var req *appendReq
	if ack != AckNone {
		req = getReq()
		req.records, req.ack = records, ack
	}
	if m != nil {
		if err := checkMarker(rs.producerViewLocked(&h), m); err != nil {
			rs.rmu.Unlock()
			putReq(req)
			return Pending{}, err
		}
	} else if h.ProducerID >= 0 {
		dupBase, err := checkProducer(rs.producerViewLocked(&h), &h)
		if errors.Is(err, ErrDuplicateSequence) {
			rs.duplicateLocked(&h, req, dupBase, appendTime)
			rs.rmu.Unlock()
			return Pending{l: l, req: req}, nil
		}
		if err != nil {
			rs.rmu.Unlock()
			if req != nil {
				putReq(req)
			}
			return Pending{}, err
		}
	}
	if appendTime >= 0 {
		batch.SetLogAppendTime(records, appendTime)
	}
	batch.SetPartitionLeaderEpoch(records, int32(term))
	p := &raftProposal{req: req, ack: ack, producerID: h.ProducerID, epoch: h.ProducerEpoch,
		firstSeq: h.BaseSequence, lastSeq: addSeq(h.BaseSequence, h.LastOffsetDelta), transactional: h.Transactional(),
		marker: m != nil}
	rs.inflight = append(rs.inflight, p)
	if h.ProducerID >= 0 {
		if rs.byProducer == nil {
			rs.byProducer = make(map[int64][]*raftProposal)
		}
		rs.byProducer[h.ProducerID] = append(rs.byProducer[h.ProducerID], p)
	}
	propose := rs.proposer
	rs.rmu.Unlock()
	// Under proposeMu: proposals reach raft in the order they were checked.
	propose(records, func(index, term uint64, err error) { rs.saved(p, index, term, appendTime, err) })
	return Pending{l: l, req: req}, nil
}

// producerViewLocked is the state of h's producer as of this leader's log
// end: the applied table's, then its proposals in flight. A copy.
func (rs *RaftStorage) producerViewLocked(h *batch.Header) *producerState {
	var st *producerState
	if applied := rs.l.w.producers.states[h.ProducerID]; applied != nil {
		c := *applied
		st = &c
	}
	for _, p := range rs.byProducer[h.ProducerID] {
		if st == nil {
			c := newProducerState(p.epoch)
			st = &c
		}
		if p.epoch != st.epoch {
			st.newEpoch(p.epoch)
		}
		if p.marker {
			st.txnFirst = -1
			continue
		}
		st.push(producerBatch{firstSeq: p.firstSeq, lastSeq: p.lastSeq, base: p.base})
		if p.transactional && st.txnFirst < 0 {
			st.txnFirst = max(p.base, 0)
		}
	}
	return st
}

// duplicateLocked answers req, a retry of a batch already in the log: at
// once with the original's offset when that is applied (or for AckNone and,
// once saved, AckWritten), else once the original is.
func (rs *RaftStorage) duplicateLocked(h *batch.Header, req *appendReq, dupBase, appendTime int64) {
	if req == nil {
		return
	}
	lastSeq := addSeq(h.BaseSequence, h.LastOffsetDelta)
	for _, p := range rs.byProducer[h.ProducerID] {
		if p.marker || p.epoch != h.ProducerEpoch || p.firstSeq != h.BaseSequence || p.lastSeq != lastSeq {
			continue
		}
		if req.ack == AckWritten && p.index != 0 {
			break // saved: dupBase is its offset
		}
		p.dups = append(p.dups, req)
		return
	}
	req.result = AppendResult{BaseOffset: dupBase, LogAppendTime: appendTime}
	rs.answerReq(req, nil)
}

// saved is the Proposer's answer for p.
func (rs *RaftStorage) saved(p *raftProposal, index, term uint64, appendTime int64, err error) {
	var base int64
	if err == nil {
		rs.mu.Lock()
		_, base, _, err = rs.entryStartLocked(index)
		rs.mu.Unlock()
	}
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	i := slices.Index(rs.inflight, p)
	if i < 0 {
		return // answered already: leadership changed
	}
	if err != nil {
		rs.removeLocked(i)
		rs.answerLocked(p, AppendResult{}, err)
		return
	}
	p.index, p.term, p.base = index, term, base
	if p.ack == AckWritten {
		rs.answerLocked(p, AppendResult{BaseOffset: base, LogAppendTime: appendTime}, nil)
	}
}

// removeLocked drops inflight[i] from the proposals in flight.
func (rs *RaftStorage) removeLocked(i int) {
	p := rs.inflight[i]
	rs.inflight = slices.Delete(rs.inflight, i, i+1)
	if p.producerID < 0 {
		return
	}
	ps := rs.byProducer[p.producerID]
	if k := slices.Index(ps, p); k >= 0 {
		ps = slices.Delete(ps, k, k+1)
	}
	if len(ps) == 0 {
		delete(rs.byProducer, p.producerID)
	} else {
		rs.byProducer[p.producerID] = ps
	}
}

// answerLocked answers p's waiting request and duplicates (once: they are
// dropped from p).
func (rs *RaftStorage) answerLocked(p *raftProposal, res AppendResult, err error) {
	if p.req != nil {
		p.req.result = res
		rs.answerReq(p.req, err)
		p.req = nil
	}
	for _, d := range p.dups {
		d.result = res
		rs.answerReq(d, err)
	}
	p.dups = nil
}

// answerReq hands r back to its appender (its done channel has room for
// the one answer): err, or r.result.
func (rs *RaftStorage) answerReq(r *appendReq, err error) {
	r.err = err
	if err != nil {
		r.result = AppendResult{BaseOffset: -1, LogAppendTime: -1}
	}
	r.result.LogStartOffset = rs.l.LogStartOffset()
	r.done <- struct{}{}
}

// Apply applies committed entries, in log order (raftnode's
// GroupConfig.Apply): each batch's producer and transaction in the tables,
// this leader's proposals answered, then the high watermark moved to the
// end of the entries applied. Entries at or below Applied are skipped (a
// restarted replica's, already in the tables).
func (rs *RaftStorage) Apply(entries []*pb.Entry) {
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.err != nil || rs.closed {
		return
	}
	l := rs.l
	now := l.clock.Now()
	nowMs := now.UnixMilli()
	rs.expireProducersLocked(now)
	applied := false
	// The proposals decided are answered once the high watermark is past
	// them: an acks=all producer that reads it sees its batch committed.
	decided := rs.decided[:0]
	defer func() {
		for _, d := range decided {
			rs.answerLocked(d.p, d.res, d.err)
		}
		clear(decided)
		rs.decided = decided[:0]
	}()
	for _, e := range entries {
		i := e.GetIndex()
		if i <= rs.applied {
			continue
		}
		if i > rs.last {
			break // not in this log (raft applies what it saved: never)
		}
		rs.noteSegmentStartLocked(i)
		if err := rs.applyEntryLocked(e, nowMs); err != nil {
			rs.err = err
			l.fail(err)
			l.logger().Error("a committed raft entry cannot be applied; the partition stops", "index", i, "err", err)
			return
		}
		l.mu.Lock()
		rs.applied, rs.appliedTerm = i, e.GetTerm()
		l.mu.Unlock()
		applied = true
		decided = rs.decideLocked(decided, i, e)
	}
	if !applied {
		return
	}
	if err := rs.publishAppliedLocked(false); err != nil {
		rs.err = err
		l.fail(err)
	}
}

// expireProducersLocked forgets the producers idle for
// producer.id.expiration.ms, checked every
// producer.id.expiration.check.interval.ms as the plain log's writer does:
// each replica by its own clock, as each Kafka replica does. A leader's
// proposals in flight keep their producer's view (producerViewLocked).
func (rs *RaftStorage) expireProducersLocked(now time.Time) {
	if rs.producersCheckedAt.IsZero() {
		rs.producersCheckedAt = now // recovery has just expired them
		return
	}
	if now.Sub(rs.producersCheckedAt) < producerExpiryCheckInterval {
		return
	}
	rs.producersCheckedAt = now
	expiration := rs.l.config().ProducerIDExpiration
	if n := rs.l.w.producers.expire(now.UnixMilli(), expiration); n > 0 {
		rs.l.logger().Info("forgot idle idempotent producers", "producers", n, "idle_for", expiration)
	}
}

// applyEntryLocked records entry e's batch (as stored) in the producer
// table and the transactions: what the recovery scan does for each batch
// it keeps.
func (rs *RaftStorage) applyEntryLocked(e *pb.Entry, nowMs int64) error {
	if e.GetType() != pb.EntryType_EntryNormal || len(e.Data) == 0 {
		return nil // raft's own entries (control batches of its own)
	}
	l := rs.l
	h, err := batch.ParseHeader(e.Data)
	if err != nil {
		return err
	}
	if h.Control() && !h.Transactional() {
		return rs.applyRaftControlLocked(e.Data) // raftsnapshot.go
	}
	var ev txnEvent
	seenMs := min(h.MaxTimestamp, nowMs)
	if h.Control() {
		commit, coordinatorEpoch, err := batch.ParseControl(e.Data)
		if err != nil {
			return err
		}
		m := TxnMarker{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, Commit: commit, CoordinatorEpoch: coordinatorEpoch}
		ev = l.w.producers.applyMarker(&m, h.BaseOffset, seenMs, h.MaxTimestamp)
	} else if l.w.producers.record(&h, h.BaseOffset, seenMs, false) {
		ev = txnEvent{kind: txnBegin, producerID: h.ProducerID}
	}
	if ev.kind == txnNone {
		return nil
	}
	seg, _, pos, err := rs.entryStartLocked(e.GetIndex())
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.noteTxnLocked(ev, seg, h.BaseOffset, h.LastOffset(), pos)
	l.mu.Unlock()
	return nil
}

// decision is a proposal's answer, decided by an applied entry.
type decision struct {
	p   *raftProposal
	res AppendResult
	err error
}

// decideLocked appends to dst the answers of the proposals in flight that
// entry e, just applied at index i, decides: its own (success) and any
// proposed at or below i that e is not (replaced by another leader's
// entry: an error). They leave the proposals in flight.
func (rs *RaftStorage) decideLocked(dst []decision, i uint64, e *pb.Entry) []decision {
	for len(rs.inflight) > 0 {
		p := rs.inflight[0]
		if p.index == 0 || p.index > i {
			break
		}
		rs.removeLocked(0)
		if p.index != i || p.term != e.GetTerm() {
			dst = append(dst, decision{p: p, err: fmt.Errorf("%w: entry %d of term %d replaced by a new leader's", ErrNotLeader, p.index, p.term)})
			continue
		}
		res := AppendResult{BaseOffset: p.base, LogAppendTime: -1}
		if h, err := batch.ParseHeader(e.Data); err == nil && h.LogAppendTime() {
			res.LogAppendTime = h.MaxTimestamp
		}
		dst = append(dst, decision{p: p, res: res})
	}
	return dst
}

// EndOffset is the offset after entry i: the offset the next entry takes
// (-1 for an index the log no longer holds).
func (rs *RaftStorage) EndOffset(i uint64) int64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	_, offset, _, err := rs.entryStartLocked(i + 1)
	if err != nil {
		return -1
	}
	return offset
}
