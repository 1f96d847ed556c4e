package plog

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

const (
	// producerExpiryCheckInterval is Kafka's
	// producer.id.expiration.check.interval.ms: how often the writer looks
	// for expired producers (on an append).
	producerExpiryCheckInterval = 10 * time.Minute
)

// Log is one partition's log: a directory of segments, one writer goroutine
// that owns the active segment (group commit), and readers that take file
// ranges of published batches. The writer (and its publisher) runs only
// while there is work: the first append of an idle log starts it, and it
// stops once its queue has stayed empty for writerIdle, so an idle
// partition holds no goroutine, no queue and no descriptor (issue 12).
//
// Lock order: closeMu before qmu before mu. The writer goroutine takes mu
// only to publish; it never holds mu during I/O.
type Log struct {
	cfgMu sync.Mutex
	cfg   Config // dynamic fields read by the writer under cfgMu

	fs         interface{ SyncDir(string) error }
	clock      clock.Clock // Config.Clock (static): times the appends' steps
	dir        string
	baseLogger *slog.Logger // Config.Logger (static): see logger

	closeMu sync.RWMutex  // held for reading while sending to queue
	closed  bool          // (closeMu)
	stop    chan struct{} // closed by Close: the running writer drains and ends

	// The writer on demand (acquireQueue): queue is the running writer's
	// queue, nil while none runs; senders counts the appenders holding it
	// outside qmu (about to send, or blocked on a full queue), which keep
	// the writer from stopping; writerDone is closed when the last writer
	// started has ended (nil before the first).
	qmu        sync.Mutex
	queue      chan *appendReq // (qmu)
	senders    int             // (qmu)
	writerDone chan struct{}   // (qmu)

	mu       sync.RWMutex
	segments []*segment    // (mu) ordered by base offset; the last is active
	hwm      int64         // (mu) offset after the last published (durable) batch
	logStart int64         // (mu)
	waitCh   chan struct{} // (mu) closed when hwm next advances
	waited   bool          // (mu) someone holds waitCh
	failed   error         // (mu) sticky I/O error
	// unresumable is set by any failure the log must not resume from (an
	// fsync above all), even one after a full disk. (mu)
	unresumable bool

	// wakers (mu) are signalled wherever waitCh is closed (waker.go).
	wakers map[*Waker]struct{}
	// watchers (mu) are told of every change a reader could see
	// (watch.go): wherever the wakers are signalled, and when the log
	// start moves.
	watchers []Watcher

	// Transactions (txn.go), as published: where each producer's
	// transaction in progress begins, the earliest of them (noTxn when
	// none), and how many aborted-transaction entries the segments hold.
	txns           map[int64]txnStart // (mu)
	firstTxn       txnStart           // (mu)
	abortedEntries int                // (mu)

	w writer // owned by the writer goroutine

	syncs atomic.Int64 // group fsyncs of the active segment, for stats

	// writtenEnd is the offset after the last batch written (set by the
	// writer, >= hwm): offsets in [hwm, writtenEnd] are acknowledged to
	// AckWritten producers but not yet durable, so a reader gets nothing
	// there yet rather than ErrOffsetOutOfRange.
	writtenEnd atomic.Int64

	// scanHook, when set (a raft log: raftlog.go), is told of every batch
	// the recovery scan keeps, in log order; such a log also keeps control
	// batches that are not transaction markers (raft's, batch/raftcontrol.go).
	scanHook scanHook
	// scanApplies, when set (a raft log), tells the scan whether the batch
	// it is at is applied (committed): only those enter the producer table
	// and the transactions.
	scanApplies func() bool
	// scanSegmentStart, when set (a raft log: raftsnapshot.go), is told of
	// each segment before the scan reads its first batch.
	scanSegmentStart func(l *Log, s *segment)
	// raft is the storage of a raft log (raftlog.go), nil for a plain one:
	// Append and Enqueue go through its proposals (replicated.go).
	raft *RaftStorage
	// hwmSeg and hwmPos (mu), on a raft log, are where the batch at the
	// high watermark begins: its segments hold the bytes of entries not
	// yet committed, which Read never returns.
	hwmSeg *segment
	hwmPos int64

	// broken is set, for its whole life, on a Log made by Failed: it has no
	// segments and no writer, and refuses appends and reads with failed.
	broken bool

	// cp is the data directory's checkpoints (checkpoint.go), held from
	// Open to Close; cpKey is the log's name in them (its directory's).
	// nil on a Log made by Failed.
	cp    *checkpoints
	cpKey string
	// cpReplaced is set when a Log of the same directory opened in the
	// process while this one was still open (checkpoints.register): its
	// Close leaves the checkpoints alone.
	cpReplaced atomic.Bool
}

// Failed returns a Log for a partition that could not be opened (err, for
// example a *CorruptionError): every append and read fails with err, which
// the server reports as KAFKA_STORAGE_ERROR, while the broker keeps serving
// its other partitions. Nothing on disk is touched.
func Failed(cfg Config, err error) *Log {
	cfg.setNilDefaults()
	return &Log{
		cfg: cfg, fs: cfg.FS, clock: cfg.Clock, dir: cfg.Dir, baseLogger: cfg.Logger,
		stop: make(chan struct{}), waitCh: make(chan struct{}),
		failed: err, broken: true,
	}
}

// Syncs is the number of group fsyncs so far (each may acknowledge many
// AckForced appends).
func (l *Log) Syncs() int64 { return l.syncs.Load() }

// Open opens (recovering) or creates the partition log in cfg.Dir.
// OpenAll opens many on a bounded pool of recovery threads.
func Open(cfg Config) (*Log, error) {
	var bufs scanBuffers
	defer bufs.release()
	return open(cfg, &bufs)
}

// open is Open with the read buffers of a recovery thread.
func open(cfg Config, bufs *scanBuffers) (*Log, error) { return openWith(cfg, bufs, nil, nil, nil) }

// openWith is open with a scan hook (Log.scanHook): the raft storage's
// (raftlog.go).
func openWith(cfg Config, bufs *scanBuffers, hook scanHook, applies func() bool, segmentStart func(*Log, *segment)) (*Log, error) {
	cfg.setNilDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Log{
		cfg:        cfg,
		fs:         cfg.FS,
		clock:      cfg.Clock,
		dir:        cfg.Dir,
		baseLogger: cfg.Logger,
		stop:       make(chan struct{}),
		waitCh:     make(chan struct{}),

		firstTxn:    noTxn,
		scanHook:    hook,
		scanApplies: applies,

		scanSegmentStart: segmentStart,
	}
	cp, err := acquireCheckpoints(cfg)
	if err != nil {
		return nil, err
	}
	l.cp, l.cpKey = cp, checkpointKey(cfg.Dir)
	fail := func(err error) (*Log, error) {
		l.closeFiles()
		cp.release(true) // the open's error is the one to report
		return nil, err
	}
	// The listing tells an existing partition from a new one (no Stat
	// of its own: a system call per partition at start-up).
	names, err := cfg.FS.List(cfg.Dir)
	if errors.Is(err, iofs.ErrNotExist) {
		// A new partition: what the checkpoints say of a deleted one of
		// the same name is forgotten (and the files rewritten) before its
		// directory exists.
		if err := cp.forgetFresh(l.cpKey); err != nil {
			return fail(err)
		}
		if err := makeDirDurable(cfg.FS, cfg.Dir); err != nil {
			return fail(err)
		}
		names, err = nil, nil
	}
	if err != nil {
		return fail(&IOError{Op: "list " + cfg.Dir, Err: err})
	}
	entry := cp.entry(l.cpKey)
	legacy, err := l.recoverNames(bufs, entry, names)
	if err != nil {
		return fail(err)
	}
	if cp.clean && len(legacy) == 0 && entry.recoveryPoint >= 0 && l.hwm != entry.recoveryPoint {
		// After a clean shutdown every log ends at its recovery point:
		// something else changed the files (recovery judged them anyway).
		l.logger().Warn("the log does not end at its recovery point after a clean shutdown", "end", l.hwm, "recovery_point", entry.recoveryPoint)
	}
	l.w.init(l)
	if err := l.w.openActive(); err != nil {
		return fail(err)
	}
	cp.register(l, legacy)
	if l.w.path != WriteMmap {
		// Idle until the first append: the file cache may close the
		// active file (the mapping of WriteMmap needs it open).
		l.w.active.unpinWriter()
	}
	return l, nil
}

func (l *Log) config() Config {
	l.cfgMu.Lock()
	defer l.cfgMu.Unlock()
	return l.cfg
}

// SetConfig changes the dynamic settings (retention, segment size and age,
// max batch bytes, index interval, timestamp type). FS, Dir, Clock, Logger,
// WritePath, QueueDepth, SyncInterval and ProducerIDExpiration (a broker
// setting, not a topic's) are kept. An invalid cfg (Validate) changes
// nothing.
func (l *Log) SetConfig(cfg Config) error {
	l.cfgMu.Lock()
	defer l.cfgMu.Unlock()
	cfg.FS, cfg.Dir, cfg.Clock, cfg.Logger = l.cfg.FS, l.cfg.Dir, l.cfg.Clock, l.cfg.Logger
	cfg.WritePath, cfg.QueueDepth, cfg.FileCache = l.cfg.WritePath, l.cfg.QueueDepth, l.cfg.FileCache
	cfg.SyncInterval = l.cfg.SyncInterval
	cfg.ProducerIDExpiration = l.cfg.ProducerIDExpiration
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.cfg = cfg
	return nil
}

// Append validates records (one or more whole v2 batches back to back),
// assigns offsets, checks idempotent-producer sequences, and returns when
// ack is satisfied. The batch bytes are patched in place (base offset, and
// the max timestamp and CRC on LogAppendTime topics), so the caller must not
// touch records until Append returns, nor ever after it with AckNone (the
// writer may still be writing them).
//
// Concurrent appends are written together (group commit); within a group the
// AckNone and AckWritten appends are acknowledged after the write, the
// AckForced ones after the fsync that makes the group visible (doc.go,
// Writing). Append is Enqueue followed by Wait.
func (l *Log) Append(records []byte, ack AckPolicy) (AppendResult, error) {
	p, err := l.Enqueue(records, ack)
	if err != nil {
		return AppendResult{BaseOffset: -1, LogAppendTime: -1}, err
	}
	return p.Wait()
}

// Pending is an append queued by Enqueue. Call Wait exactly once.
type Pending struct {
	l   *Log
	req *appendReq // nil for AckNone: nothing to wait for
}

// Enqueue validates records and queues them for the writer without waiting
// for the acknowledgement. Appends enqueued by one goroutine are assigned
// offsets in the order of the calls, so a connection can pipeline an
// idempotent producer's requests: enqueue each in arrival order, then wait
// for them concurrently, and one fsync covers them all. The rules for
// records are Append's.
func (l *Log) Enqueue(records []byte, ack AckPolicy) (Pending, error) {
	if l.broken {
		return Pending{}, l.failed
	}
	maxBatch := l.config().MaxBatchBytes
	if err := validateRecords(records, maxBatch); err != nil {
		return Pending{}, err
	}
	if l.raft != nil {
		return l.raft.enqueue(records, ack)
	}
	req := getReq()
	req.records, req.ack = records, ack
	return l.enqueueReq(req)
}

// enqueueReq queues req for the writer, which owns it from then on (until
// done, or for AckNone for good); on error req is recycled.
func (l *Log) enqueueReq(req *appendReq) (Pending, error) {
	if l.broken {
		putReq(req)
		return Pending{}, l.failed
	}
	ack := req.ack // once queued, an AckNone req is the writer's to recycle
	l.closeMu.RLock()
	if l.closed {
		l.closeMu.RUnlock()
		putReq(req)
		return Pending{}, ErrClosed
	}
	q := l.acquireQueue()
	q <- req
	l.releaseQueue()
	l.closeMu.RUnlock()
	if ack == AckNone {
		return Pending{l: l}, nil // the writer recycles req
	}
	return Pending{l: l, req: req}, nil
}

// logger is the log's logger: Config.Logger with the directory, made
// when something is logged (rare) rather than held by every partition.
func (l *Log) logger() *slog.Logger { return l.baseLogger.With("dir", l.dir) }

// acquireQueue returns the running writer's queue, starting a writer if
// none runs, and counts the caller as a sender until releaseQueue: a
// writer never stops while a sender holds its queue. Call with closeMu
// read-held (Close waits for the senders, then for the writer).
func (l *Log) acquireQueue() chan<- *appendReq {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.queue == nil {
		l.queue = make(chan *appendReq, l.cfg.QueueDepth)
		prev, done := l.writerDone, make(chan struct{})
		l.writerDone = done
		go l.w.run(l.queue, prev, done)
	}
	l.senders++
	return l.queue
}

func (l *Log) releaseQueue() {
	l.qmu.Lock()
	l.senders--
	l.qmu.Unlock()
}

// writerIdle is how long a writer waits with an empty queue before it
// stops (a variable for tests).
var writerIdle = time.Second

// Wait blocks until the append is acknowledged as its AckPolicy says and
// returns its result. For AckNone it returns at once with BaseOffset -1.
func (p Pending) Wait() (AppendResult, error) {
	if p.req == nil {
		logStart := int64(-1)
		if p.l != nil {
			logStart = p.l.LogStartOffset()
		}
		return AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: logStart}, nil
	}
	<-p.req.done
	res, err := p.req.result, p.req.err
	putReq(p.req)
	return res, err
}

// validateRecords checks every batch (framing, CRC, the records,
// decompressed within a budget derived from max.message.bytes) and the size
// limit; nothing is written when it fails.
func validateRecords(records []byte, maxBatch int) error {
	if len(records) == 0 {
		return fmt.Errorf("%w: empty record set", batch.ErrCorrupt)
	}
	for off := 0; off < len(records); {
		rest := records[off:]
		if len(rest) < batch.HeaderSize {
			return fmt.Errorf("%w: %d trailing bytes at %d are not a whole batch", batch.ErrCorrupt, len(rest), off)
		}
		h, err := batch.ParseHeader(rest)
		if err != nil {
			return err
		}
		size := h.Size()
		if size > maxBatch {
			return fmt.Errorf("%w: batch of %d bytes, max.message.bytes is %d", ErrBatchTooLarge, size, maxBatch)
		}
		if size < batch.HeaderSize || size > len(rest) {
			return fmt.Errorf("%w: batch length %d at %d runs past the %d bytes sent", batch.ErrCorrupt, size, off, len(records))
		}
		if _, err := batch.ValidateWithin(rest[:size], batch.DecompressBudget(maxBatch)); err != nil {
			return err
		}
		off += size
	}
	return nil
}

// Read returns whole batches from offset as file ranges, at most maxBytes
// unless atLeastOne and the first batch is bigger. An offset inside a batch
// starts at that batch. offset == HighWatermark gives no chunks; an offset
// outside [LogStartOffset, HighWatermark] gives ErrOffsetOutOfRange, except
// that an offset already written but not yet durable gives no chunks (the
// high watermark covers only durable batches, design D14). The ranges come
// from one segment; read again from the next offset for more.
func (l *Log) Read(offset, maxBytes int64, atLeastOne bool) (ReadResult, error) {
	return l.read(offset, maxBytes, atLeastOne, false)
}

// ReadCommitted is Read for a read_committed consumer (KIP-98): it returns
// batches below the last stable offset only (an offset at or past it, up to
// the high watermark, gives no chunks), and in Aborted the aborted
// transactions that overlap what it returns (lastOffset >= offset and
// firstOffset below the offset after its last batch), which the consumer
// drops; Aborted is valid until Release.
func (l *Log) ReadCommitted(offset, maxBytes int64, atLeastOne bool) (ReadResult, error) {
	return l.read(offset, maxBytes, atLeastOne, true)
}

func (l *Log) read(offset, maxBytes int64, atLeastOne, committed bool) (ReadResult, error) {
	if l.broken {
		return ReadResult{HighWatermark: -1, LogStartOffset: -1, LastStableOffset: -1}, l.failed
	}
	l.mu.RLock()
	lso := l.lastStableLocked()
	res := ReadResult{HighWatermark: l.hwm, LogStartOffset: l.logStart, LastStableOffset: lso}
	if offset < l.logStart || offset > l.hwm && offset > l.writtenEnd.Load() {
		l.mu.RUnlock()
		return res, ErrOffsetOutOfRange
	}
	if offset >= l.hwm || committed && offset >= lso {
		l.mu.RUnlock()
		return res, nil
	}
	if len(l.segments) == 0 {
		l.mu.RUnlock()
		return res, ErrClosed
	}
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	if i < 0 {
		i = 0
	}
	// The segment may end below offset (empty active segment after a
	// DeleteRecords, or offset in a later segment): move on.
	for i < len(l.segments)-1 && l.segments[i].nextOffset <= offset {
		i++
	}
	s := l.segments[i]
	startHint := s.floorIndexEntryLocked(offset)
	end, upper := l.visibleLocked(s) // upper: the offset after what this read may return
	if committed && l.firstTxn.seg == s && l.firstTxn.offset == lso {
		// The earliest transaction in progress begins in this segment:
		// stop before its first batch. (One beginning in an earlier
		// segment puts the LSO at or below offset, answered above.)
		end, upper = l.firstTxn.pos, lso
	}
	// Pinned under mu: s is on the list, so its file has not been removed
	// and can be reopened if the cache closed it.
	if err := s.acquire(); err != nil {
		l.mu.RUnlock()
		return res, err
	}
	l.mu.RUnlock()

	// A consumer fetches from where its last answer ended, a batch's base
	// offset: an index entry naming that batch is the start, with nothing
	// to read.
	start := startHint.pos
	var err error
	if startHint.offset != offset || start >= end {
		if start, err = findBatch(s, startHint.pos, end, offset); err != nil {
			s.release()
			return res, err
		}
	}
	if start >= end {
		s.release()
		return res, nil
	}
	limit := end
	if maxBytes < end-start {
		l.mu.RLock()
		hint := s.floorIndexPosLocked(start + maxBytes)
		l.mu.RUnlock()
		if hint < start {
			hint = start
		}
		var next int64
		limit, next, err = lastBoundary(s, hint, start+maxBytes, end)
		if err != nil {
			s.release()
			return res, err
		}
		if next >= 0 {
			upper = next
		}
		if limit == start && atLeastOne {
			h, err := readHeader(s, start, end)
			if err != nil {
				s.release()
				return res, err
			}
			limit, upper = start+int64(h.Size()), h.LastOffset()+1
		}
	}
	if limit == start {
		s.release()
		return res, nil
	}
	res.Chunks = []Chunk{{File: s.file, Pos: start, Len: limit - start}}
	res.seg = s
	if committed {
		l.mu.RLock()
		if l.abortedEntries > 0 {
			bp := abortedBufs.Get().(*[]AbortedTxn)
			if *bp = l.abortedOverlappingLocked((*bp)[:0], offset, upper); len(*bp) > 0 {
				res.Aborted, res.abortedBuf = *bp, bp
			} else {
				abortedBufs.Put(bp)
			}
		}
		l.mu.RUnlock()
	}
	return res, nil
}

// visibleLocked is where what readers may see of segment s ends (mu held):
// its size and next offset, or on a raft log, for the segment holding
// the high watermark, the position and offset of the batch at it (the
// segment's bytes past it are entries not yet committed).
func (l *Log) visibleLocked(s *segment) (end, upper int64) {
	if s == l.hwmSeg {
		return l.hwmPos, l.hwm
	}
	return s.size, s.nextOffset
}

// Release unpins the segment file of r's chunks: it may be closed (by the
// file cache, or because the segment was deleted) once nobody holds it. Its
// Aborted slice is recycled: not to be used after Release.
func (r *ReadResult) Release() {
	if r.seg != nil {
		r.seg.release()
		r.seg = nil
	}
	if bp := r.abortedBuf; bp != nil {
		r.Aborted, r.abortedBuf = nil, nil
		if cap(*bp) <= maxPooledAborted {
			abortedBufs.Put(bp)
		}
	}
}

// HighWatermark is the offset after the last published batch: every batch
// below it is durable.
func (l *Log) HighWatermark() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hwm
}

// LogStartOffset is the first offset that may be read.
func (l *Log) LogStartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.logStart
}

// Wait returns a channel closed when the high watermark next advances or
// the log closes.
func (l *Log) Wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waited = true
	return l.waitCh
}

// Size is the bytes of published batches in all segments.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segments {
		n += s.size
	}
	return n
}

// Err is the sticky I/O error, if any.
func (l *Log) Err() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.failed
}

// Close waits for queued appends, syncs and closes the log.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		return nil
	}
	l.closed = true
	l.closeMu.Unlock()
	if l.broken {
		return nil
	}
	close(l.stop)
	l.qmu.Lock()
	done := l.writerDone
	l.qmu.Unlock()
	if done != nil {
		<-done
	}
	err := l.w.closeActive()
	replaced := l.cpReplaced.Load()
	if !replaced {
		l.cp.closeLog(l, l.checkpointEntry())
	}

	l.mu.Lock()
	close(l.waitCh)
	l.waitCh = make(chan struct{})
	l.signalWakersLocked()
	l.mu.Unlock()
	l.closeFiles()
	// The directory's last log to close writes the checkpoints (a
	// broker's shutdown: one write for all its partitions).
	if replaced {
		return err
	}
	if cerr := l.cp.release(err != nil); err == nil {
		err = cerr
	}
	return err
}

// closeFiles drops every segment: files close now, or as their readers
// release them.
func (l *Log) closeFiles() {
	l.mu.Lock()
	segs := l.segments
	l.segments = nil
	l.mu.Unlock()
	for _, s := range segs {
		s.drop()
	}
}

// writeLogStart persists the log start offset: the data directory's log
// start file is rewritten before DeleteRecordsBefore returns (its logStart
// is set by then: the file is made from the logs' offsets).
func (l *Log) writeLogStart() error { return l.cp.writeLogStarts() }

// checkpointEntry is what the checkpoints record of l now: its high
// watermark as the recovery point (every batch below it is durable), and
// its log start when past its first segment.
func (l *Log) checkpointEntry() checkpointEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e := checkpointEntry{recoveryPoint: l.hwm, logStart: -1}
	if len(l.segments) == 0 || l.logStart > l.segments[0].base {
		e.logStart = l.logStart
	}
	return e
}

// readLegacyCheckpoint reads a per-partition checkpoint file of an earlier
// version (the decimal offset; -1 when unreadable).
func (l *Log) readLegacyCheckpoint(file string) (int64, error) {
	data, err := vfs.ReadFile(l.cfg.FS, path.Join(l.dir, file))
	if err != nil {
		return -1, &IOError{Op: "read " + file, Err: err}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		// Checkpoints are replaced atomically, so this is damage; both
		// checkpoints only narrow what recovery assumes, so losing one
		// loses an optimisation (log start) or strictness (recovery
		// point), never data.
		l.logger().Warn("ignoring unreadable checkpoint", "file", file, "err", err)
		return -1, nil
	}
	return v, nil
}

// replaceFile replaces the partition directory's file with data
// atomically (checkpoint.go's replaceFile).
func (l *Log) replaceFile(file string, data []byte) error {
	return replaceFile(l.cfg.FS, l.dir, file, data)
}

// publishLocked advances the high watermark and wakes waiting readers.
func (l *Log) publishLocked(hwm int64) {
	l.hwm = hwm
	if l.waited {
		close(l.waitCh)
		l.waitCh = make(chan struct{})
		l.waited = false
	}
	l.signalWakersLocked()
}

// makeDirDurable creates dir and any missing parents, and syncs the parent
// of each directory it created so that the new entries survive a crash.
func makeDirDurable(fs vfs.FS, dir string) error {
	var created []string
	for d := path.Clean(dir); ; d = path.Dir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if d == path.Dir(d) {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return &IOError{Op: "mkdir", Err: err}
	}
	for _, d := range created {
		if err := fs.SyncDir(path.Dir(d)); err != nil {
			return &IOError{Op: "sync dir", Err: err}
		}
	}
	return nil
}
