package plog

import (
	"fmt"
	"path"
	"sort"
	"sync"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// OffsetForTimestamp returns the first offset whose record timestamp is >=
// ts, with that timestamp; found is false when no record has one.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	if l.broken {
		return -1, -1, false, l.failed
	}
	l.mu.RLock()
	var s *segment
	var from, end int64
	for _, seg := range l.segments {
		if seg.base >= l.hwm && seg.nextOffset > seg.base {
			break // a raft log's entries not yet committed: not to be seen
		}
		if seg.maxTs >= ts {
			s = seg
			i := sort.Search(len(seg.timeIndex), func(i int) bool { return seg.timeIndex[i].maxTs >= ts })
			if i < len(seg.timeIndex) {
				from = seg.timeIndex[i].pos
			}
			end, _ = l.visibleLocked(seg)
			break
		}
	}
	logStart := l.logStart
	if s == nil {
		l.mu.RUnlock()
		return -1, -1, false, nil
	}
	if err := s.acquire(); err != nil {
		l.mu.RUnlock()
		return -1, -1, false, err
	}
	l.mu.RUnlock()
	defer s.release()

	w := newHeaderWalker(s, end)
	defer w.close()
	for pos := from; pos < end; {
		h, err := w.header(pos)
		if err != nil {
			return -1, -1, false, err
		}
		if h.MaxTimestamp >= ts && h.LastOffset() >= logStart {
			return recordAtOrAfter(s, pos, &h, ts, logStart)
		}
		pos += int64(h.Size())
	}
	return -1, -1, false, nil
}

// batchBufs holds the buffers recordAtOrAfter reads a batch into; a batch
// above maxPooledBatchBuf (max.message.bytes raised far) is not kept.
var batchBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBatchBuf = 2 << 20

// recordAtOrAfter finds, within the batch at pos, the first record at or
// after logStart whose timestamp is >= ts.
func recordAtOrAfter(s *segment, pos int64, h *batch.Header, ts, logStart int64) (int64, int64, bool, error) {
	if h.LogAppendTime() {
		// Every record carries the batch's append time.
		off := max(h.BaseOffset, logStart)
		return off, h.MaxTimestamp, true, nil
	}
	bp := batchBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBatchBuf {
			batchBufs.Put(bp)
		}
	}()
	if cap(*bp) < h.Size() {
		*bp = make([]byte, h.Size())
	}
	b := (*bp)[:h.Size()]
	if _, err := s.file.ReadAt(b, pos); err != nil {
		return -1, -1, false, &IOError{Op: fmt.Sprintf("read %s at %d", s.path, pos), Err: err}
	}
	// ForEachRecord decompresses within the broker-wide bounds (at most
	// batch.DecompressSlots at once, streams never held whole).
	offset, timestamp := int64(-1), int64(-1)
	err := batch.ForEachRecord(b, func(delta int32, t int64) bool {
		o := h.BaseOffset + int64(delta)
		if o >= logStart && t >= ts {
			offset, timestamp = o, t
			return false
		}
		return true
	})
	if err != nil {
		return -1, -1, false, err
	}
	if offset < 0 {
		// The header promised a record this late; trust the header.
		return h.LastOffset(), h.MaxTimestamp, true, nil
	}
	return offset, timestamp, true, nil
}

// MaxTimestamp returns the offset and value of the largest record timestamp
// (-1, -1 when the log is empty): ListOffsets with timestamp -3.
func (l *Log) MaxTimestamp() (offset, timestamp int64) {
	l.mu.RLock()
	var best *segment
	for _, s := range l.segments {
		if s.maxTs >= 0 && (best == nil || s.maxTs > best.maxTs) {
			best = s
		}
	}
	if best == nil {
		l.mu.RUnlock()
		return -1, -1
	}
	maxTs, batchBase := best.maxTs, best.maxTsOff
	logStart := l.logStart
	pos := best.floorIndexLocked(batchBase)
	end := best.size
	if err := best.acquire(); err != nil {
		l.mu.RUnlock()
		return batchBase, maxTs
	}
	l.mu.RUnlock()
	defer best.release()

	pos, err := findBatch(best, pos, end, batchBase)
	if err != nil || pos >= end {
		return batchBase, maxTs
	}
	h, err := readHeader(best, pos, end)
	if err != nil {
		return batchBase, maxTs
	}
	off, ts, found, err := recordAtOrAfter(best, pos, &h, maxTs, logStart)
	if err != nil || !found {
		return batchBase, maxTs
	}
	return off, ts
}

// DeleteRecordsBefore advances the log start offset to offset (Kafka's
// DeleteRecords), persisting it, and deletes the segments wholly below it.
// offset -1 means the high watermark.
func (l *Log) DeleteRecordsBefore(offset int64) (logStart int64, err error) {
	if l.broken {
		return -1, l.failed
	}
	if l.raft != nil {
		return l.raft.deleteRecords(offset) // through raft (raftsnapshot.go)
	}
	l.mu.Lock()
	if offset == -1 {
		offset = l.hwm
	}
	if offset < 0 || offset > l.hwm {
		l.mu.Unlock()
		return -1, ErrOffsetOutOfRange
	}
	if offset <= l.logStart {
		logStart = l.logStart
		l.mu.Unlock()
		return logStart, nil
	}
	// The log start moves first, then the checkpoint made from it is
	// written (a checkpoint written meanwhile by another goroutine reads
	// the new value too, never an older one after ours). If the write
	// fails the move stays in memory, persisted by the next write, and no
	// segment is deleted.
	l.logStart = offset
	l.tellWatchersLocked()
	l.mu.Unlock()
	if err := l.writeLogStart(); err != nil {
		return -1, err
	}
	l.mu.Lock()
	logStart = l.logStart
	victims := l.removeSegmentsLocked(func(s, next *segment) bool { return next.base <= logStart })
	l.mu.Unlock()
	return logStart, l.deleteSegments(victims)
}

// EnforceRetention deletes the oldest sealed segments past retention.ms
// (judged by the largest timestamp in the segment, as Kafka does) or while
// the log without them would still hold retention.bytes. With Kafka's
// meanings: a negative limit is unlimited, retention.ms 0 makes a segment
// deletable as soon as it is rolled, retention.bytes 0 keeps only the
// active segment. The active segment is never deleted; segment.ms rolls
// happen on the next append.
func (l *Log) EnforceRetention() error {
	if l.raft != nil {
		return l.raft.enforceRetention() // at segment boundaries, as a raft snapshot
	}
	l.mu.Lock()
	drop := l.retentionDropLocked()
	victims := l.removeSegmentsLocked(func(s, _ *segment) bool { return drop(s) })
	if n := len(l.segments); len(victims) > 0 && n > 0 && l.segments[0].base > l.logStart {
		l.logStart = l.segments[0].base
		l.tellWatchersLocked()
	}
	l.mu.Unlock()
	return l.deleteSegments(victims)
}

// retentionDropLocked returns retention's verdict on the oldest segments,
// to be asked of each in order from the first: whether it is past
// retention.ms, or the log without it (and those before it) would still
// hold retention.bytes.
func (l *Log) retentionDropLocked() func(s *segment) bool {
	cfg := l.config()
	nowMs := cfg.Clock.Now().UnixMilli()
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	return func(s *segment) bool {
		newest := s.maxTs
		if newest < 0 {
			// No record has a timestamp: judge by the segment's age, as
			// Kafka falls back to the file's modification time.
			newest = s.created.UnixMilli()
		}
		expired := cfg.RetentionTime >= 0 && nowMs-newest > cfg.RetentionTime.Milliseconds()
		tooBig := cfg.RetentionBytes >= 0 && total-s.size >= cfg.RetentionBytes
		if expired || tooBig {
			total -= s.size
			return true
		}
		return false
	}
}

// removeSegmentsLocked takes the oldest sealed segments off the list while
// drop says so (drop sees the segment and the one after it) and returns
// them.
func (l *Log) removeSegmentsLocked(drop func(s, next *segment) bool) []*segment {
	n := 0
	for n < len(l.segments)-1 && drop(l.segments[n], l.segments[n+1]) {
		n++
	}
	if n == 0 {
		return nil
	}
	victims := append([]*segment(nil), l.segments[:n]...)
	for _, s := range victims {
		l.abortedEntries -= len(s.aborted) // the index goes with its segment
	}
	l.segments = append(l.segments[:0], l.segments[n:]...)
	return victims
}

// deleteSegments removes the files of segments taken off the list; readers
// holding one keep reading until they release it.
func (l *Log) deleteSegments(victims []*segment) error {
	var first error
	for _, s := range victims {
		if err := l.cfg.FS.Remove(s.path); err != nil && first == nil {
			first = &IOError{Op: "remove segment", Err: err}
		}
		if len(s.aborted) > 0 { // its aborted-transactions index (txn.go)
			if err := l.cfg.FS.Remove(path.Join(l.dir, txnIndexName(s.base))); err != nil && first == nil {
				first = &IOError{Op: "remove transaction index", Err: err}
			}
		}
		l.logger().Info("deleted segment", "file", s.path, "bytes", s.size)
		s.drop()
	}
	return first
}
