package plog

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// recoverBufSize is the read size of the recovery scan: large sequential
// reads run at disk speed.
const recoverBufSize = 16 << 20

// maxSaneBatch bounds the batch length recovery believes: a larger length is
// garbage, not a batch (max.message.bytes is far smaller).
const maxSaneBatch = 256 << 20

// recover scans every segment, validating each batch, rebuilding the
// indexes and the producer table, truncating a torn tail of the last
// segment and refusing to open on corruption anywhere else.
func (l *Log) recover() error {
	fs := l.cfg.FS
	names, err := fs.List(l.dir)
	if err != nil {
		return &IOError{Op: "list " + l.dir, Err: err}
	}
	var bases []int64
	txnIndexes := map[string]bool{} // index files listed, each kept only with its segment
	for _, name := range names {
		if strings.HasSuffix(name, ".tmp") {
			fs.Remove(path.Join(l.dir, name)) // an interrupted checkpoint or index rewrite
			continue
		}
		if strings.HasSuffix(name, txnIndexSuffix) {
			txnIndexes[name] = true
			continue
		}
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	checkpoint, err := l.readLogStart()
	if err != nil {
		return err
	}
	recoveryPoint, err := l.readCheckpoint(recoveryPointFile)
	if err != nil {
		return err
	}
	l.w.producers = newProducerTable()
	now := l.cfg.Clock.Now()
	sc := scanner{l: l, recoveryPoint: recoveryPoint, nowMs: now.UnixMilli()}
	var prevNext int64 = -1
	for i, base := range bases {
		name := path.Join(l.dir, segmentName(base))
		f, err := fs.OpenReadWrite(name)
		if err != nil {
			return &IOError{Op: "open segment", Err: err}
		}
		s := newSegment(l.dir, base, f, now, fs, l.cfg.FileCache)
		l.segments = append(l.segments, s) // closed by Open on error
		if prevNext >= 0 && base != prevNext {
			return &CorruptionError{File: name, Pos: 0, Reason: fmt.Sprintf(
				"segment starts at offset %d but the previous segment ends before offset %d", base, prevNext)}
		}
		if err := sc.scan(s, i == len(bases)-1); err != nil {
			return err
		}
		if err := l.syncTxnIndex(s, txnIndexes[txnIndexName(base)]); err != nil {
			return err
		}
		delete(txnIndexes, txnIndexName(base))
		if i < len(bases)-1 {
			s.seal() // the cache keeps it open, or closes it, from now on
		}
		prevNext = s.nextOffset
	}
	for name := range txnIndexes {
		// The index of a segment that is gone (retention removed the
		// segment, then the process stopped before its index).
		if err := fs.Remove(path.Join(l.dir, name)); err != nil {
			return &IOError{Op: "remove " + name, Err: err}
		}
	}
	// An expired producer is not restored (producer.id.expiration.ms).
	if n := l.w.producers.expire(sc.nowMs, l.cfg.ProducerIDExpiration); n > 0 {
		l.logger().Info("not restoring idle idempotent producers", "producers", n, "idle_for", l.cfg.ProducerIDExpiration)
	}
	if n := len(l.segments); n > 0 {
		// After a crash of the process (not of the machine) the page cache
		// may still hold batches that were written and never synced: they
		// become visible now, so they must be durable first (design D14).
		// Sealed segments were synced before the next one was created.
		last := l.segments[n-1]
		if last.nextOffset < recoveryPoint {
			return &CorruptionError{File: last.path, Pos: last.size, Reason: fmt.Sprintf(
				"the log ends at offset %d, before its recovery point %d (offsets checkpointed as durable)", last.nextOffset, recoveryPoint)}
		}
		if err := last.file.Sync(); err != nil {
			return &IOError{Op: "sync " + last.path, Err: err}
		}
		l.hwm = last.nextOffset
		l.logStart = l.segments[0].base
	}
	if checkpoint > l.logStart {
		l.logStart = min(checkpoint, l.hwm)
	}
	if len(l.segments) == 0 && checkpoint > 0 {
		l.hwm, l.logStart = checkpoint, checkpoint
	}
	// Everything below the high watermark is durable now: that is the new
	// recovery point (written only when it moved, so a clean restart costs
	// no checkpoint).
	l.w.pub.recoveryPoint = recoveryPoint
	if len(l.segments) > 0 && l.hwm != recoveryPoint {
		if err := l.writeCheckpoint(recoveryPointFile, l.hwm); err != nil {
			return err
		}
		l.w.pub.recoveryPoint = l.hwm
	}
	return nil
}

// scanner reads segments sequentially in large blocks.
type scanner struct {
	l *Log
	// recoveryPoint is the checkpointed offset below which every batch was
	// durable (-1 when unknown): an invalid batch below it is corruption,
	// at or past it the unsynced tail of a crash.
	recoveryPoint int64
	// nowMs is the time of recovery. A producer's last append is known by
	// its batch's max timestamp only, never taken as later than now (a
	// producer's clock must not keep its state forever).
	nowMs  int64
	buf    []byte
	bufPos int64 // file position of buf[0]
	bufLen int
}

// at returns the n bytes at pos of s's file, reading a new block when they
// are not buffered. n is at most maxSaneBatch.
func (sc *scanner) at(s *segment, pos int64, n int) ([]byte, error) {
	if pos >= sc.bufPos && pos+int64(n) <= sc.bufPos+int64(sc.bufLen) {
		off := pos - sc.bufPos
		return sc.buf[off : off+int64(n)], nil
	}
	if n > len(sc.buf) || len(sc.buf) < recoverBufSize {
		// Grow towards recoverBufSize as the segments need it, so opening
		// many small partitions does not allocate 4 MiB each.
		size, _ := s.file.Size()
		want := max(n, min(recoverBufSize, int(size)-int(pos)), len(sc.buf))
		if want > len(sc.buf) {
			sc.buf = make([]byte, want)
		}
	}
	m, err := s.file.ReadAt(sc.buf, pos)
	if m < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, &IOError{Op: fmt.Sprintf("read %s at %d", s.path, pos), Err: err}
	}
	sc.bufPos, sc.bufLen = pos, m
	return sc.buf[:n], nil
}

// checkBatch validates the batch at pos (within size bytes of file) that
// should start at offset want. It returns its header, or a reason it is not
// a valid batch.
func (sc *scanner) checkBatch(s *segment, pos, fileSize, want int64) (batch.Header, []byte, string, error) {
	if fileSize-pos < batch.HeaderSize {
		return batch.Header{}, nil, fmt.Sprintf("%d bytes, too short for a batch header", fileSize-pos), nil
	}
	hb, err := sc.at(s, pos, batch.HeaderSize)
	if err != nil {
		return batch.Header{}, nil, "", err
	}
	h, _ := batch.ParseHeader(hb)
	switch {
	case h.BaseOffset == 0 && h.Length == 0 && h.Magic == 0:
		return h, nil, "zeros (preallocated, never written)", nil
	case h.Magic != batch.Magic:
		return h, nil, fmt.Sprintf("magic %d, want %d", h.Magic, batch.Magic), nil
	case h.Length < batch.MinLength || h.Length > maxSaneBatch:
		return h, nil, fmt.Sprintf("batch length %d out of range", h.Length), nil
	case pos+int64(h.Size()) > fileSize:
		return h, nil, fmt.Sprintf("batch of %d bytes runs past the end of the file (%d)", h.Size(), fileSize), nil
	case want >= 0 && h.BaseOffset != want:
		return h, nil, fmt.Sprintf("base offset %d, want %d", h.BaseOffset, want), nil
	case h.LastOffsetDelta < 0:
		return h, nil, fmt.Sprintf("lastOffsetDelta %d", h.LastOffsetDelta), nil
	}
	b, err := sc.at(s, pos, h.Size())
	if err != nil {
		return h, nil, "", err
	}
	if crc := batch.CRC(b); crc != h.CRC {
		return h, nil, fmt.Sprintf("crc mismatch: stored 0x%08x, computed 0x%08x", h.CRC, crc), nil
	}
	return h, b, "", nil
}

// scan validates the segment s, filling its indexes and the producer table.
func (sc *scanner) scan(s *segment, last bool) error {
	l := sc.l
	fileSize, err := s.file.Size()
	if err != nil {
		return &IOError{Op: "stat " + s.path, Err: err}
	}
	sc.bufPos, sc.bufLen = 0, 0
	interval := int64(l.cfg.IndexInterval)
	pos, next := int64(0), s.base
	for pos < fileSize {
		h, b, reason, err := sc.checkBatch(s, pos, fileSize, next)
		if err != nil {
			return err
		}
		var ev txnEvent
		if reason == "" && h.Control() {
			// A transaction marker (written by WriteTxnMarker): it ends its
			// producer's transaction, as it did when it was published.
			commit, coordinatorEpoch, perr := batch.ParseControl(b)
			if perr != nil {
				reason = perr.Error()
			} else {
				m := TxnMarker{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, Commit: commit, CoordinatorEpoch: coordinatorEpoch}
				ev = txnEvent{kind: txnAbort, producerID: h.ProducerID,
					first: l.w.producers.recordMarker(&m, next, min(h.MaxTimestamp, sc.nowMs), h.MaxTimestamp, false)}
				if commit {
					ev.kind = txnCommit
				}
			}
		} else if reason == "" && l.w.producers.record(&h, next, min(h.MaxTimestamp, sc.nowMs), false) {
			ev = txnEvent{kind: txnBegin, producerID: h.ProducerID}
		}
		if reason != "" {
			return sc.invalid(s, last, pos, fileSize, next, reason)
		}
		s.noteBatchLocked(next, h.LastOffset(), h.MaxTimestamp, pos, int64(h.Size()), interval)
		l.noteTxnLocked(ev, s, next, h.LastOffset(), pos)
		next = h.LastOffset() + 1
		pos += int64(h.Size())
	}
	return nil
}

// invalid decides what an invalid batch at pos, which should start at
// offset want, means: the unsynced tail of a crash in the last segment
// (truncate it) or corruption (refuse to open).
//
// In the last segment, past the recovery point, the bytes may be a crash's
// unsynced writes, which reach the disk torn or out of order (an invalid
// page followed by valid ones): recovery truncates at the first invalid
// batch. Below the recovery point every byte was durable, so an invalid
// batch there is corruption. A sealed segment was synced before the next one
// was created, so only a zero tail (a preallocated segment sealed by a crash
// before its truncation was durable) may follow its data.
func (sc *scanner) invalid(s *segment, last bool, pos, fileSize, want int64, reason string) error {
	l := sc.l
	corrupt := false
	switch {
	case !last:
		zero, err := sc.allZero(s, pos, fileSize)
		if err != nil {
			return err
		}
		corrupt = !zero
	case want < sc.recoveryPoint:
		corrupt = true
		reason = fmt.Sprintf("%s, below the recovery point %d", reason, sc.recoveryPoint)
	}
	if corrupt {
		return &CorruptionError{File: s.path, Pos: pos, Reason: reason}
	}
	l.logger().Warn("truncating the unsynced tail of segment", "file", s.path, "pos", pos,
		"bytes", fileSize-pos, "offset", want, "recovery_point", sc.recoveryPoint, "reason", reason)
	if err := s.file.Truncate(pos); err != nil {
		return &IOError{Op: "truncate " + s.path, Err: err}
	}
	if err := s.file.Sync(); err != nil {
		return &IOError{Op: "sync " + s.path, Err: err}
	}
	// Reopen so the write position is the new end of the file.
	s.file.Close()
	f, err := l.cfg.FS.OpenReadWrite(s.path)
	if err != nil {
		return &IOError{Op: "reopen " + s.path, Err: err}
	}
	s.file = f
	return nil
}

// allZero reports whether s's bytes from pos to end are all zero.
func (sc *scanner) allZero(s *segment, pos, end int64) (bool, error) {
	for pos < end {
		n := min(int64(max(len(sc.buf), 64<<10)), end-pos)
		b, err := sc.at(s, pos, int(n))
		if err != nil {
			return false, err
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
		pos += n
	}
	return true, nil
}
