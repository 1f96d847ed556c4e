package plog

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// scanHook is told of each batch recovery keeps: its log, segment, header and
// position (raftlog.go).
type scanHook func(l *Log, s *segment, h *batch.Header, pos int64)

// maxSaneBatch bounds the batch length recovery believes: a larger length is
// garbage, not a batch (max.message.bytes is far smaller).
const maxSaneBatch = 256 << 20

// recover scans every segment, validating each batch, rebuilding the
// indexes and the producer table, truncating a torn tail of the last
// segment and refusing to open on corruption anywhere else.
func (l *Log) recover(cp checkpointEntry) error {
	var bufs scanBuffers
	defer bufs.release()
	_, err := l.recoverWith(&bufs, cp)
	return err
}

// recoverWith is recover with the read buffers of a recovery thread, reused
// across the partitions it opens (OpenAll). cp is what the data
// directory's checkpoints say of the partition; per-partition checkpoint
// files of an earlier version, when the directory holds them, say it
// instead (only an older Sushka writes them: they are newer), and are
// returned, to be removed once the directory's checkpoints hold their
// values.
func (l *Log) recoverWith(bufs *scanBuffers, cp checkpointEntry) (legacy []string, err error) {
	names, err := l.cfg.FS.List(l.dir)
	if err != nil {
		return nil, &IOError{Op: "list " + l.dir, Err: err}
	}
	return l.recoverNames(bufs, cp, names)
}

// recoverNames is recoverWith with the directory's listing (names).
func (l *Log) recoverNames(bufs *scanBuffers, cp checkpointEntry, names []string) (legacy []string, err error) {
	fs := l.cfg.FS
	var bases []int64
	txnIndexes := map[string]bool{} // index files listed, each kept only with its segment
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, ".tmp"):
			fs.Remove(path.Join(l.dir, name)) // an interrupted checkpoint or index rewrite
		case strings.HasSuffix(name, txnIndexSuffix):
			txnIndexes[name] = true
		case name == legacyRecoveryPointFile || name == legacyLogStartFile:
			v, err := l.readLegacyCheckpoint(name)
			if err != nil {
				return nil, err
			}
			if name == legacyRecoveryPointFile {
				cp.recoveryPoint = v
			} else {
				cp.logStart = v
			}
			legacy = append(legacy, path.Join(l.dir, name))
		default:
			if base, ok := parseSegmentName(name); ok {
				bases = append(bases, base)
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return legacy, l.recoverSegments(bufs, bases, txnIndexes, cp.logStart, cp.recoveryPoint)
}

// recoverSegments scans the segments of bases, given the checkpointed log
// start and recovery point (-1: unknown).
func (l *Log) recoverSegments(bufs *scanBuffers, bases []int64, txnIndexes map[string]bool, checkpoint, recoveryPoint int64) error {
	fs := l.cfg.FS
	l.w.producers = newProducerTable()
	now := l.cfg.Clock.Now()
	sc := scanner{l: l, recoveryPoint: recoveryPoint, nowMs: now.UnixMilli(), bufs: bufs}
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
		if l.scanSegmentStart != nil {
			l.scanSegmentStart(l, s)
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
		// A log that ends at its recovery point (a clean stop) holds no
		// unsynced byte: nothing to sync (a truncated tail was synced by
		// the truncation), so a clean start costs no fsync per partition.
		if last.nextOffset != recoveryPoint {
			if err := last.file.Sync(); err != nil {
				return &IOError{Op: "sync " + last.path, Err: err}
			}
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
	// recovery point, which the next write of the checkpoints records
	// (OpenAll's, or the next one due).
	return nil
}

// scanner reads segments sequentially in large blocks (readahead.go) and
// walks their batches forward: a batch that spans two blocks is
// checksummed piece by piece, so the scan holds two blocks whatever the
// size of its batches.
type scanner struct {
	l *Log
	// recoveryPoint is the checkpointed offset below which every batch was
	// durable (-1 when unknown): an invalid batch below it is corruption,
	// at or past it the unsynced tail of a crash.
	recoveryPoint int64
	// nowMs is the time of recovery. A producer's last append is known by
	// its batch's max timestamp only, never taken as later than now (a
	// producer's clock must not keep its state forever).
	nowMs int64
	bufs  *scanBuffers
	rd    blockReader
	cur   readBlock // the block being walked: the file's bytes from cur.pos
	// header holds a batch header that spans two blocks; control a
	// control batch that does (a broker-written marker: a few dozen bytes).
	header  [batch.HeaderSize]byte
	control []byte
}

// view returns the len(dst) bytes at pos: a slice of the current block when
// they lie in it, else dst, filled from this block and the next ones. pos
// is never before the current block (the walk only moves forward). The
// slice is valid until the scan moves to another block.
func (sc *scanner) view(pos int64, dst []byte) ([]byte, error) {
	if err := sc.reach(pos); err != nil {
		return nil, err
	}
	if off := pos - sc.cur.pos; off+int64(len(dst)) <= int64(len(sc.cur.data)) {
		return sc.cur.data[off : off+int64(len(dst))], nil
	}
	for n := 0; n < len(dst); {
		if err := sc.reach(pos + int64(n)); err != nil {
			return nil, err
		}
		n += copy(dst[n:], sc.cur.data[pos+int64(n)-sc.cur.pos:])
	}
	return dst, nil
}

// updateCRC continues crc over the file's bytes [pos, end).
func (sc *scanner) updateCRC(crc uint32, pos, end int64) (uint32, error) {
	for pos < end {
		if err := sc.reach(pos); err != nil {
			return 0, err
		}
		b := sc.cur.data[pos-sc.cur.pos:]
		b = b[:min(int64(len(b)), end-pos)]
		crc = batch.UpdateCRC(crc, b)
		pos += int64(len(b))
	}
	return crc, nil
}

// reach makes the block holding pos the current one.
func (sc *scanner) reach(pos int64) error {
	for pos >= sc.cur.pos+int64(len(sc.cur.data)) {
		b, err := sc.rd.nextBlock()
		if err == io.EOF {
			return &IOError{Op: fmt.Sprintf("read %s at %d", sc.rd.path, pos), Err: io.ErrUnexpectedEOF}
		}
		if err != nil {
			return err
		}
		sc.cur = b
	}
	return nil
}

// checkBatch validates the batch at pos (within size bytes of file) that
// should start at offset want. It returns its header, or a reason it is not
// a valid batch.
func (sc *scanner) checkBatch(s *segment, pos, fileSize, want int64) (batch.Header, []byte, string, error) {
	if fileSize-pos < batch.HeaderSize {
		return batch.Header{}, nil, fmt.Sprintf("%d bytes, too short for a batch header", fileSize-pos), nil
	}
	hb, err := sc.view(pos, sc.header[:])
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
	end := pos + int64(h.Size())
	var b []byte // the whole batch, for a control batch only
	crc := batch.UpdateCRC(0, hb[batch.OffsetAttributes:])
	if h.Control() {
		// Its marker is parsed from the whole batch, copied (a few dozen
		// bytes): its header before the scan moves to another block.
		if len(sc.control) < h.Size() {
			sc.control = make([]byte, h.Size())
		}
		b = sc.control[:h.Size()]
		copy(b, hb)
		rest, err := sc.view(pos+batch.HeaderSize, b[batch.HeaderSize:])
		if err != nil {
			return h, nil, "", err
		}
		copy(b[batch.HeaderSize:], rest) // a no-op when view filled b
		crc = batch.UpdateCRC(crc, b[batch.HeaderSize:])
	} else if crc, err = sc.updateCRC(crc, pos+batch.HeaderSize, end); err != nil {
		return h, nil, "", err
	}
	if crc != h.CRC {
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
	sc.rd.start(s.file, s.path, fileSize, sc.bufs)
	defer sc.rd.close()
	sc.cur = readBlock{}
	interval := int64(l.cfg.IndexInterval)
	pos, next := int64(0), s.base
	for pos < fileSize {
		h, b, reason, err := sc.checkBatch(s, pos, fileSize, next)
		if err != nil {
			return err
		}
		var ev txnEvent
		// A raft log's producers and transactions are those of its
		// committed entries, which every replica applied (replicated.go):
		// the entries past the commit index are scanned, not applied.
		applies := l.scanApplies == nil || l.scanApplies()
		if reason == "" && h.Control() && (l.scanHook == nil || h.Transactional()) {
			// A transaction marker (written by WriteTxnMarker): it ends its
			// producer's transaction, as it did when it was published.
			commit, coordinatorEpoch, perr := batch.ParseControl(b)
			if perr != nil {
				reason = perr.Error()
			} else {
				m := TxnMarker{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, Commit: commit, CoordinatorEpoch: coordinatorEpoch}
				if applies {
					ev = l.w.producers.applyMarker(&m, next, min(h.MaxTimestamp, sc.nowMs), h.MaxTimestamp)
				}
			}
		} else if reason == "" && applies && l.w.producers.record(&h, next, min(h.MaxTimestamp, sc.nowMs), false) {
			ev = txnEvent{kind: txnBegin, producerID: h.ProducerID}
		}
		if reason != "" {
			sc.rd.close() // nothing reads the file while it is judged and truncated
			return sc.invalid(s, last, pos, fileSize, next, reason)
		}
		s.noteBatchLocked(next, h.LastOffset(), h.MaxTimestamp, pos, int64(h.Size()), interval)
		l.noteTxnLocked(ev, s, next, h.LastOffset(), pos)
		if l.scanHook != nil {
			l.scanHook(l, s, &h, pos)
		}
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

// allZero reports whether s's bytes from pos to end are all zero. It reads
// on its own (the block reader is stopped by then), a block at a time.
func (sc *scanner) allZero(s *segment, pos, end int64) (bool, error) {
	for pos < end {
		b := sc.bufs.block(0, int(min(int64(recoverReadSize), end-pos)))
		if err := readFull(s.file, s.path, b, pos); err != nil {
			return false, err
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
		pos += int64(len(b))
	}
	return true, nil
}
