package plog

import (
	"math"
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
// epoch and its last batches, oldest first in a ring.
type producerState struct {
	epoch   int16
	batches [producerWindow]producerBatch
	n       int   // remembered batches, <= producerWindow
	head    int   // index of the oldest
	seenMs  int64 // when it last appended (ms since epoch): idleness, for expiry
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
	st := t.states[h.ProducerID]
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

// record remembers an appended batch, appended at seenMs. With saveUndo the
// previous state is kept so rollback can restore it.
func (t *producerTable) record(h *batch.Header, base, seenMs int64, saveUndo bool) {
	if h.ProducerID < 0 {
		return
	}
	st := t.states[h.ProducerID]
	if saveUndo {
		u := producerUndo{id: h.ProducerID, had: st != nil}
		if st != nil {
			u.saved = *st
		}
		t.undo = append(t.undo, u)
	}
	if st == nil {
		st = &producerState{epoch: h.ProducerEpoch}
		t.states[h.ProducerID] = st
	}
	if h.ProducerEpoch != st.epoch {
		*st = producerState{epoch: h.ProducerEpoch}
	}
	st.push(producerBatch{firstSeq: h.BaseSequence, lastSeq: addSeq(h.BaseSequence, h.LastOffsetDelta), base: base})
	st.seenMs = max(st.seenMs, seenMs)
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
		if nowMs-st.seenMs >= limit {
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
