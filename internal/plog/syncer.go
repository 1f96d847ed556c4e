package plog

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
)

// publisher makes written batches durable and then visible (design D14):
// it takes what the writer handed over, fsyncs the segment once for all of
// it, publishes the batches (segment indexes and size, high watermark,
// waking Wait) and acknowledges the AckForced appends. On WriteSyscall it
// runs in a goroutine of its own (run), so the writer keeps writing while it
// syncs; the writer also calls publish itself at a roll (and, on WriteMmap,
// after every group).
//
// Ownership: the handed-over slices (handed*) are guarded by handMu, which
// the writer holds only to append to them. Everything else belongs to
// whoever holds publishMu: one publication at a time, in handover order.
// Lock order: publishMu, then handMu or Log.mu (both leaves).
type publisher struct {
	l     *Log
	clock clock.Clock // Config.Clock, which SetConfig never changes

	handMu       sync.Mutex
	handedSeg    *segment       // (handMu) the segment the handed batches are in
	handedPend   []pendingBatch // (handMu) written, in offset order
	handedForced []*appendReq   // (handMu) AckForced appends to acknowledge after the sync
	handedRoll   bool           // (handMu) a roll sealed handedSeg: publish (and see whether the checkpoints are due)
	// handedPins (handMu) counts the pins of handedSeg's file taken by hand
	// and not yet released by publish: from the write to its fsync the
	// file stays open, because a file the cache closed and reopened would
	// not report a writeback error from before the reopen (errseq), and
	// the fsync could succeed over pages the kernel dropped.
	handedPins int
	wake       chan struct{} // capacity 1: something was handed over (nil while run is not running)
	quit       chan struct{} // closed by stop (new for each run: writer.startPublisher)
	exited     chan struct{} // closed when run returns

	interval  time.Duration // Config.SyncInterval: pacing of publications without AckForced appends
	paceTimer *time.Timer   // (run) the wait of pace, reused

	// lastReleased is how many AckForced appends the last publication
	// acknowledged (set by publish): run yields before the next only when
	// they were several (a group to wait for). yields counts those yields.
	lastReleased atomic.Int32
	yields       atomic.Int64
	// syncing is set while publish's fdatasync runs: the writer starts
	// early writeback (writeback.go) only then, when what it just wrote
	// must wait for the next fdatasync.
	syncing atomic.Bool

	publishMu sync.Mutex
	pend      []pendingBatch // (publishMu) the publication in progress; swapped with handedPend
	forced    []*appendReq   // (publishMu) likewise
	published int64          // (publishMu) offset after the last published batch

}

func (p *publisher) init(l *Log) {
	p.l, p.clock = l, l.cfg.Clock
	p.interval = l.cfg.SyncInterval
}

// hand gives the publisher written batches of seg (copied: the caller keeps
// pend) and AckForced appends to acknowledge once they are durable (the
// publisher owns them from now on). rolled says seg was just sealed.
func (p *publisher) hand(seg *segment, pend []pendingBatch, forced []*appendReq, rolled bool) {
	if len(pend) == 0 && len(forced) == 0 && !rolled {
		return
	}
	p.handMu.Lock()
	if len(pend) > 0 {
		// The writer holds its pin on seg, so its file is open and this
		// only counts. All batches handed between two publications are in
		// one segment: a roll publishes before the next segment exists.
		if err := seg.acquire(); err != nil {
			panic("plog: the active segment's file is not open during a handover: " + err.Error())
		}
		p.handedSeg = seg
		p.handedPins++
	}
	p.handedPend = append(p.handedPend, pend...)
	p.handedForced = append(p.handedForced, forced...)
	p.handedRoll = p.handedRoll || rolled
	p.handMu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run is the publisher goroutine of WriteSyscall logs.
func (p *publisher) run() {
	defer close(p.exited)
	var lastSync time.Time // when the last publication (and its fsync) started
	for {
		select {
		case <-p.wake:
			if yieldBeforeDrain && p.releasedSeveral() {
				// The writer may be writing the rest of a group formed by
				// producers the last fsync released: let it hand that over
				// too, so one fsync covers them (as in writer.run). Not
				// after a publication that released one append or none:
				// then no such group is forming, and on a busy machine the
				// yield costs whoever waits for this fsync (a producer's
				// ack, a consumer's long poll) a turn of every runnable
				// goroutine (issue 12: 57 µs per publication on average
				// at loadavg 4, go tool trace -pprof=sched).
				p.yields.Add(1)
				runtime.Gosched()
			}
			p.pace(lastSync)
			lastSync = time.Now()
			p.publish()
		case <-p.quit:
			p.publish() // what the writer's last groups handed over
			return
		}
	}
}

// pace holds back a publication that has no AckForced append to
// acknowledge until Config.SyncInterval has passed since the previous one
// started (last). Without it, AckWritten appends alone keep the publisher
// in back-to-back fdatasyncs (thousands a second at 20,000 records/s), and
// on some storage (virtio-blk, where each one is a device cache flush) that
// flush rate stalls the whole machine for milliseconds at a time, appends
// and their acknowledgements included. An AckForced append handed over
// meanwhile, a roll or Close ends the wait at once: acks=all keeps its
// adaptive group commit, and nothing becomes visible before its fsync
// (design D14); AckWritten batches become visible at most SyncInterval
// later than unpaced. The interval is real time, not Config.Clock: it
// paces system calls.
func (p *publisher) pace(last time.Time) {
	if p.interval <= 0 {
		return
	}
	for {
		p.handMu.Lock()
		urgent := len(p.handedForced) > 0 || p.handedRoll
		p.handMu.Unlock()
		if urgent {
			return
		}
		wait := p.interval - time.Since(last)
		if wait <= 0 {
			return
		}
		if p.paceTimer == nil {
			p.paceTimer = time.NewTimer(wait)
		} else {
			p.paceTimer.Reset(wait) // Go 1.23+: no stale tick after Reset
		}
		select {
		case <-p.paceTimer.C:
			return
		case <-p.wake: // more handed over: AckForced ones end the wait
			p.paceTimer.Stop()
		case <-p.quit:
			p.paceTimer.Stop()
			return
		}
	}
}

// releasedSeveral reports whether the last publication acknowledged more
// than one AckForced append.
func (p *publisher) releasedSeveral() bool { return p.lastReleased.Load() > 1 }

// stop ends run once everything handed over is published; the writer calls
// it after its last group.
func (p *publisher) stop() {
	close(p.quit)
	<-p.exited
}

// start starts run (WriteSyscall), with channels of its own.
func (p *publisher) start() {
	p.wake, p.quit, p.exited = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go p.run()
}

// release lets go of what only a running publisher needs (its channels,
// its timer, the buffers of its publications), once run has ended and
// before the writer goroutine ends: an idle log holds none of it.
func (p *publisher) release() {
	p.wake, p.quit, p.exited = nil, nil, nil
	if p.paceTimer != nil {
		p.paceTimer.Stop()
		p.paceTimer = nil
	}
	p.publishMu.Lock()
	p.handMu.Lock()
	if len(p.handedPend) == 0 && len(p.handedForced) == 0 {
		p.handedPend, p.handedForced = nil, nil
	}
	p.handMu.Unlock()
	p.pend, p.forced = nil, nil
	p.publishMu.Unlock()
}

// publish takes everything handed over, syncs it, publishes it and
// acknowledges its AckForced appends. It returns the log's sticky error:
// after a failed write or fsync nothing is ever published again (fsync is
// not retried: the page cache may have dropped what it failed to write).
func (p *publisher) publish() error {
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	l := p.l
	p.handMu.Lock()
	seg, pins := p.handedSeg, p.handedPins
	p.handedPins = 0
	p.pend, p.handedPend = p.handedPend, p.pend[:0]
	p.forced, p.handedForced = p.handedForced, p.forced[:0]
	p.handedRoll = false
	p.handMu.Unlock()

	err := l.Err()
	var syncStart, syncEnd time.Time
	if err == nil && len(p.pend) > 0 {
		// One fsync for everything written so far: the groups handed
		// over while the previous one ran are all here.
		syncStart = p.clock.Now()
		p.syncing.Store(true)
		serr := seg.file.Sync()
		p.syncing.Store(false)
		syncEnd = p.clock.Now()
		if serr != nil {
			err = l.fail(&IOError{Op: "sync", Err: serr})
		} else {
			l.syncs.Add(1)
			if aborted := p.publishLocked(seg); len(aborted) > 0 {
				// Before the markers' acknowledgements: the index entry is
				// as durable as its marker when WriteTxnMarker returns.
				err = l.fail(l.appendTxnIndex(seg, aborted))
			}
		}
	}
	for ; pins > 0; pins-- {
		seg.release()
	}
	logStart := l.LogStartOffset()
	p.lastReleased.Store(int32(len(p.forced)))
	for _, r := range p.forced {
		if !syncStart.IsZero() {
			r.result.Timing.SyncStarted, r.result.Timing.Synced = syncStart, syncEnd
		}
		acknowledge(r, err, logStart)
	}
	clear(p.forced) // no stale pointers to recycled requests
	p.forced = p.forced[:0]
	if err == nil {
		p.checkpointDue()
	}
	return err
}

// publishLocked (publishMu held) makes p.pend, durable batches of seg,
// visible. It returns the aborted-transaction entries the publication added
// to seg (immutable once appended: read without Log.mu).
func (p *publisher) publishLocked(seg *segment) (aborted []AbortedTxn) {
	l := p.l
	interval := int64(l.config().IndexInterval)
	l.mu.Lock()
	before := len(seg.aborted)
	for _, b := range p.pend {
		seg.noteBatchLocked(b.base, b.last, b.maxTs, b.pos, b.size, interval)
		l.noteTxnLocked(b.txn, seg, b.base, b.last, b.pos)
	}
	p.published = p.pend[len(p.pend)-1].last + 1
	l.publishLocked(p.published)
	aborted = seg.aborted[before:]
	l.mu.Unlock()
	p.pend = p.pend[:0]
	return aborted
}

// checkpointDue starts a write of the data directory's checkpoints when
// CheckpointInterval has passed since the last (one atomic load if not).
func (p *publisher) checkpointDue() { p.l.cp.due(p.clock.Now()) }

// fail makes err, an I/O error of the writer or the publisher, the log's
// sticky error and returns the sticky error (nil when err is nil).
func (l *Log) fail(err error) error {
	if err == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !resumable(err) {
		l.unresumable = true
	}
	if l.failed == nil {
		l.failed = err
		if resumable(err) {
			l.logger().Error("partition log failed: disk full; appends refused until space is back", "err", err)
		} else {
			l.logger().Error("partition log failed; appends refused until restart", "err", err)
		}
	}
	return l.failed
}
