package stream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// partitionWorker handles one partition's records. The poll goroutine
// pushes records into its queue; its dispatcher goroutine takes them in
// offset order and runs them inline (one lane) or hands them to key lanes.
//
// Invariants:
//   - queue holds records fetched and not yet dispatched; with the window
//     (slots) it is bounded by maxInFlight plus what the client had already
//     fetched when the partition was paused.
//   - slots holds every dispatched record not yet popped as done, in
//     offset order; the committed offset (Mark) only moves over a prefix
//     of finished slots, so it never passes an unfinished message.
//   - after a nack, nothing is marked past the failed offset: the window
//     is discarded once every lane is idle, and the partition is sought
//     back to the failed offset.
type partitionWorker struct {
	app      *App
	h        *handler
	tp       TopicPartition
	consumer Consumer
	ctx      context.Context    // the parent of its handlers' contexts
	cancel   context.CancelFunc // at its stop deadline, or when it has exited

	mu          sync.Mutex
	queue       []*Record // guarded by mu; queue[head:] waits for dispatch
	head        int       // guarded by mu
	paused      bool      // guarded by mu: we paused the partition's fetching
	awaitOffset int64     // guarded by mu: >= 0 after a seek: drop records until this offset
	wake        chan struct{}
	stopping    atomic.Bool
	done        chan struct{} // closed when the dispatcher and its lanes have exited

	track      sync.Mutex
	trackCond  *sync.Cond // signalled when a slot finishes
	slots      []slot     // guarded by track: a ring of capacity maxInFlight
	slotHead   int        // guarded by track
	slotCount  int        // guarded by track
	unfinished int        // guarded by track: slots still pending
	waiters    int        // guarded by track: goroutines waiting on trackCond (finish broadcasts only then)
	failed     int64      // guarded by track: lowest failed offset, or -1
	dropped    bool       // guarded by track: the partition was lost, or revoked with handlers still running; mark nothing more

	// Owned by the dispatcher goroutine.
	redeliveredOffset int64
	redeliveries      int
	lanes             []*lane
	timer             *time.Timer
}

type slotState uint8

const (
	slotPending slotState = iota
	slotAcked             // acknowledged: the mark may move past it
	slotSkipped           // finished without an acknowledgement of its own (Manual)
	slotFailed            // nacked: the partition goes back to it
)

type slot struct {
	record *Record
	state  slotState
}

// laneOf is the key lane of key among n lanes: FNV-1a, the same in every
// process, so that a key keeps its lane, and a service its interleaving of
// lanes, from one run to the next (with maphash's per-process seed the
// instructions per message of a key-lane service varied from process to
// process by more than the cost gate's 2 %). A key only chooses a lane: a
// key set steered onto one lane costs concurrency, nothing else.
func laneOf(key []byte, n int) int {
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return int(h % uint32(n))
}

func newPartitionWorker(a *App, h *handler, tp TopicPartition, consumer Consumer) *partitionWorker {
	w := &partitionWorker{
		app:               a,
		h:                 h,
		tp:                tp,
		consumer:          consumer,
		queue:             make([]*Record, 0, h.maxInFlight),
		awaitOffset:       -1,
		wake:              make(chan struct{}, 1),
		done:              make(chan struct{}),
		slots:             make([]slot, h.maxInFlight),
		failed:            -1,
		redeliveredOffset: -1,
		timer:             time.NewTimer(time.Hour),
	}
	w.timer.Stop()
	w.ctx, w.cancel = context.WithCancel(a.handlerCtx)
	w.trackCond = sync.NewCond(&w.track)
	w.lanes = make([]*lane, h.keyLanes)
	for i := range w.lanes {
		w.lanes[i] = newLane(w)
	}
	go w.run()
	return w
}

// push is called by the poll goroutine only. It does not wake the
// dispatcher: the poll goroutine signals each worker once after pushing
// what one poll returned for it, so that a backlog wakes the dispatcher
// once per poll, not once per record.
func (w *partitionWorker) push(r *Record) {
	w.mu.Lock()
	if w.awaitOffset >= 0 {
		if r.Offset != w.awaitOffset {
			w.mu.Unlock()
			return // fetched before the seek: it will come again
		}
		w.awaitOffset = -1
	}
	if w.head > 0 && len(w.queue) == cap(w.queue) {
		n := copy(w.queue, w.queue[w.head:])
		clear(w.queue[n:])
		w.queue, w.head = w.queue[:n], 0
	}
	w.queue = append(w.queue, r)
	if !w.paused && len(w.queue)-w.head >= w.h.maxInFlight {
		// Under mu, so that Pause and Resume reach the consumer in the
		// order the flag changed.
		w.paused = true
		w.consumer.Pause(w.tp)
	}
	w.mu.Unlock()
}

func (w *partitionWorker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *partitionWorker) stop() {
	w.stopping.Store(true)
	w.signal()
	w.track.Lock()
	w.trackCond.Broadcast() // wakes a reserve or a redeliver waiting on the window
	w.track.Unlock()
}

// drop gives the partition up at once (it was lost): from the moment
// drop returns nothing more is marked, then the handlers' context is
// cancelled and the worker stops.
func (w *partitionWorker) drop() {
	w.dropMarks()
	w.cancel()
	w.stop()
}

// dropMarks makes the worker mark nothing from now on (its partition was
// revoked while its handlers still ran), without stopping or cancelling
// anything more.
func (w *partitionWorker) dropMarks() {
	w.track.Lock()
	w.dropped = true
	w.track.Unlock()
}

// pop takes the next queued record whose value fits in maxBytes (a first
// record always fits: pass a negative maxBytes), without waiting.
func (w *partitionWorker) pop(maxBytes int) *Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.queue) {
		return nil
	}
	r := w.queue[w.head]
	if maxBytes >= 0 && len(r.Value) > maxBytes {
		return nil
	}
	w.queue[w.head] = nil
	w.head++
	if w.head == len(w.queue) {
		w.queue, w.head = w.queue[:0], 0
	}
	if w.paused && len(w.queue)-w.head <= w.h.maxInFlight/2 {
		w.paused = false
		w.consumer.Resume(w.tp)
	}
	return r
}

// next waits for a record; nil when the worker is stopping or a failure
// waits for its redelivery.
func (w *partitionWorker) next() *Record {
	for {
		if w.stopping.Load() || w.failedOffset() >= 0 {
			return nil
		}
		if r := w.pop(-1); r != nil {
			return r
		}
		<-w.wake
	}
}

func (w *partitionWorker) run() {
	defer close(w.done)
	defer w.cancel()
	var laneDone sync.WaitGroup
	if len(w.lanes) > 1 {
		for _, l := range w.lanes {
			laneDone.Add(1)
			go l.loop(&laneDone)
		}
	}
	defer func() {
		if len(w.lanes) > 1 {
			for _, l := range w.lanes {
				l.close()
			}
			laneDone.Wait()
		}
	}()
	for {
		if w.failedOffset() >= 0 {
			if !w.redeliver() {
				return
			}
		}
		r := w.next()
		if r == nil {
			if w.stopping.Load() {
				return
			}
			continue // a failure: redeliver at the top
		}
		switch {
		case w.h.batch != nil:
			w.runBatch(r)
		case len(w.lanes) == 1:
			first, ok := w.reserve(r)
			if !ok {
				return
			}
			w.lanes[0].deliver(w.lanes[0].one(r), first, w.attemptFor(r))
		default:
			if !w.dispatchLanes(r) {
				return
			}
		}
	}
}

// runBatch collects a batch that starts with first and delivers it.
func (w *partitionWorker) runBatch(first *Record) {
	b := w.h.batch
	l := w.lanes[0]
	batch := append(l.batch[:0], first)
	bytes := len(first.Value)
	w.timer.Reset(b.maxWait)
	defer w.timer.Stop()
collect:
	for len(batch) < b.maxCount && bytes < b.maxBytes && !w.stopping.Load() {
		if r := w.pop(b.maxBytes - bytes); r != nil {
			batch = append(batch, r)
			bytes += len(r.Value)
			continue
		}
		w.mu.Lock()
		blocked := w.head < len(w.queue) // the next record does not fit
		w.mu.Unlock()
		if blocked {
			break
		}
		select {
		case <-w.wake:
		case <-w.timer.C:
			break collect
		}
	}
	l.batch = batch
	slotIndex := -1
	for _, r := range batch {
		i, ok := w.reserve(r)
		if !ok {
			return
		}
		if slotIndex < 0 {
			slotIndex = i
		}
	}
	l.deliver(batch, slotIndex, w.attemptFor(first))
	clear(l.batch)
}

// dispatchLanes hands r, then what else is queued while the window has
// room, to the key lanes, and wakes each lane that waits once for all of
// it (issue 9: a lane woken per record cost the framework a quarter more
// CPU per message than lanes fed in batches, on a machine without idle
// cores). It stops at a failure (the redelivery seeks back to it, so a
// record popped after it comes again) and returns false when the worker
// stops.
func (w *partitionWorker) dispatchLanes(r *Record) bool {
	for r != nil {
		i, st := w.tryReserve(r)
		if st == reserveFull {
			w.flushLanes() // the lanes must run to free the window
			var ok bool
			if i, ok = w.reserve(r); !ok {
				return false
			}
		} else if st == reserveStop {
			break
		}
		l := w.lanes[laneOf(r.Key, len(w.lanes))]
		l.out = append(l.out, laneItem{record: r, slot: i, attempt: w.attemptFor(r)})
		r = w.pop(-1)
	}
	w.flushLanes()
	return !w.stopping.Load()
}

// flushLanes hands each lane what dispatchLanes gathered for it.
func (w *partitionWorker) flushLanes() {
	for _, l := range w.lanes {
		if len(l.out) > 0 {
			l.hand(l.out)
			clear(l.out)
			l.out = l.out[:0]
		}
	}
}

type reserveStatus uint8

const (
	reserved    reserveStatus = iota
	reserveFull               // the window is full
	reserveStop               // stopping, or a failure waits for its redelivery
)

// tryReserve is reserve without waiting.
func (w *partitionWorker) tryReserve(r *Record) (int, reserveStatus) {
	w.track.Lock()
	defer w.track.Unlock()
	if w.stopping.Load() || w.failed >= 0 {
		return 0, reserveStop
	}
	if w.slotCount == len(w.slots) {
		return 0, reserveFull
	}
	return w.reserveLocked(r), reserved
}

// reserve puts r into the window, waiting while the window is full; it
// returns the slot's index, or false when the worker stops meanwhile.
func (w *partitionWorker) reserve(r *Record) (int, bool) {
	w.track.Lock()
	defer w.track.Unlock()
	for w.slotCount == len(w.slots) {
		if w.stopping.Load() {
			return 0, false
		}
		w.waitTrackLocked()
	}
	return w.reserveLocked(r), true
}

// waitTrackLocked waits on trackCond, counted so that finish broadcasts
// only when someone waits. track is held.
func (w *partitionWorker) waitTrackLocked() {
	w.waiters++
	w.trackCond.Wait()
	w.waiters--
}

func (w *partitionWorker) reserveLocked(r *Record) int {
	i := (w.slotHead + w.slotCount) % len(w.slots)
	w.slots[i] = slot{record: r}
	w.slotCount++
	w.unfinished++
	return i
}

// finish sets the state of n consecutive slots from first and moves the
// mark over the finished prefix of the window.
func (w *partitionWorker) finish(first, n int, state slotState) {
	mark := int64(-1)
	var acked []*Record
	w.track.Lock()
	for k := 0; k < n; k++ {
		s := &w.slots[(first+k)%len(w.slots)]
		s.state = state
		w.unfinished--
		if state == slotFailed && (w.failed < 0 || s.record.Offset < w.failed) {
			w.failed = s.record.Offset
		}
	}
	for w.slotCount > 0 {
		s := &w.slots[w.slotHead]
		if s.state == slotAcked {
			mark = s.record.Offset + 1
			if w.app.cfg.observe != nil {
				acked = append(acked, s.record)
			}
		} else if s.state != slotSkipped {
			break
		}
		*s = slot{}
		w.slotHead = (w.slotHead + 1) % len(w.slots)
		w.slotCount--
	}
	// Marked and reported under track, so that marks and Acked events
	// leave in offset order even when lanes finish concurrently.
	if mark >= 0 && !w.dropped {
		w.consumer.Mark(w.tp, mark)
		if acked != nil {
			w.app.emit(Event{Kind: EventAcked, Records: acked})
		}
	}
	if w.waiters > 0 {
		w.trackCond.Broadcast()
	}
	w.track.Unlock()
	if state == slotFailed {
		w.signal() // a dispatcher waiting for records must start the redelivery
	}
}

func (w *partitionWorker) failedOffset() int64 {
	w.track.Lock()
	defer w.track.Unlock()
	return w.failed
}

// redeliver waits until no lane is handling a message, discards the window
// and the queue, seeks the partition back to the failed offset and waits
// the redelivery backoff. It returns false when the worker stops first.
func (w *partitionWorker) redeliver() bool {
	w.track.Lock()
	for w.unfinished > 0 && !w.stopping.Load() {
		w.waitTrackLocked()
	}
	if w.stopping.Load() {
		w.track.Unlock()
		return false
	}
	offset := w.failed
	clear(w.slots)
	w.slotHead, w.slotCount, w.failed = 0, 0, -1
	w.track.Unlock()

	w.mu.Lock()
	clear(w.queue)
	w.queue, w.head = w.queue[:0], 0
	w.awaitOffset = offset
	w.consumer.Seek(w.tp, offset)
	if w.paused {
		w.paused = false
		w.consumer.Resume(w.tp)
	}
	w.mu.Unlock()

	if offset == w.redeliveredOffset {
		w.redeliveries++
	} else {
		w.redeliveredOffset, w.redeliveries = offset, 1
	}
	backoff := w.app.cfg.redeliveryBackoff << min(w.redeliveries-1, 6)
	if backoff <= 0 {
		return !w.stopping.Load()
	}
	w.timer.Reset(backoff)
	defer w.timer.Stop()
	for {
		select {
		case <-w.timer.C:
			return !w.stopping.Load()
		case <-w.wake:
			if w.stopping.Load() {
				return false
			}
		}
	}
}

func (w *partitionWorker) attemptFor(r *Record) int {
	if r.Offset == w.redeliveredOffset {
		return w.redeliveries + 1
	}
	return 1
}

// lane runs handlers sequentially under its own reusable context.
type lane struct {
	w      *partitionWorker
	dc     deliveryContext
	handle HandlerFunc
	single [1]*Record
	batch  []*Record

	// Key lanes only. The dispatcher gathers items in out and hands them
	// over in one append to pending; the lane's goroutine swaps pending
	// for work and is woken only when it waits. The window bounds all
	// three (at most maxInFlight items in flight in the partition).
	out     []laneItem    // the dispatcher's
	mu      sync.Mutex    // guards pending, waiting, closed
	pending []laneItem    // guarded by mu
	waiting bool          // guarded by mu: the goroutine waits on wake
	closed  bool          // guarded by mu: nothing more will be handed
	wake    chan struct{} // one token per wait
	work    []laneItem    // the lane goroutine's
}

type laneItem struct {
	record  *Record
	slot    int
	attempt int
}

func newLane(w *partitionWorker) *lane {
	l := &lane{w: w, handle: w.h.chain(w.app)}
	l.dc.Context = w.ctx
	if w.h.batch != nil {
		l.batch = make([]*Record, 0, w.h.batch.maxCount)
	}
	if w.h.keyLanes > 1 {
		// One block for the three, each grown by append on its own when
		// keys crowd the lane.
		n := max(1, w.h.maxInFlight/w.h.keyLanes)
		items := make([]laneItem, 3*n)
		l.out, l.pending, l.work = items[:0:n], items[n:n:2*n], items[2*n:2*n:3*n]
		l.wake = make(chan struct{}, 1)
	}
	return l
}

func (l *lane) one(r *Record) []*Record {
	l.single[0] = r
	return l.single[:]
}

// hand appends items to the lane's pending ones (the dispatcher only) and
// wakes the lane if it waits.
func (l *lane) hand(items []laneItem) {
	l.mu.Lock()
	l.pending = append(l.pending, items...)
	l.wakeLocked()
	l.mu.Unlock()
}

// close lets the lane's goroutine exit once it has taken what was handed.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.wakeLocked()
	l.mu.Unlock()
}

func (l *lane) wakeLocked() {
	if l.waiting {
		l.waiting = false
		l.wake <- struct{}{}
	}
}

func (l *lane) loop(done *sync.WaitGroup) {
	defer done.Done()
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closed {
			l.waiting = true
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		if len(l.pending) == 0 {
			l.mu.Unlock()
			return // closed, and everything handed was taken
		}
		l.work, l.pending = l.pending, l.work[:0]
		l.mu.Unlock()
		for i, item := range l.work {
			l.work[i] = laneItem{}
			if l.w.stopping.Load() {
				continue // left pending: not committed, so delivered again later
			}
			l.deliver(l.one(item.record), item.slot, item.attempt)
		}
	}
}

// deliver runs the handler for records (which occupy the slots from
// first) and applies the ack policy.
func (l *lane) deliver(records []*Record, first, attempt int) {
	w := l.w
	d := &l.dc
	d.records, d.attempt, d.manual = records, attempt, manualNone
	policy := w.h.ack
	if policy == AckFirst {
		w.finish(first, len(records), slotAcked)
	}
	err := l.handle(d, records)
	if err != nil {
		w.app.cfg.onError(d, records, err)
		w.app.emit(Event{Kind: EventFailed, Records: records, Err: err})
	} else {
		w.app.emit(Event{Kind: EventHandled, Records: records})
	}
	state := slotAcked
	switch policy {
	case AckFirst:
		state = slotPending
	case NackOnError:
		if err != nil {
			state = slotFailed
		}
	case Manual:
		switch d.manual {
		case manualNone:
			state = slotSkipped
		case manualNack:
			state = slotFailed
		}
	}
	d.records = nil
	l.single[0] = nil
	if state != slotPending {
		w.finish(first, len(records), state)
	}
}
