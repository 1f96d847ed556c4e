package plog

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"sync"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// maxGroup bounds how many appends one group commit takes, so one writev
// stays within IOV_MAX and acknowledgements are not held back for long.
const maxGroup = 512

// appendReq is one queued append. The appender owns it until it is sent to
// the queue; then the writer owns it until done is signalled (the appender
// owns it again and recycles it) or, for AckNone, until the writer recycles
// it itself.
type appendReq struct {
	records []byte
	ack     AckPolicy
	kind    reqKind
	marker  TxnMarker // reqMarker: the marker records is the control batch of
	result  AppendResult
	err     error
	done    chan struct{} // capacity 1, reused across uses

	producers []ProducerInfo // reqDescribe: the answer
}

// reqKind is what a queued request asks of the writer.
type reqKind uint8

const (
	reqAppend   reqKind = iota // append a producer's batches
	reqMarker                  // append a transaction marker (txn.go)
	reqDescribe                // list the producer table (no write)
)

var reqPool = sync.Pool{New: func() any { return &appendReq{done: make(chan struct{}, 1)} }}

func getReq() *appendReq { return reqPool.Get().(*appendReq) }

func putReq(r *appendReq) {
	r.records, r.err, r.result = nil, nil, AppendResult{}
	r.kind, r.marker, r.producers = reqAppend, TxnMarker{}, nil
	reqPool.Put(r)
}

// pendingBatch is a batch of the active segment written (or about to be)
// but not yet published: not yet known to be durable.
type pendingBatch struct {
	base, last, maxTs int64
	pos, size         int64
	txn               txnEvent // applied when published
}

// writer is the single owner of the active segment and of the producer
// table: everything here is touched only by the writer goroutine (and by
// Open before the goroutine starts, and Close after it ends), except the
// publisher, which has its own owner (syncer.go).
type writer struct {
	l         *Log
	path      WritePath
	active    *segment
	writePos  int64 // end of the bytes written to active (>= active.size)
	next      int64 // next offset to assign
	producers producerTable

	q         <-chan *appendReq // the running writer's queue (run)
	group     []*appendReq
	lastGroup int            // appends in the previous group
	iov       [][]byte       // bytes of the group not yet written, for one writev
	iovN      int64          // total length of iov
	pend      []pendingBatch // the group's batches, handed to the publisher once written
	prealloc  preallocator   // the active segment's reserved blocks (prealloc.go)
	writeback earlyWriteback // the active segment's early writeback (writeback.go)
	// writebackBytes is Config.EarlyWritebackBytes as of the group being
	// committed (read with the config writeGroup reads anyway).
	writebackBytes int64

	producersCheckedAt time.Time // the last look for expired producers

	publishing bool // the publisher goroutine runs (WriteSyscall)

	// After a full disk (resumable sticky error): the next attempt to
	// resume, and the wait before the one after it.
	resumeAt      time.Time
	resumeBackoff time.Duration

	pub publisher // makes written batches durable, then visible
}

func (w *writer) init(l *Log) {
	w.l = l
	w.path = l.cfg.WritePath
	if w.producers.states == nil {
		w.producers = newProducerTable()
	}
	w.pub.init(l)
	w.producersCheckedAt = l.cfg.Clock.Now() // recovery has just expired them
}

// openActive makes the last segment writable, creating the first segment of
// an empty log.
func (w *writer) openActive() error {
	l := w.l
	l.mu.Lock()
	w.next, w.pub.published = l.hwm, l.hwm
	l.writtenEnd.Store(w.next)
	var last *segment
	if n := len(l.segments); n > 0 {
		last = l.segments[n-1]
	}
	l.mu.Unlock()
	if last == nil {
		return w.createSegment(w.next)
	}
	w.active = last
	w.writePos = last.size
	w.prealloc.reset()
	w.writeback.reset(w.writePos)
	return w.prepareActive(0)
}

// createSegment creates the segment starting at base, makes its directory
// entry durable and makes it the active one.
func (w *writer) createSegment(base int64) error {
	l := w.l
	name := path.Join(l.dir, segmentName(base))
	f, err := l.cfg.FS.Create(name)
	if err != nil {
		return writeError("create segment", err)
	}
	if err := l.cfg.FS.SyncDir(l.dir); err != nil {
		f.Close()
		return &IOError{Op: "sync dir", Err: err}
	}
	s := newSegment(l.dir, base, f, l.cfg.Clock.Now(), l.cfg.FS, l.cfg.FileCache)
	l.mu.Lock()
	l.segments = append(l.segments, s)
	l.mu.Unlock()
	w.active, w.writePos = s, 0
	w.prealloc.reset()
	w.writeback.reset(0)
	return w.prepareActive(0)
}

// prepareActive maps the active segment for WriteMmap, preallocating at
// least need bytes beyond what is written.
func (w *writer) prepareActive(need int64) error {
	if w.path != WriteMmap {
		return nil
	}
	s := w.active
	capacity := w.l.config().SegmentBytes
	if min := w.writePos + need; capacity < min {
		capacity = min
	}
	if s.mapped != nil {
		if int64(len(s.mapped)) >= capacity {
			return nil
		}
		if err := s.file.Unmap(); err != nil {
			return &IOError{Op: "unmap", Err: err}
		}
		s.mapped = nil
	}
	if err := s.file.Truncate(capacity); err != nil {
		return writeError("preallocate", err)
	}
	m, err := s.file.Map(capacity)
	if err != nil {
		return &IOError{Op: "mmap", Err: err}
	}
	s.mapped, s.capacity = m, capacity
	return nil
}

// sealActive makes the active segment's file exactly its data, durable, and
// unmapped: after a roll or at close.
func (w *writer) sealActive() error {
	s := w.active
	if s.mapped != nil {
		if err := s.file.Unmap(); err != nil {
			return &IOError{Op: "unmap", Err: err}
		}
		s.mapped = nil
		if err := s.file.Truncate(w.writePos); err != nil {
			return &IOError{Op: "truncate", Err: err}
		}
	}
	if err := w.prealloc.trim(s.file, w.writePos); err != nil {
		return &IOError{Op: "truncate", Err: err}
	}
	if err := s.file.Sync(); err != nil {
		return &IOError{Op: "sync", Err: err}
	}
	return nil
}

// closeActive seals the active segment at Close.
func (w *writer) closeActive() error {
	if w.active == nil {
		return nil
	}
	w.l.mu.RLock()
	failed := w.l.failed
	w.l.mu.RUnlock()
	if failed != nil {
		if w.active.mapped != nil {
			w.active.file.Unmap()
			w.active.mapped = nil
		}
		return failed
	}
	if w.active.mapped == nil && w.prealloc.end <= w.writePos && w.l.writtenEnd.Load() == w.l.HighWatermark() {
		// Everything written was synced and published (the writer and
		// its publisher have ended), and no reserve is left to free: the
		// file is already exactly its data, durable. Closing an idle
		// partition opens and syncs nothing (issue 12: 100,000 of them
		// overran the shutdown timeout).
		return nil
	}
	if err := w.active.pinWriter(); err != nil {
		return err
	}
	return w.sealActive()
}

// run is the writer goroutine: it takes everything queued, writes it with
// one system call (or one copy per append into the mapping), acknowledges
// what asked for the page cache only and hands the rest to the publisher,
// which syncs, publishes and acknowledges the AckForced appends.
//
// It runs on demand (Log.acquireQueue): it starts once the writer before
// it (prev) has ended, and ends, closing done, when Close stops it or its
// queue q has stayed empty for writerIdle with no sender holding it
// (stopIfIdle); its publisher ends with it, once it has published what it
// was handed.
func (w *writer) run(q chan *appendReq, prev, done chan struct{}) {
	defer func() {
		close(done)
		l := w.l
		l.qmu.Lock()
		if l.writerDone == done {
			l.writerDone = nil // nothing left to wait for
		}
		l.qmu.Unlock()
	}()
	if prev != nil {
		<-prev
	}
	w.q = q
	w.startPublisher()
	defer func() {
		w.stopPublisher()
		w.pub.checkpointDue() // the last publications may be the last for a while
	}()
	// The idle check runs every writerIdle; it stops the writer when no
	// group was committed since the previous check (no timer reset per
	// group: the hot path pays nothing for it).
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	groups, groupsAtCheck := 0, 0
	for {
		select {
		case <-idle.C:
			if groups == groupsAtCheck && w.stopIfIdle(q) {
				return
			}
			groupsAtCheck = groups
			idle.Reset(writerIdle)
			continue
		case r := <-q:
			w.group = append(w.group[:0], r)
			if w.lastGroup > 1 && yieldBeforeDrain {
				// The producers acknowledged by the last group were just
				// made runnable and are about to append again: let them
				// run before draining, or the group splits into a small
				// one and a large one. A yield, not a timer: nobody waits
				// when nobody else is ready to run.
				runtime.Gosched()
			}
		case <-w.l.stop:
			// No appender can send any more (closeMu): drain and stop.
			for {
				w.group = w.group[:0]
				w.drain()
				if len(w.group) == 0 {
					return
				}
				w.commit()
			}
		}
		w.drain()
		w.lastGroup = len(w.group)
		w.commit()
		if len(q) == 0 && w.path != WriteMmap {
			// Idle: the file cache may close the active file (reopened
			// on the next group), so idle partitions hold no descriptor.
			// The mapping of WriteMmap needs the file: it stays pinned.
			w.active.unpinWriter()
		}
		groups++
	}
}

// stopIfIdle ends the writer's run if its queue is empty and no appender
// holds it: the log then has no queue until the next append starts a
// writer (which waits for this one to end). It lets go of the group's
// buffers, so an idle log holds none.
func (w *writer) stopIfIdle(q chan *appendReq) bool {
	l := w.l
	l.qmu.Lock()
	if l.senders > 0 || len(q) > 0 || l.queue != q {
		l.qmu.Unlock()
		return false
	}
	l.queue = nil
	l.qmu.Unlock()
	w.q = nil
	w.group, w.iov, w.pend = nil, nil, nil
	return true
}

// startPublisher starts the publisher goroutine of a WriteSyscall log.
func (w *writer) startPublisher() {
	if w.path != WriteMmap && !w.publishing {
		w.publishing = true
		w.pub.start()
	}
}

// stopPublisher stops it once it has published what it was handed.
func (w *writer) stopPublisher() {
	if w.publishing {
		w.publishing = false
		w.pub.stop()
		w.pub.release()
	}
}

// yieldBeforeDrain is a variable so benchmarks can compare both ways.
var yieldBeforeDrain = true

// drain adds queued appends to the group without waiting.
func (w *writer) drain() {
	for len(w.group) < maxGroup {
		select {
		case r := <-w.q:
			w.group = append(w.group, r)
		default:
			return
		}
	}
}

// commit writes and acknowledges one group, in the order that makes visible
// mean durable (design D14): write; acknowledge the AckNone and AckWritten
// appends (they asked for the page cache only) and the refused ones; hand
// the group's batches and AckForced appends to the publisher, which fsyncs,
// publishes them (high watermark, Read, Wait) and then acknowledges the
// AckForced appends. Every batch written is synced before it is published.
//
// On WriteSyscall the publisher is a goroutine of its own: while it
// fsyncs, the writer writes the next groups, and its next fsync covers them
// all (group commit without a timer), so AckWritten appends run at
// page-cache speed and become visible one fsync later. On WriteMmap the
// writer publishes itself, after the write: stores into the mapping and its
// msync do not overlap (the in-memory test filesystem copies the mapping to
// sync it).
func (w *writer) commit() {
	l := w.l
	// Failing to reopen the active file (out of descriptors) fails this
	// group only: nothing was written, a later group may succeed.
	err := w.active.pinWriter()
	start := w.pub.clock.Now()
	if err == nil {
		err = w.fail(w.writeGroup(start))
		if err != nil && w.resumeAt.IsZero() && resumable(err) {
			// The wait before the first attempt to resume starts now.
			w.resumeBackoff = diskFullRetryMin
			w.resumeAt = w.pub.clock.Now().Add(w.resumeBackoff)
		}
	}
	logStart := l.LogStartOffset()
	var written time.Time // read only for a group with AckForced appends
	// Once acknowledged, a request belongs to its appender (or to the pool)
	// again: the AckForced ones are set apart first, in place.
	forced := w.group[:0]
	for _, r := range w.group {
		r.result.Timing.Grouped = start
		if r.ack == AckForced {
			if written.IsZero() {
				written = w.pub.clock.Now()
			}
			r.result.Timing.Written = written
		}
		if r.ack == AckForced && err == nil && (r.err == nil || errors.Is(r.err, ErrDuplicateSequence)) {
			// A duplicate is acknowledged with its original's offset
			// once the original is durable: it was handed over before,
			// or with this group.
			forced = append(forced, r)
			continue
		}
		w.acknowledge(r, err, logStart)
	}
	if err == nil {
		w.pub.hand(w.active, w.pend, forced, false)
		if !written.IsZero() && w.path == WriteSyscall && w.writebackBytes > 0 {
			// After the handover, and only while an fdatasync runs: an
			// idle publisher starts one covering this group at once (a
			// start would only delay it: it was just made runnable on
			// this thread, which the system call would hold).
			if !w.pub.syncing.Load() {
				w.writeback.covered(w.writePos)
			} else if werr := w.writeback.start(w.active.file, w.writePos, w.writebackBytes); werr != nil {
				l.logger().Warn("early writeback failed; the fdatasyncs of this segment write everything", "err", werr)
			}
		}
	}
	w.pend = w.pend[:0]
	clear(w.group) // no stale pointers to recycled requests
	w.group = w.group[:0]
	if w.path == WriteMmap {
		w.pub.publish()
	}
}

func (w *writer) fail(err error) error { return w.l.fail(err) }

func (w *writer) acknowledge(r *appendReq, err error, logStart int64) { acknowledge(r, err, logStart) }

// acknowledge hands r back to its appender (or recycles it, for AckNone)
// with err, the group's I/O error, unless r has an error of its own.
func acknowledge(r *appendReq, err error, logStart int64) {
	if err != nil && (r.err == nil || errors.Is(r.err, ErrDuplicateSequence)) {
		r.err = err
	}
	r.result.LogStartOffset = logStart
	if r.ack == AckNone {
		putReq(r)
		return
	}
	r.done <- struct{}{}
}

// writeGroup assigns offsets and writes the group, at now (syncing and publishing
// only the part of it in a segment that is rolled). Requests refused by the
// idempotence check get their error in r.err; an I/O error is returned.
func (w *writer) writeGroup(now time.Time) error {
	l := w.l
	cfg := l.config()
	if err := l.Err(); err != nil {
		if !w.resumeDue(now) {
			return err
		}
		if rerr := w.resume(now); rerr != nil {
			l.logger().Warn("partition log still cannot resume after disk full", "err", rerr, "retry_in", w.resumeBackoff)
			return err
		}
		l.logger().Info("partition log resumed after disk full", "high_watermark", w.next)
	}
	if w.writePos > 0 && now.Sub(w.active.created) >= cfg.SegmentMaxAge {
		if err := w.roll(); err != nil {
			return err
		}
	}
	if now.Sub(w.producersCheckedAt) >= producerExpiryCheckInterval {
		w.producersCheckedAt = now
		if n := w.producers.expire(now.UnixMilli(), cfg.ProducerIDExpiration); n > 0 {
			l.logger().Info("forgot idle idempotent producers", "producers", n, "idle_for", cfg.ProducerIDExpiration)
		}
	}
	w.writebackBytes = cfg.EarlyWritebackBytes
	appendTime := int64(-1)
	if cfg.TimestampType == LogAppendTime {
		appendTime = now.UnixMilli()
	}
	w.iov, w.iovN = w.iov[:0], 0
	for _, r := range w.group {
		if r.kind == reqDescribe {
			r.producers = w.producers.snapshot()
			continue
		}
		size := int64(len(r.records))
		if w.writePos+w.iovN+size > cfg.SegmentBytes && w.writePos+w.iovN > 0 {
			if err := w.flush(); err != nil {
				return err
			}
			if err := w.roll(); err != nil {
				return err
			}
		}
		if err := w.assign(r, now.UnixMilli(), appendTime); err != nil {
			// A duplicate's original is written, in this group or an
			// earlier one: it is acknowledged as its original once that is
			// durable (AckForced appends are acknowledged after the sync).
			r.err = err
			continue
		}
		w.iov = append(w.iov, r.records)
		w.iovN += int64(len(r.records))
	}
	return w.flush()
}

// assign checks the idempotence of r's batches and assigns their offsets,
// noting them as pending at the current write position; nowMs is the time of
// the append (producer idleness), appendTime the LogAppendTime or -1.
func (w *writer) assign(r *appendReq, nowMs, appendTime int64) error {
	if r.kind == reqMarker {
		return w.assignMarker(r, nowMs, appendTime)
	}
	pos := w.writePos + w.iovN
	next := w.next
	first := len(w.pend)
	for off := 0; off < len(r.records); {
		b := r.records[off:]
		h, _ := batch.ParseHeader(b) // validated by Append
		size := h.Size()
		dupBase, err := w.producers.check(&h)
		if err != nil {
			w.producers.rollback()
			w.pend = w.pend[:first]
			if errors.Is(err, ErrDuplicateSequence) && off == 0 {
				r.result = AppendResult{BaseOffset: dupBase, LogAppendTime: -1}
				return err
			}
			if errors.Is(err, ErrDuplicateSequence) {
				err = ErrOutOfOrderSequence
			}
			return err
		}
		var ev txnEvent
		if w.producers.record(&h, next, nowMs, true) {
			ev = txnEvent{kind: txnBegin, producerID: h.ProducerID}
		}
		batch.SetBaseOffset(b[:size], next)
		maxTs := h.MaxTimestamp
		if appendTime >= 0 {
			batch.SetLogAppendTime(b[:size], appendTime)
			maxTs = appendTime
		}
		last := next + int64(h.LastOffsetDelta)
		w.pend = append(w.pend, pendingBatch{base: next, last: last, maxTs: maxTs, pos: pos, size: int64(size), txn: ev})
		pos += int64(size)
		next = last + 1
		off += size
	}
	w.producers.commit()
	r.result = AppendResult{BaseOffset: w.next, LogAppendTime: appendTime}
	w.next = next
	return nil
}

// assignMarker checks the marker of r against its producer's state and
// assigns its control batch (r.records, built by WriteTxnMarker) its
// offset, ending the producer's transaction as of that offset.
func (w *writer) assignMarker(r *appendReq, nowMs, appendTime int64) error {
	if err := w.producers.checkMarker(&r.marker); err != nil {
		return err
	}
	b := r.records
	h, _ := batch.ParseHeader(b) // built by WriteTxnMarker
	offset := w.next
	batch.SetBaseOffset(b, offset)
	maxTs := h.MaxTimestamp
	if appendTime >= 0 {
		batch.SetLogAppendTime(b, appendTime)
		maxTs = appendTime
	}
	first := w.producers.recordMarker(&r.marker, offset, nowMs, maxTs, false)
	ev := txnEvent{kind: txnAbort, producerID: r.marker.ProducerID, first: first}
	if r.marker.Commit {
		ev.kind = txnCommit
	}
	w.pend = append(w.pend, pendingBatch{base: offset, last: offset, maxTs: maxTs, pos: w.writePos + w.iovN, size: int64(len(b)), txn: ev})
	r.result = AppendResult{BaseOffset: offset, LogAppendTime: appendTime}
	w.next = offset + 1
	return nil
}

// flush writes the bytes of iov to the active segment. They stay invisible
// (pend) until the publisher has made them durable and published them.
func (w *writer) flush() error {
	if len(w.iov) == 0 {
		return nil
	}
	n := w.iovN
	s := w.active
	switch w.path {
	case WriteMmap:
		if w.writePos+n > int64(len(s.mapped)) {
			if err := w.prepareActive(n); err != nil {
				return err
			}
		}
		pos := w.writePos
		for _, b := range w.iov {
			pos += int64(copy(s.mapped[pos:], b))
		}
	default:
		w.prealloc.reserve(s.file, w.writePos, n, w.l.config().SegmentBytes)
		written, err := s.file.Writev(w.iov)
		if err == nil && int64(written) != n {
			err = fmt.Errorf("short write: %d of %d bytes", written, n)
		}
		if err != nil {
			return writeError("write "+s.path, err)
		}
	}
	w.writePos += n
	w.l.writtenEnd.Store(w.next)
	w.iov, w.iovN = w.iov[:0], 0
	return nil
}

// roll seals the active segment (durably: a sealed segment never has a torn
// tail), has everything it holds published and starts a new one at the next
// offset. So the publisher only ever syncs and publishes the active segment.
func (w *writer) roll() error {
	if err := w.sealActive(); err != nil {
		return err
	}
	w.pub.hand(w.active, w.pend, nil, true)
	w.pend = w.pend[:0]
	if err := w.pub.publish(); err != nil {
		return err
	}
	old := w.active
	if err := w.createSegment(w.next); err != nil {
		return err
	}
	old.seal() // its file is the cache's from now on
	return nil
}

// Resuming after a full disk. A write that failed with ENOSPC failed its
// whole group before any of it was acknowledged, but it left the writer's
// state ahead of the disk: offsets and producer sequences assigned to
// batches never written, maybe part of a batch in the file, and batches
// written before it that the publisher, seeing the failure, never
// published. Rather than undo each of these, the writer recovers the log
// from what is on disk, as Open does (truncating what is not whole, syncing
// and publishing what is), and starts again from there. It tries when an
// append arrives, at most every resumeBackoff (doubling from
// diskFullRetryMin to diskFullRetryMax while the disk stays full); clients
// retry KAFKA_STORAGE_ERROR meanwhile. A failed fsync is never resumed
// (Log.unresumable): after it, what the page cache shows may not be on disk,
// and a new fsync would not write it.
const (
	diskFullRetryMin = time.Second
	diskFullRetryMax = time.Minute
)

// resumeDue reports whether the log's sticky error is a full disk and it is
// time to try to resume.
func (w *writer) resumeDue(now time.Time) bool {
	l := w.l
	l.mu.RLock()
	ok := resumable(l.failed) && !l.unresumable
	l.mu.RUnlock()
	if !ok {
		return false
	}
	if w.resumeAt.IsZero() {
		w.resumeBackoff = diskFullRetryMin
		w.resumeAt = now.Add(w.resumeBackoff)
		return false
	}
	return !now.Before(w.resumeAt)
}

// resume recovers the log from disk and makes the writer start again from
// it (see above). On failure the log keeps its sticky error and the next
// attempt waits twice as long.
func (w *writer) resume(now time.Time) error {
	l := w.l
	w.stopPublisher() // it acknowledges what it holds with the error
	if s := w.active; s != nil && s.mapped != nil {
		s.file.Unmap() // recovery truncates the file
		s.mapped = nil
	}
	fresh := &Log{cfg: l.config(), fs: l.fs, clock: l.clock, dir: l.dir, baseLogger: l.baseLogger, firstTxn: noTxn}
	// Its recovery point is the high watermark: everything below it is
	// durable, and the unsynced rest is the tail recovery judges.
	if err := fresh.recover(l.checkpointEntry()); err != nil {
		fresh.closeFiles()
		w.resumeBackoff = min(2*w.resumeBackoff, diskFullRetryMax)
		w.resumeAt = now.Add(w.resumeBackoff)
		return err
	}
	l.mu.Lock()
	old := l.segments
	l.segments, l.logStart = fresh.segments, fresh.logStart
	l.txns, l.firstTxn, l.abortedEntries = fresh.txns, fresh.firstTxn, fresh.abortedEntries
	l.failed = nil
	l.publishLocked(fresh.hwm) // readers and long polls waiting look again
	l.mu.Unlock()
	for _, s := range old {
		s.drop() // readers still holding one keep its file open
	}
	w.producers = fresh.w.producers
	w.producersCheckedAt = now
	w.pend, w.iov, w.iovN = w.pend[:0], w.iov[:0], 0
	w.pub.init(l)
	w.resumeAt, w.resumeBackoff = time.Time{}, 0
	if err := w.openActive(); err != nil {
		return l.fail(err)
	}
	w.startPublisher()
	return nil
}
