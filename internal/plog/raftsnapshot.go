package plog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// Snapshots of a raft log are its log start (docs/replication.md §1 and
// §3e): retention and DeleteRecords remove whole segments from the front,
// and raft sees that as a snapshot at the last entry removed (etcd's
// Compact + CreateSnapshot: FirstIndex moves, the snapshot keeps that
// entry's term). Its data is small, no record in it (a peer frame is at
// most 16 MiB): the log start offset, the raft index and base offset of
// the first entry kept, and the producer table as it was before that
// entry (each producer's open transaction included: its first offset).
// The configuration is the snapshot's ConfState. A follower whose log ends
// before the leader's first index is sent it (MsgSnap), empties its log,
// and begins again at the first kept entry's offset.
//
// The producer table before an entry is known only while it is applied:
// each segment keeps the table as it was before its first entry
// (raftSegment.startState), taken when that entry is applied (Apply) or
// scanned (the recovery scan, for committed entries), so a compaction at
// a segment boundary has its state at hand whatever was applied since.
//
// Who decides: time and size retention are each replica's own (Kafka's
// replicas apply retention.ms and retention.bytes independently; raft
// allows each replica to compact its own committed prefix); DeleteRecords
// is the leader's, proposed as a LOG_START control batch that every
// replica applies at the same point of the log (Kafka's leader decides and
// its followers take the log start from its fetch responses; Redpanda
// replicates the prefix truncation as a raft command). The log start a
// replica shows is therefore the same everywhere for DeleteRecords, and
// within a segment of the others' for retention.

// raftSnapshotDataVersion is the version of a snapshot's data.
const raftSnapshotDataVersion = 0

// raftSnapshotData is the data of a raft log's snapshot at index k
// (docs/format.md, "raft-snapshot"):
//
//	version u16 (0) | logStart i64 | firstIndex u64 (k + 1) |
//	firstOffset i64 | producersLen u32 | producers | crc32c u32
//
// big-endian; producers as encodeProducerTable writes them.
type raftSnapshotData struct {
	logStart    int64  // the log start offset (>= firstOffset)
	firstIndex  uint64 // raft index of the first entry kept
	firstOffset int64  // its base offset: the log's first segment begins there
	producers   []byte // the producer table before entry firstIndex
}

func encodeRaftSnapshotData(d raftSnapshotData) []byte {
	b := make([]byte, 0, 34+len(d.producers)+4)
	b = binary.BigEndian.AppendUint16(b, raftSnapshotDataVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(d.logStart))
	b = binary.BigEndian.AppendUint64(b, d.firstIndex)
	b = binary.BigEndian.AppendUint64(b, uint64(d.firstOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.producers)))
	b = append(b, d.producers...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

func decodeRaftSnapshotData(b []byte) (raftSnapshotData, producerTable, error) {
	bad := func(reason string) (raftSnapshotData, producerTable, error) {
		return raftSnapshotData{}, producerTable{}, fmt.Errorf("%w: snapshot data: %s", ErrRaftEntry, reason)
	}
	body, reason := checkedBody(b, 34+4, raftSnapshotDataVersion)
	if reason != "" {
		return bad(reason)
	}
	d := raftSnapshotData{
		logStart:    int64(binary.BigEndian.Uint64(body[2:])),
		firstIndex:  binary.BigEndian.Uint64(body[10:]),
		firstOffset: int64(binary.BigEndian.Uint64(body[18:])),
	}
	if n := int(binary.BigEndian.Uint32(body[26:])); 30+n != len(body) {
		return bad("producers length does not match")
	}
	d.producers = body[30:]
	if d.firstOffset < 0 || d.logStart < d.firstOffset || d.firstIndex == 0 {
		return bad(fmt.Sprintf("log start %d, first entry %d at offset %d", d.logStart, d.firstIndex, d.firstOffset))
	}
	t, err := decodeProducerTable(d.producers)
	if err != nil {
		return bad(err.Error())
	}
	return d, t, nil
}

// producerRecordSize is a producer's size in encodeProducerTable's
// encoding, without its batches (each 16 bytes).
const producerRecordSize = 8 + 2 + 4 + 8 + 8 + 8 + 1

// encodeProducerTable encodes t's producers, by id:
//
//	count u32 | count × (producerId i64 | epoch i16 | coordinatorEpoch i32 |
//	txnFirst i64 (-1: no open transaction) | seenMs i64 | lastTimestamp i64 |
//	batches u8 | batches × (firstSeq i32 | lastSeq i32 | baseOffset i64),
//	oldest first)
func encodeProducerTable(t *producerTable) []byte {
	ids := make([]int64, 0, len(t.states))
	size := 4
	for id, st := range t.states {
		ids = append(ids, id)
		size += producerRecordSize + 16*st.n
	}
	slices.Sort(ids)
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		st := t.states[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(st.epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(st.coordinatorEpoch))
		b = binary.BigEndian.AppendUint64(b, uint64(st.txnFirst))
		b = binary.BigEndian.AppendUint64(b, uint64(st.seenMs))
		b = binary.BigEndian.AppendUint64(b, uint64(st.lastTs))
		b = append(b, byte(st.n))
		for i := 0; i < st.n; i++ {
			pb := &st.batches[(st.head+i)%producerWindow]
			b = binary.BigEndian.AppendUint32(b, uint32(pb.firstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(pb.lastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(pb.base))
		}
	}
	return b
}

func decodeProducerTable(b []byte) (producerTable, error) {
	t := newProducerTable()
	if len(b) < 4 {
		return t, fmt.Errorf("producers: %d bytes", len(b))
	}
	count := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	for range count {
		if len(b) < producerRecordSize {
			return t, fmt.Errorf("producers: %d of %d", len(t.states), count)
		}
		id := int64(binary.BigEndian.Uint64(b))
		st := &producerState{
			epoch:            int16(binary.BigEndian.Uint16(b[8:])),
			coordinatorEpoch: int32(binary.BigEndian.Uint32(b[10:])),
			txnFirst:         int64(binary.BigEndian.Uint64(b[14:])),
			seenMs:           int64(binary.BigEndian.Uint64(b[22:])),
			lastTs:           int64(binary.BigEndian.Uint64(b[30:])),
		}
		n := int(b[38])
		b = b[producerRecordSize:]
		if n > producerWindow || len(b) < 16*n {
			return t, fmt.Errorf("producer %d: %d batches", id, n)
		}
		for i := range n {
			st.push(producerBatch{
				firstSeq: int32(binary.BigEndian.Uint32(b[16*i:])),
				lastSeq:  int32(binary.BigEndian.Uint32(b[16*i+4:])),
				base:     int64(binary.BigEndian.Uint64(b[16*i+8:])),
			})
		}
		b = b[16*n:]
		if _, dup := t.states[id]; dup {
			return t, fmt.Errorf("producer %d twice", id)
		}
		t.states[id] = st
	}
	if len(b) != 0 {
		return t, fmt.Errorf("producers: %d bytes after the last", len(b))
	}
	return t, nil
}

// installProducersLocked makes t the log's producer table and its
// producers' open transactions the log's (Log.mu held, or recovery). The
// start of a transaction that began before the log's first entry is in
// no segment (seg nil): the LSO stays there until its marker, as Kafka's
// does for a transaction whose first batch retention removed.
func (l *Log) installProducersLocked(t producerTable) {
	l.w.producers = t
	l.txns, l.firstTxn = nil, noTxn
	for id, st := range t.states {
		if st.txnFirst >= 0 {
			l.noteTxnLocked(txnEvent{kind: txnBegin, producerID: id}, nil, st.txnFirst, st.txnFirst, 0)
		}
	}
}

// readSnapshotData decodes the snapshot's data read at Open (none for the
// bootstrap snapshot).
func (rs *RaftStorage) readSnapshotData(cfg *Config) error {
	if len(rs.snap.data) == 0 {
		return nil
	}
	d, t, err := decodeRaftSnapshotData(rs.snap.data)
	if err != nil {
		return &CorruptionError{File: path.Join(cfg.Dir, raftSnapshotFile), Reason: err.Error()}
	}
	if d.firstIndex != rs.snap.index+1 {
		return &CorruptionError{File: path.Join(cfg.Dir, raftSnapshotFile), Reason: fmt.Sprintf(
			"data for first index %d in the snapshot at %d", d.firstIndex, rs.snap.index)}
	}
	rs.snapData, rs.scanProducers = d, &t
	return nil
}

// removeCompacted finishes at Open what a compaction or an installed
// snapshot left undone by a crash: the segments below the snapshot's
// first offset are removed (the snapshot file is replaced first, then
// they are), and a log left with no segment at all gets an empty one at
// that offset, where its entries begin.
func (rs *RaftStorage) removeCompacted(cfg *Config) error {
	if len(rs.snap.data) == 0 {
		return nil
	}
	fs := cfg.FS
	names, err := fs.List(cfg.Dir)
	if err != nil {
		return &IOError{Op: "list " + cfg.Dir, Err: err}
	}
	first, kept, removed := rs.snapData.firstOffset, false, false
	for _, name := range names {
		base, ok := parseSegmentName(name)
		if !ok {
			continue
		}
		if base >= first {
			kept = true
			continue
		}
		for _, n := range []string{name, raftIndexName(base), txnIndexName(base)} {
			full := path.Join(cfg.Dir, n)
			if _, err := fs.Stat(full); err == nil {
				if err := fs.Remove(full); err != nil {
					return &IOError{Op: "remove " + n, Err: err}
				}
			}
		}
		removed = true
	}
	if !kept {
		f, err := fs.Create(path.Join(cfg.Dir, segmentName(first)))
		if err != nil {
			return &IOError{Op: "create segment", Err: err}
		}
		if err := f.Close(); err != nil {
			return &IOError{Op: "create segment", Err: err}
		}
	}
	if removed || !kept {
		if err := fs.SyncDir(cfg.Dir); err != nil {
			return &IOError{Op: "sync dir", Err: err}
		}
	}
	return nil
}

// segmentStarts is the recovery scan's hook before each segment: the first
// takes the snapshot's producer table; each whose first entry is
// committed notes the table as it is before that entry.
func (rs *RaftStorage) segmentStarts(l *Log, s *segment) {
	if rs.scanProducers != nil {
		l.installProducersLocked(*rs.scanProducers)
		rs.scanProducers = nil
	}
	if rs.scanApplies() {
		rs.scanStarts = append(rs.scanStarts, segmentStart{seg: s, producers: encodeProducerTable(&l.w.producers)})
	}
}

// segmentStart is a segment's producer table before its first entry, as
// the scan found it.
type segmentStart struct {
	seg       *segment
	producers []byte
}

// afterScanSnapshot gives the segments the tables the scan noted, and the
// log the snapshot's log start.
func (rs *RaftStorage) afterScanSnapshot() {
	for _, st := range rs.scanStarts {
		for i := range rs.segs {
			if rs.segs[i].seg == st.seg {
				rs.segs[i].startState = st.producers
			}
		}
	}
	rs.scanStarts = nil
	rs.confAtOpen, rs.confKnownFrom = rs.confStateLocked(), max(rs.snap.index, rs.conf.index)
	if len(rs.snap.data) == 0 {
		return
	}
	l := rs.l
	l.mu.Lock()
	l.logStart = max(l.logStart, rs.snapData.logStart)
	l.mu.Unlock()
}

// noteSegmentStartLocked keeps the producer table before entry i, about
// to be applied, when i is the first entry of its segment.
func (rs *RaftStorage) noteSegmentStartLocked(i uint64) {
	if k := rs.segmentOf(i); k < len(rs.segs) && rs.segs[k].first == i && rs.segs[k].startState == nil {
		rs.segs[k].startState = encodeProducerTable(&rs.l.w.producers)
	}
}

// confAtLocked is the configuration as of entry k: the latest recorded at
// or below it. Unknown (false) below the last change recorded before this
// Open (the changes before it are in the log only).
func (rs *RaftStorage) confAtLocked(k uint64) ([]byte, bool) {
	if k < rs.confKnownFrom {
		return nil, false
	}
	cs := rs.confAtOpen
	for _, c := range rs.confs {
		if c.index <= k {
			cs = c.confState
		}
	}
	return cs, true
}

// compactableLocked lowers j, a number of segments to remove from the
// front, to what can be: segment j's first entry applied (its producer
// table known), and the configuration known at the entry before it. The
// active segment is never removed.
func (rs *RaftStorage) compactableLocked(j int) int {
	j = min(j, len(rs.segs)-1)
	for ; j > 0; j-- {
		r := &rs.segs[j]
		if _, ok := rs.confAtLocked(r.first - 1); ok && r.startState != nil && r.first-1 <= rs.applied && r.first-1 > rs.snap.index {
			break
		}
	}
	return max(j, 0)
}

// compactLocked makes the log start logStart: the snapshot at the entry
// before segment j's first (raft-snapshot replaced, the commit point),
// then segments 0 to j-1 removed with their sidecars. j 0 moves the log
// start only (the snapshot rewritten at its index with the new offset).
func (rs *RaftStorage) compactLocked(j int, logStart int64) error {
	l := rs.l
	r := &rs.segs[j]
	next := raftSnapshot{index: rs.snap.index, term: rs.snap.term, confState: rs.snap.confState}
	d := raftSnapshotData{firstIndex: rs.snap.index + 1, firstOffset: rs.segs[0].seg.base, producers: rs.snapData.producers}
	if len(rs.snap.data) == 0 {
		empty := newProducerTable()
		d.producers = encodeProducerTable(&empty) // the bootstrap snapshot's: no producer yet
	}
	if j > 0 {
		k := r.first - 1
		cs, _ := rs.confAtLocked(k) // compactableLocked checked it
		next = raftSnapshot{index: k, term: rs.termLocked(k), confState: cs}
		d = raftSnapshotData{firstIndex: r.first, firstOffset: r.seg.base, producers: r.startState}
	}
	l.mu.RLock()
	d.logStart = max(logStart, l.logStart, d.firstOffset)
	l.mu.RUnlock()
	if d.logStart == rs.snapData.logStart && j == 0 {
		return nil
	}
	next.data = encodeRaftSnapshotData(d)
	if err := l.replaceFile(raftSnapshotFile, encodeRaftSnapshot(next)); err != nil {
		return &IOError{Op: "write " + raftSnapshotFile, Err: err}
	}
	rs.snap, rs.snapData = next, d
	l.logger().Info("raft log start moved", "snapshot_index", next.index, "log_start", d.logStart, "segments_removed", j)
	l.mu.Lock()
	n := 0
	victims := l.removeSegmentsLocked(func(_, _ *segment) bool { n++; return n <= j })
	l.logStart = max(l.logStart, d.logStart)
	l.tellWatchersLocked()
	l.mu.Unlock()
	for _, s := range victims {
		if err := l.cfg.FS.Remove(path.Join(l.dir, raftIndexName(s.base))); err != nil {
			if _, serr := l.cfg.FS.Stat(path.Join(l.dir, raftIndexName(s.base))); serr == nil {
				return &IOError{Op: "remove " + raftIndexName(s.base), Err: err}
			}
		}
	}
	rs.segs = append(rs.segs[:0], rs.segs[j:]...)
	return l.deleteSegments(victims)
}

// enforceRetention is EnforceRetention on a raft log: this replica's own
// decision, on its committed and applied prefix, at segment boundaries.
func (rs *RaftStorage) enforceRetention() error {
	rs.rmu.Lock()
	defer rs.rmu.Unlock()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.err != nil || rs.closed {
		return rs.err
	}
	l := rs.l
	l.mu.RLock()
	drop := l.retentionDropLocked()
	j := 0
	for j < len(rs.segs)-1 && drop(rs.segs[j].seg) {
		j++
	}
	l.mu.RUnlock()
	if j = rs.compactableLocked(j); j == 0 {
		return nil
	}
	return rs.failOnIOLocked(rs.compactLocked(j, rs.segs[j].seg.base))
}

// failOnIOLocked makes an I/O error sticky, as Save does.
func (rs *RaftStorage) failOnIOLocked(err error) error {
	if _, ok := err.(*IOError); ok {
		rs.err = err
		rs.l.fail(err)
	}
	return err
}

// deleteRecords is DeleteRecordsBefore on a raft log: the leader proposes a
// LOG_START control batch and answers once it is applied (on a follower:
// ErrNotLeader, Kafka's NOT_LEADER_OR_FOLLOWER for DeleteRecords).
func (rs *RaftStorage) deleteRecords(offset int64) (int64, error) {
	l := rs.l
	hwm := l.HighWatermark()
	if offset == -1 {
		offset = hwm
	}
	if offset < 0 || offset > hwm {
		return -1, ErrOffsetOutOfRange
	}
	if start := l.LogStartOffset(); offset <= start {
		return start, nil
	}
	p, err := rs.propose(batch.BuildLogStart(offset, noTimestamp), AckForced, nil)
	if err != nil {
		return -1, err
	}
	if _, err := p.Wait(); err != nil {
		return -1, err
	}
	return l.LogStartOffset(), nil
}

// applyRaftControlLocked applies a raft control batch b (not a marker): a
// LOG_START moves the log start on this replica as on every other, then
// removes the segments wholly below it.
func (rs *RaftStorage) applyRaftControlLocked(b []byte) error {
	kind, _, data, err := batch.ParseRaftControl(b)
	if err != nil || kind != batch.ControlLogStart {
		return err
	}
	offset := int64(binary.BigEndian.Uint64(data))
	j := 0
	for j < len(rs.segs)-1 && rs.segs[j+1].seg.base <= offset {
		j++
	}
	return rs.failOnIOLocked(rs.compactLocked(rs.compactableLocked(j), offset))
}

// installSnapshotLocked installs a leader's snapshot (md, data d and the
// producer table t) over whatever this log holds (a follower behind the
// leader's first index, or one whose log conflicts at it): the entries
// at or past the snapshot's first offset removed first (none committed:
// raft installs a snapshot only past the commit index), the snapshot file
// replaced (the commit point: a crash after it leaves removeCompacted the
// rest), every other segment removed, and the log begun again at
// firstOffset, empty, with the high watermark there.
func (rs *RaftStorage) installSnapshotLocked(md *pb.SnapshotMetadata, cs []byte, data []byte, d raftSnapshotData, t producerTable) error {
	l := rs.l
	w := &l.w
	for len(rs.segs) > 0 && rs.segs[len(rs.segs)-1].seg.base >= d.firstOffset {
		if err := rs.removeSegmentLocked(len(rs.segs) - 1); err != nil {
			return err
		}
	}
	next := raftSnapshot{index: md.GetIndex(), term: md.GetTerm(), confState: cs, data: data}
	if err := l.replaceFile(raftSnapshotFile, encodeRaftSnapshot(next)); err != nil {
		return &IOError{Op: "write " + raftSnapshotFile, Err: err}
	}
	l.logger().Info("installing a leader's snapshot", "index", next.index, "term", next.term,
		"first_offset", d.firstOffset, "log_start", d.logStart, "entries_dropped", rs.last-rs.snap.index)
	for len(rs.segs) > 0 {
		if err := rs.removeSegmentLocked(len(rs.segs) - 1); err != nil {
			return err
		}
	}
	w.next = d.firstOffset
	l.writtenEnd.Store(d.firstOffset)
	if err := w.createSegment(d.firstOffset); err != nil {
		return err
	}
	w.active.unpinWriter()
	rs.segs = append(rs.segs, raftSegment{seg: w.active, first: next.index + 1, startState: d.producers})
	rs.snap, rs.snapData, rs.last, rs.hasState = next, d, next.index, true
	rs.terms = rs.terms[:0]
	rs.hs.commit = max(rs.hs.commit, next.index)
	rs.confAtOpen, rs.confKnownFrom, rs.confs = cs, next.index, nil
	rs.setDurableLocked()
	l.mu.Lock()
	rs.applied = next.index
	l.installProducersLocked(t)
	l.abortedEntries = 0 // the aborted index went with the segments
	l.logStart = max(l.logStart, d.logStart)
	l.hwmSeg, l.hwmPos = w.active, 0
	l.publishLocked(max(l.hwm, d.firstOffset))
	l.tellWatchersLocked()
	l.mu.Unlock()
	return nil
}

// applySnapshotLocked installs snap: the bootstrap snapshot (no data) on
// an empty log, or a leader's (installSnapshotLocked).
func (rs *RaftStorage) applySnapshotLocked(snap *pb.Snapshot) error {
	md := snap.GetMetadata()
	if md.GetIndex() <= rs.snap.index && rs.snap.index > 0 {
		return raft.ErrSnapOutOfDate
	}
	cs, err := proto.Marshal(md.GetConfState())
	if err != nil {
		return err
	}
	if len(snap.GetData()) > 0 {
		d, t, err := decodeRaftSnapshotData(snap.GetData())
		if err != nil {
			return err
		}
		if d.firstIndex != md.GetIndex()+1 {
			return fmt.Errorf("%w: snapshot at %d with data for first index %d", ErrRaftEntry, md.GetIndex(), d.firstIndex)
		}
		return rs.installSnapshotLocked(md, cs, slices.Clone(snap.GetData()), d, t)
	}
	if rs.last != rs.snap.index {
		return fmt.Errorf("%w: snapshot at %d without data over a log holding entries %d to %d", ErrRaftEntry, md.GetIndex(), rs.snap.index+1, rs.last)
	}
	next := raftSnapshot{index: md.GetIndex(), term: md.GetTerm(), confState: cs}
	if err := rs.l.replaceFile(raftSnapshotFile, encodeRaftSnapshot(next)); err != nil {
		return &IOError{Op: "write " + raftSnapshotFile, Err: err}
	}
	rs.snap, rs.last, rs.hasState = next, next.index, true
	for i := range rs.segs {
		rs.segs[i].first = next.index + 1 // every segment is empty
	}
	rs.terms = rs.terms[:0]
	rs.confAtOpen, rs.confKnownFrom = cs, next.index
	if rs.hs.commit < next.index {
		rs.hs.commit = next.index
	}
	return nil
}
