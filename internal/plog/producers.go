package plog

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// producerWindow is how many recent batches per producer are remembered for
// duplicate detection: Kafka allows max.in.flight 5 with idempotence.
const producerWindow = 5

// producerBatch is one remembered batch of an idempotent producer.
type producerBatch struct {
	firstSeq, lastSeq int32
	base              int64
}

// producerState is the per-partition state of one idempotent producer: its
// epoch and its last batches, oldest first in a ring, and its transaction.
type producerState struct {
	epoch   int16
	batches [producerWindow]producerBatch
	n       int   // remembered batches, <= producerWindow
	head    int   // index of the oldest
	seenMs  int64 // when it last appended (ms since epoch): idleness, for expiry
	lastTs  int64 // max timestamp of its last batch or marker (DescribeProducers)

	// txnFirst is the first offset of its ongoing transaction in this
	// partition, -1 when none (KIP-98: its first transactional batch
	// starts one, a marker ends it).
	txnFirst int64
	// coordinatorEpoch is that of its last marker, -1 before any: a marker
	// from an older coordinator is fenced.
	coordinatorEpoch int32
}

// newProducerState is the state of a producer first seen at epoch.
func newProducerState(epoch int16) producerState {
	return producerState{epoch: epoch, txnFirst: -1, coordinatorEpoch: -1}
}

// newEpoch forgets the batches of an older epoch (sequences restart at 0)
// and keeps the rest: a transaction in progress stays in progress until
// its marker (Kafka's ProducerStateManager keeps currentTxnFirstOffset).
func (st *producerState) newEpoch(epoch int16) {
	*st = producerState{epoch: epoch, seenMs: st.seenMs, lastTs: st.lastTs, txnFirst: st.txnFirst, coordinatorEpoch: st.coordinatorEpoch}
}

func (st *producerState) last() *producerBatch {
	return &st.batches[(st.head+st.n-1)%producerWindow]
}

func (st *producerState) push(b producerBatch) {
	if st.n < producerWindow {
		st.batches[(st.head+st.n)%producerWindow] = b
		st.n++
		return
	}
	st.batches[st.head] = b
	st.head = (st.head + 1) % producerWindow
}

// addSeq adds delta to a sequence number, wrapping past MaxInt32 to 0 as
// Kafka's producers do.
func addSeq(seq, delta int32) int32 {
	if seq > math.MaxInt32-delta {
		return delta - (math.MaxInt32 - seq) - 1
	}
	return seq + delta
}

// producerTable is the idempotence state of a partition, owned by the
// writer goroutine (and rebuilt from the log by recovery).
type producerTable struct {
	states map[int64]*producerState
	undo   []producerUndo // reused: restores states when a request fails
}

type producerUndo struct {
	id    int64
	had   bool
	saved producerState
}

func newProducerTable() producerTable {
	return producerTable{states: make(map[int64]*producerState)}
}

// check tells whether the batch with header h may be appended. A duplicate
// of a remembered batch returns its original base offset and
// ErrDuplicateSequence.
func (t *producerTable) check(h *batch.Header) (dupBase int64, err error) {
	if h.ProducerID < 0 {
		return -1, nil
	}
	return checkProducer(t.states[h.ProducerID], h)
}

// checkProducer is check against st, the state of h's producer (nil: none).
func checkProducer(st *producerState, h *batch.Header) (dupBase int64, err error) {
	if st != nil && st.txnFirst >= 0 && !h.Transactional() && h.ProducerEpoch >= st.epoch {
		// Kafka: a producer with a transaction in progress writes only
		// transactional batches until its marker.
		return -1, ErrInvalidTxnState
	}
	if st == nil || st.n == 0 {
		// A producer we know nothing of (new, or its state went with
		// retention): accept, as Kafka does for a first write.
		if st != nil && h.ProducerEpoch < st.epoch {
			return -1, ErrInvalidProducerEpoch
		}
		return -1, nil
	}
	switch {
	case h.ProducerEpoch < st.epoch:
		return -1, ErrInvalidProducerEpoch
	case h.ProducerEpoch > st.epoch:
		if h.BaseSequence != 0 {
			return -1, ErrOutOfOrderSequence
		}
		return -1, nil
	}
	lastSeq := addSeq(h.BaseSequence, h.LastOffsetDelta)
	for i := 0; i < st.n; i++ {
		b := &st.batches[(st.head+i)%producerWindow]
		if b.firstSeq == h.BaseSequence && b.lastSeq == lastSeq {
			return b.base, ErrDuplicateSequence
		}
	}
	if h.BaseSequence != addSeq(st.last().lastSeq, 1) {
		return -1, ErrOutOfOrderSequence
	}
	return -1, nil
}

// record remembers an appended data batch, appended at seenMs, and tells
// whether it began a transaction. With saveUndo the previous state is kept
// so rollback can restore it.
func (t *producerTable) record(h *batch.Header, base, seenMs int64, saveUndo bool) (txnBegun bool) {
	if h.ProducerID < 0 {
		return false
	}
	st := t.stateFor(h.ProducerID, h.ProducerEpoch, saveUndo)
	st.push(producerBatch{firstSeq: h.BaseSequence, lastSeq: addSeq(h.BaseSequence, h.LastOffsetDelta), base: base})
	st.seenMs = max(st.seenMs, seenMs)
	st.lastTs = h.MaxTimestamp
	if h.Transactional() && st.txnFirst < 0 {
		st.txnFirst = base
		return true
	}
	return false
}

// stateFor returns the state of producer id, created at epoch if absent,
// moved to epoch if older (saving the undo first).
func (t *producerTable) stateFor(id int64, epoch int16, saveUndo bool) *producerState {
	st := t.states[id]
	if saveUndo {
		u := producerUndo{id: id, had: st != nil}
		if st != nil {
			u.saved = *st
		}
		t.undo = append(t.undo, u)
	}
	if st == nil {
		st = new(producerState)
		*st = newProducerState(epoch)
		t.states[id] = st
	}
	if epoch != st.epoch {
		st.newEpoch(epoch)
	}
	return st
}

// checkMarker tells whether the marker m may end the transaction of its
// producer, as Kafka's ProducerAppendInfo.appendEndTxnMarker: an older
// producer epoch is fenced (INVALID_PRODUCER_EPOCH), and so is an older
// coordinator epoch (TRANSACTION_COORDINATOR_FENCED). A producer with no
// state here, or no transaction in progress, still gets its marker.
func (t *producerTable) checkMarker(m *TxnMarker) error {
	return checkMarker(t.states[m.ProducerID], m)
}

// checkMarker is checkMarker against st, the state of m's producer (nil:
// none).
func checkMarker(st *producerState, m *TxnMarker) error {
	switch {
	case st == nil:
		return nil
	case m.ProducerEpoch < st.epoch:
		return ErrInvalidProducerEpoch
	case m.CoordinatorEpoch < st.coordinatorEpoch:
		return ErrCoordinatorFenced
	}
	return nil
}

// recordMarker ends the producer's transaction with the marker at offset
// (written at seenMs, stamped timestamp) and returns the first offset of
// the transaction it ends: the marker's own offset when none was in
// progress, as Kafka records it. A newer epoch fences the older one.
func (t *producerTable) recordMarker(m *TxnMarker, offset, seenMs, timestamp int64, saveUndo bool) (first int64) {
	st := t.stateFor(m.ProducerID, m.ProducerEpoch, saveUndo)
	first = st.txnFirst
	if first < 0 {
		first = offset
	}
	st.txnFirst = -1
	st.coordinatorEpoch = m.CoordinatorEpoch
	st.seenMs = max(st.seenMs, seenMs)
	st.lastTs = timestamp
	return first
}

// applyMarker records the marker m at offset (recordMarker) and returns
// the transaction event it makes (the recovery scan's and a raft log's
// apply: the marker was checked when it was written).
func (t *producerTable) applyMarker(m *TxnMarker, offset, seenMs, timestamp int64) txnEvent {
	ev := txnEvent{kind: txnAbort, producerID: m.ProducerID, first: t.recordMarker(m, offset, seenMs, timestamp, false)}
	if m.Commit {
		ev.kind = txnCommit
	}
	return ev
}

// rollback restores the states saved since the last commit, newest first.
func (t *producerTable) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		if !u.had {
			delete(t.states, u.id)
			continue
		}
		*t.states[u.id] = u.saved
	}
	t.undo = t.undo[:0]
}

// commit forgets the saved states.
func (t *producerTable) commit() { t.undo = t.undo[:0] }

// expire forgets the producers idle for expiration or longer at nowMs
// (producer.id.expiration.ms): their next batch is accepted whatever its
// sequence, as from a new producer, and a retry of one of their old batches
// is no longer recognised, as in Kafka. It returns how many were forgotten.
// Not between check and commit (the undo log points into the states).
func (t *producerTable) expire(nowMs int64, expiration time.Duration) int {
	limit := expiration.Milliseconds()
	n := 0
	for id, st := range t.states {
		// A transaction in progress keeps its producer: its marker must
		// still find where it began (the coordinator's timeout ends it).
		if nowMs-st.seenMs >= limit && st.txnFirst < 0 {
			delete(t.states, id)
			n++
		}
	}
	if n > 0 && n >= len(t.states) {
		// A Go map never shrinks: after forgetting at least half of it,
		// copy the rest so the memory of the forgotten ones goes.
		states := make(map[int64]*producerState, len(t.states))
		for id, st := range t.states {
			states[id] = st
		}
		t.states = states
	}
	return n
}

// ProducerInfo is one active producer of a partition, as DescribeProducers
// answers it.
type ProducerInfo struct {
	ProducerID            int64
	ProducerEpoch         int16
	LastSequence          int32 // -1 when it has no batch in this epoch
	LastTimestamp         int64 // max timestamp of its last batch or marker
	CoordinatorEpoch      int32 // of its last marker, -1 before any
	CurrentTxnStartOffset int64 // first offset of its transaction in progress, -1 when none
}

// snapshot lists the producers, by id.
func (t *producerTable) snapshot() []ProducerInfo {
	out := make([]ProducerInfo, 0, len(t.states))
	for id, st := range t.states {
		last := int32(-1)
		if st.n > 0 {
			last = st.last().lastSeq
		}
		out = append(out, ProducerInfo{ProducerID: id, ProducerEpoch: st.epoch, LastSequence: last,
			LastTimestamp: st.lastTs, CoordinatorEpoch: st.coordinatorEpoch, CurrentTxnStartOffset: st.txnFirst})
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out
}
