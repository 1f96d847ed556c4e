package plog

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// RaftStorage is a raft group's log and hard state over a partition log
// (docs/replication.md section 1, "One log, written once"; issue 14 step
// 2): etcd raft's Storage plus internal/raftnode's Save. One raft entry is
// one RecordBatch v2 in the partition's segments, stored as Produce stores
// it (docs/format.md); nothing else is written per record.
//
//   - Index → batch: each segment keeps the dense array index − the
//     segment's first index → (offset delta, file position) (raftindex.go):
//     in memory for every segment, in a sidecar BASE.raftindex for sealed
//     ones, rebuilt by the start-up scan when missing or different.
//   - Term(i) is entry i's batch's partitionLeaderEpoch: the leader's term
//     is stamped into every batch when it is saved; the terms are kept in
//     memory as runs (first index, term), rebuilt by the scan.
//   - Offsets are a function of the log: Save gives each entry's batch the
//     next offset of the log, so every replica assigns the same offsets.
//   - Entries that are not records are control batches (batch/raftcontrol.go:
//     raft's empty leader entry a LEADER_CHANGE, a configuration change a
//     KRAFT_VOTERS with etcd's message in a tagged field).
//   - Hard state (term, vote, commit) in raft-state, the latest snapshot's
//     metadata in raft-snapshot (raftstate.go). An empty partition presents
//     no snapshot until raftnode bootstraps it with the one at index 1,
//     term 1; its first entry is then index 2.
//
// The storage is the log's only writer: it writes in the caller's goroutine
// (Save is called by the group's one worker at a time) and the Log's writer
// goroutine never starts: the Log's Append, Enqueue and WriteTxnMarker go
// through raft proposals (replicated.go, SetProposer). The high watermark
// is the end of the entries applied (Apply: committed, then applied to the
// producer table and the transactions): raft never removes a committed
// entry, so visible means committed.
//
// Lock order: proposeMu → rmu → mu → Log.mu (and the FileCache's lock). raft
// calls the read methods from the worker running the group, as Save is;
// the lock makes them safe from any other goroutine too.
type RaftStorage struct {
	l *Log

	mu sync.Mutex
	hs raftHardState // (mu) the latest hard state Save was given
	// diskTerm and diskVote are raft-state's term and vote: the file is
	// rewritten when either changes (the commit index may lag on disk).
	diskTerm, diskVote uint64       // (mu)
	snap               raftSnapshot // (mu)
	// conf is the configuration after the last configuration change
	// applied (raft-conf); InitialState's when past the snapshot's. (mu)
	conf raftConf
	// confs are the configurations recorded since Open, in order;
	// confAtOpen the one in force at Open (or at the snapshot installed
	// since), confKnownFrom its index: the configuration at an entry below
	// it is not known (compaction stops there). (mu)
	confs         []raftConf
	confAtOpen    []byte
	confKnownFrom uint64
	// snapData is the decoded data of snap (zero for the bootstrap
	// snapshot's, which has none). (mu)
	snapData raftSnapshotData
	// scanProducers is the snapshot's producer table, for the recovery
	// scan to begin with; scanStarts the tables it noted before each
	// segment (Open only).
	scanProducers *producerTable
	scanStarts    []segmentStart
	segs          []raftSegment // (mu) one per segment of the Log, in order
	scanErr       error         // a sidecar the scan could not write (Open)
	terms         []termRun     // (mu) runs of equal terms, by first index
	last          uint64        // (mu) index of the last entry (snap.index when none)
	err           error         // (mu) sticky: a failed write or fsync
	closed        bool          // (mu)
	iov           [][]byte      // (mu) the batches of one Save, for one writev
	// hasState: raft-state or raft-snapshot was found at Open, or written
	// since. A log with batches and neither is not a raft log. (mu)
	hasState bool

	// The replicated partition (replicated.go). Lock order: proposeMu →
	// rmu → mu → Log.mu.
	proposeMu sync.Mutex // serialises Enqueue's check and proposal, so entries keep their order
	rmu       sync.Mutex
	proposer  Proposer // (rmu) nil: the log takes no appends
	// leaderTerm is this replica's term as the group's leader, 0 when it
	// does not lead. (rmu)
	leaderTerm uint64
	// applied is the last entry applied to the producer table (the Log's
	// writer's, which never runs on a raft log) and the transactions, and
	// appliedTerm its term (0 until an entry is applied in this life).
	// (rmu and mu: written holding both)
	applied, appliedTerm uint64
	// inflight are this leader's proposals not yet applied, in proposal
	// (and so index) order; byProducer the same, per idempotent producer.
	// (rmu)
	inflight   []*raftProposal
	byProducer map[int64][]*raftProposal
	decided    []decision // (rmu) Apply's, reused
	// producersCheckedAt is Apply's last look for expired producers. (rmu)
	producersCheckedAt time.Time
}

// ErrRaftEntry is an entry Save cannot store: a normal entry whose data is
// not exactly one valid RecordBatch v2, a term or an offset range beyond
// what a batch can carry, a gap in the indexes.
var ErrRaftEntry = errors.New("log: raft entry cannot be stored")

// ErrNotRaftLog is a partition directory whose segments hold batches but
// that has neither raft-state nor raft-snapshot: a log written by Produce,
// not by a RaftStorage (converting a partition to raft is a later step).
var ErrNotRaftLog = errors.New("log: the partition's batches were not written as a raft log")

// OpenRaftStorage opens (recovering) or creates the raft log in cfg.Dir.
// cfg.WritePath must be WriteSyscall (the storage writes with writev).
func OpenRaftStorage(cfg Config) (*RaftStorage, error) {
	cfg.setNilDefaults()
	if cfg.WritePath != WriteSyscall {
		return nil, fmt.Errorf("%w: a raft log writes with WriteSyscall", ErrInvalidConfig)
	}
	rs := &RaftStorage{}
	if err := rs.readState(&cfg); err != nil {
		return nil, err
	}
	rs.last = rs.snap.index
	var bufs scanBuffers
	defer bufs.release()
	if err := rs.removeCompacted(&cfg); err != nil {
		return nil, err
	}
	l, err := openWith(cfg, &bufs, rs.noteScanned, rs.scanApplies, rs.segmentStarts)
	if err != nil {
		return nil, err
	}
	rs.l = l
	l.raft = rs
	if err := rs.afterScan(); err != nil {
		l.Close()
		return nil, err
	}
	return rs, nil
}

// readState reads raft-state and raft-snapshot (absent: empty).
func (rs *RaftStorage) readState(cfg *Config) error {
	b, err := readRaftFile(cfg, raftStateFile)
	if err != nil {
		return err
	}
	if b != nil {
		if rs.hs, err = decodeRaftState(path.Join(cfg.Dir, raftStateFile), b); err != nil {
			return err
		}
		rs.diskTerm, rs.diskVote = rs.hs.term, rs.hs.vote
		rs.hasState = true
	}
	if b, err = readRaftFile(cfg, raftSnapshotFile); err != nil {
		return err
	}
	if b != nil {
		if rs.snap, err = decodeRaftSnapshot(path.Join(cfg.Dir, raftSnapshotFile), b); err != nil {
			return err
		}
		rs.hasState = true
		if err := rs.readSnapshotData(cfg); err != nil {
			return err
		}
	}
	if b, err = readRaftFile(cfg, raftConfFile); err != nil {
		return err
	}
	if b != nil {
		if rs.conf, err = decodeRaftConf(path.Join(cfg.Dir, raftConfFile), b); err != nil {
			return err
		}
	}
	return nil
}

// noteScanned is the recovery scan's hook: batch h at pos of s is the next
// entry of the log.
func (rs *RaftStorage) noteScanned(l *Log, s *segment, h *batch.Header, pos int64) {
	rs.l = l // the log being opened (sealIndex writes beside it)
	if n := len(rs.segs); n == 0 || rs.segs[n-1].seg != s {
		if n > 0 && rs.scanErr == nil && rs.hasState {
			// The scan moved on: the previous segment is sealed, its
			// array goes to its sidecar (not in a plain partition's
			// directory: Open refuses it, ErrNotRaftLog, writing nothing).
			rs.scanErr = rs.sealIndex(&rs.segs[n-1], true)
		}
		rs.segs = append(rs.segs, raftSegment{seg: s, first: rs.last + 1})
	}
	rs.last++
	rs.segs[len(rs.segs)-1].add(h.BaseOffset-s.base, pos)
	rs.noteTerm(rs.last, uint64(uint32(h.PartitionLeaderEpoch)))
}

// afterScan completes what the scan built: the segments without a batch,
// the sidecars, the high watermark.
func (rs *RaftStorage) afterScan() error {
	l := rs.l
	l.mu.RLock()
	segments := append([]*segment(nil), l.segments...)
	l.mu.RUnlock()
	// The segments the scan saw no batch in (an empty active segment).
	var all []raftSegment
	j := 0
	next := rs.snap.index + 1
	for _, s := range segments {
		if j < len(rs.segs) && rs.segs[j].seg == s {
			all = append(all, rs.segs[j])
			next = rs.segs[j].end()
			j++
			continue
		}
		all = append(all, raftSegment{seg: s, first: next})
	}
	rs.segs = all
	rs.afterScanSnapshot()
	rs.applied = max(min(rs.hs.commit, rs.last), rs.snap.index)
	rs.appliedTerm = 0 // no leader's entry applied in this life yet
	if rs.scanErr != nil {
		return rs.scanErr
	}
	if rs.last > rs.snap.index && !rs.hasState {
		return fmt.Errorf("%w: %s holds %d batches and no %s or %s", ErrNotRaftLog, l.dir, rs.last-rs.snap.index, raftStateFile, raftSnapshotFile)
	}
	for i := range rs.segs[:max(len(rs.segs)-1, 0)] {
		if !rs.segs[i].onDisk { // sealed: the last one scanned, or one without a batch
			if err := rs.sealIndex(&rs.segs[i], true); err != nil {
				return err
			}
		}
	}
	if rs.hs.commit > rs.last {
		// raft-state is written after the entries it commits are durable
		// (Save), so this is a log that lost durable entries.
		return &CorruptionError{File: path.Join(l.dir, raftStateFile), Reason: fmt.Sprintf(
			"commit index %d beyond the log's last index %d", rs.hs.commit, rs.last)}
	}
	if err := rs.removeStaleSidecars(); err != nil {
		return err
	}
	// The scan set the high watermark to the log's end: down to the
	// applied end.
	return rs.publishAppliedLocked(true)
}

// scanApplies tells the recovery scan whether the entry it is at (the one
// after the last it noted) is committed (on disk): the producers and
// transactions of a raft log are its applied entries' (replicated.go).
func (rs *RaftStorage) scanApplies() bool { return rs.last+1 <= rs.hs.commit }

// Log is the partition log the storage writes: for reading (Read, Wait,
// HighWatermark) and, on the group's leader, appending (replicated.go).
func (rs *RaftStorage) Log() *Log { return rs.l }

// Close syncs and closes the log, recording the latest commit index.
func (rs *RaftStorage) Close() error {
	rs.LeaderChanged(false, 0) // nothing in flight commits here any more
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return nil
	}
	rs.closed = true
	var err error
	if rs.err == nil && rs.hs.commit > 0 {
		err = rs.writeHardStateLocked()
	}
	if cerr := rs.l.Close(); err == nil {
		err = cerr
	}
	return err
}

// InitialState implements raft.Storage.
func (rs *RaftStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var cs pb.ConfState
	if err := proto.Unmarshal(rs.confStateLocked(), &cs); err != nil {
		return nil, nil, err
	}
	if rs.hs == (raftHardState{}) {
		return nil, &cs, nil
	}
	return &pb.HardState{Term: new(rs.hs.term), Vote: new(rs.hs.vote), Commit: new(rs.hs.commit)}, &cs, nil
}

// confStateLocked is the configuration raft restarts with: the one after
// the last configuration change applied, or the snapshot's when that is
// later (a snapshot installed over it).
func (rs *RaftStorage) confStateLocked() []byte {
	if rs.conf.index > rs.snap.index {
		return rs.conf.confState
	}
	return rs.snap.confState
}

// SaveConfState records cs, the configuration raft reached by applying the
// configuration change at entry index (raftnode's ConfStateSaver, called
// before the entry is applied): raft-conf, so that a restart with Applied
// past index does not begin with an older configuration. raft-state is
// written first with the commit index (at least index: the entry is
// committed), so a restart never re-applies the change either.
func (rs *RaftStorage) SaveConfState(index uint64, cs *pb.ConfState) error {
	b, err := proto.Marshal(cs)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := rs.writableLocked(); err != nil {
		return err
	}
	if index <= rs.conf.index || index <= rs.snap.index {
		return nil // a restart's replay of a change already recorded
	}
	if rs.hs.commit < index {
		return fmt.Errorf("%w: configuration change at %d above the commit index %d", ErrRaftEntry, index, rs.hs.commit)
	}
	err = rs.writeHardStateLocked()
	if err == nil {
		next := raftConf{index: index, confState: b}
		if err = rs.l.replaceFile(raftConfFile, encodeRaftConf(next)); err != nil {
			err = &IOError{Op: "write " + raftConfFile, Err: err}
		} else {
			rs.conf = next
			rs.confs = append(rs.confs, next)
		}
	}
	if err != nil {
		rs.err = err
		rs.l.fail(err)
	}
	return err
}

// FirstIndex implements raft.Storage: the index after the snapshot's.
func (rs *RaftStorage) FirstIndex() (uint64, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.snap.index + 1, nil
}

// LastIndex implements raft.Storage.
func (rs *RaftStorage) LastIndex() (uint64, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.last, nil
}

// Snapshot implements raft.Storage: the latest snapshot (the bootstrap one,
// until the log start moves: a later step).
func (rs *RaftStorage) Snapshot() (*pb.Snapshot, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var cs pb.ConfState
	if err := proto.Unmarshal(rs.snap.confState, &cs); err != nil {
		return nil, err
	}
	return &pb.Snapshot{
		Data:     append([]byte(nil), rs.snap.data...),
		Metadata: &pb.SnapshotMetadata{Index: new(rs.snap.index), Term: new(rs.snap.term), ConfState: &cs},
	}, nil
}

// Term implements raft.Storage: the term of entry i, from the snapshot for
// its index, from the batch's partitionLeaderEpoch (kept as runs) above it.
func (rs *RaftStorage) Term(i uint64) (uint64, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case i < rs.snap.index:
		return 0, raft.ErrCompacted
	case i == rs.snap.index:
		return rs.snap.term, nil
	case i > rs.last:
		return 0, raft.ErrUnavailable
	}
	return rs.termLocked(i), nil
}

// Entries implements raft.Storage: entries [lo, hi) read as whole batches
// from the segment files, at least one, then as many as fit in maxSize
// (etcd's limitSize: the entries' protobuf sizes).
func (rs *RaftStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if lo <= rs.snap.index {
		return nil, raft.ErrCompacted
	}
	if hi > rs.last+1 {
		return nil, fmt.Errorf("%w: entries [%d, %d) past the last index %d", raft.ErrUnavailable, lo, hi, rs.last)
	}
	if lo >= hi {
		return nil, nil
	}
	return rs.readEntriesLocked(lo, hi, maxSize)
}

// Save implements raftnode.Storage: the snapshot, then the entries
// (truncating a conflicting tail first), fsynced when mustSync, then the
// hard state (raft-state rewritten when term or vote changed; the high
// watermark moved to the new commit index). An error is sticky.
func (rs *RaftStorage) Save(hs *pb.HardState, entries []*pb.Entry, snap *pb.Snapshot, mustSync bool) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := rs.writableLocked(); err != nil {
		return err
	}
	err := rs.saveLocked(hs, entries, snap, mustSync)
	var ioErr *IOError
	if errors.As(err, &ioErr) {
		rs.err = err
		rs.l.fail(err)
	}
	return err
}

// writableLocked is the error a write meets: the sticky one, or ErrClosed.
func (rs *RaftStorage) writableLocked() error {
	if rs.err != nil {
		return rs.err
	}
	if rs.closed {
		return ErrClosed
	}
	return nil
}

func (rs *RaftStorage) saveLocked(hs *pb.HardState, entries []*pb.Entry, snap *pb.Snapshot, mustSync bool) error {
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := rs.applySnapshotLocked(snap); err != nil {
			return err
		}
	}
	// Entries at or below the snapshot are already in it (etcd's
	// MemoryStorage.Append ignores them too).
	for len(entries) > 0 && entries[0].GetIndex() <= rs.snap.index {
		entries = entries[1:]
	}
	if len(entries) > 0 {
		first := entries[0].GetIndex()
		if first > rs.last+1 {
			return fmt.Errorf("%w: entry %d after the last index %d", ErrRaftEntry, first, rs.last)
		}
		// Every entry is checked before the log changes at all.
		bs, err := entryBatches(entries)
		if err != nil {
			return err
		}
		if first <= rs.last {
			if err := rs.truncateLocked(first); err != nil {
				return err
			}
		}
		if err := rs.appendLocked(entries, bs); err != nil {
			return err
		}
	}
	if mustSync && len(entries) > 0 {
		if err := rs.syncLocked(); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		rs.hs = raftHardState{term: hs.GetTerm(), vote: hs.GetVote(), commit: hs.GetCommit()}
		if rs.hs.term != rs.diskTerm || rs.hs.vote != rs.diskVote {
			if err := rs.writeHardStateLocked(); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeHardStateLocked replaces raft-state with rs.hs.
func (rs *RaftStorage) writeHardStateLocked() error {
	if err := rs.l.replaceFile(raftStateFile, encodeRaftState(rs.hs)); err != nil {
		return &IOError{Op: "write " + raftStateFile, Err: err}
	}
	rs.diskTerm, rs.diskVote, rs.hasState = rs.hs.term, rs.hs.vote, true
	return nil
}

// publishAppliedLocked moves the high watermark to the end of the applied
// entries (committed, and applied to the producers and transactions,
// replicated.go), and notes where in the segments that end is, for Read.
func (rs *RaftStorage) publishAppliedLocked(atOpen bool) error {
	seg, end, pos, err := rs.entryStartLocked(rs.applied + 1)
	if err != nil {
		return err
	}
	l := rs.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hwmSeg, l.hwmPos = seg, pos
	if end > l.hwm || atOpen {
		l.publishLocked(end)
	}
	return nil
}

// entryStartLocked is where entry i begins: its segment, base offset and
// position; for the entry after the last, where the next would be
// written.
func (rs *RaftStorage) entryStartLocked(i uint64) (*segment, int64, int64, error) {
	i = max(i, rs.snap.index+1)
	if i > rs.last {
		w := &rs.l.w
		return w.active, w.next, w.writePos, nil
	}
	rseg := &rs.segs[rs.segmentOf(i)]
	at, err := rs.span(rseg, i-rseg.first, i-rseg.first+1)
	if err != nil {
		return nil, 0, 0, err
	}
	return rseg.seg, rseg.seg.base + int64(at[0].offsetDelta), int64(at[0].pos), nil
}

// entryBatches checks entries (consecutive indexes, terms a batch can
// carry) and returns the batch that stores each.
func entryBatches(entries []*pb.Entry) ([][]byte, error) {
	bs := make([][]byte, len(entries))
	first := entries[0].GetIndex()
	for i, e := range entries {
		if e.GetIndex() != first+uint64(i) {
			return nil, fmt.Errorf("%w: entry %d follows %d", ErrRaftEntry, e.GetIndex(), first+uint64(i)-1)
		}
		if e.GetTerm() > 1<<31-1 {
			return nil, fmt.Errorf("%w: term %d beyond a batch's partitionLeaderEpoch", ErrRaftEntry, e.GetTerm())
		}
		b, err := entryBatch(e)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) > 1<<31 {
			return nil, fmt.Errorf("%w: entry %d of %d bytes", ErrRaftEntry, e.GetIndex(), len(b))
		}
		bs[i] = b
	}
	return bs, nil
}

// appendLocked writes entries, stored as bs (entryBatches), at the end of
// the log (the first follows the last index), rolling segments as
// Produce's writer does, with one writev per segment.
func (rs *RaftStorage) appendLocked(entries []*pb.Entry, bs [][]byte) error {
	l := rs.l
	w := &l.w
	cfg := l.config()
	rs.iov = rs.iov[:0]
	var n int64
	type noted struct {
		base, last, maxTs, pos, size int64
	}
	var pending []noted
	flush := func() error {
		if len(rs.iov) == 0 {
			return nil
		}
		s := w.active
		if err := s.pinWriter(); err != nil {
			return err
		}
		w.prealloc.reserve(s.file, w.writePos, n, cfg.SegmentBytes)
		written, err := s.file.Writev(rs.iov)
		if err == nil && int64(written) != n {
			err = fmt.Errorf("short write: %d of %d bytes", written, n)
		}
		if err != nil {
			return writeError("write "+s.path, err)
		}
		l.mu.Lock()
		for _, p := range pending {
			s.noteBatchLocked(p.base, p.last, p.maxTs, p.pos, p.size, int64(cfg.IndexInterval))
		}
		l.mu.Unlock()
		w.writePos += n
		l.writtenEnd.Store(w.next)
		clear(rs.iov)
		rs.iov, n, pending = rs.iov[:0], 0, pending[:0]
		return nil
	}
	for i, e := range entries {
		b := bs[i]
		size := int64(len(b))
		if w.writePos+n+size > cfg.SegmentBytes && w.writePos+n > 0 {
			if err := flush(); err != nil {
				return err
			}
			if err := rs.rollLocked(); err != nil {
				return err
			}
		}
		h, _ := batch.ParseHeader(b) // checked by entryBatch
		base := w.next
		if base+int64(h.LastOffsetDelta)-w.active.base > 1<<32-1 || w.writePos+n+size > 1<<32-1 {
			// A segment holds at most 4 GiB and 2^32 offsets (its index
			// array's deltas): roll before this entry.
			if err := flush(); err != nil {
				return err
			}
			if err := rs.rollLocked(); err != nil {
				return err
			}
		}
		batch.SetBaseOffset(b, base)
		batch.SetPartitionLeaderEpoch(b, int32(e.GetTerm()))
		pos := w.writePos + n
		rs.segs[len(rs.segs)-1].add(base-w.active.base, pos)
		rs.last++
		rs.noteTerm(rs.last, e.GetTerm())
		pending = append(pending, noted{base: base, last: base + int64(h.LastOffsetDelta), maxTs: h.MaxTimestamp, pos: pos, size: size})
		w.next = base + int64(h.LastOffsetDelta) + 1
		rs.iov = append(rs.iov, b)
		n += size
	}
	return flush()
}

// noTimestamp stamps raft's control batches (Kafka's NO_TIMESTAMP, -1): the
// same bytes on every replica, and never raising a segment's maximum
// timestamp (retention and ListOffsets by time see the records' only).
const noTimestamp = -1

// entryBatch is the batch that stores e: its data (patched in place: a
// normal entry's data is one batch), or a control batch for the entries
// that are not records.
func entryBatch(e *pb.Entry) ([]byte, error) {
	switch e.GetType() {
	case pb.EntryType_EntryNormal:
		if len(e.Data) == 0 {
			return batch.BuildLeaderChange(-1, noTimestamp), nil
		}
		b := e.Data
		h, err := batch.ParseHeader(b)
		if err != nil || h.Size() != len(b) || h.Magic != batch.Magic || h.Length < batch.MinLength {
			return nil, fmt.Errorf("%w: entry %d: %d bytes that are not one record batch", ErrRaftEntry, e.GetIndex(), len(b))
		}
		if crc := batch.CRC(b); crc != h.CRC {
			return nil, fmt.Errorf("%w: entry %d: batch crc 0x%08x, computed 0x%08x", ErrRaftEntry, e.GetIndex(), h.CRC, crc)
		}
		if h.LastOffsetDelta < 0 {
			return nil, fmt.Errorf("%w: entry %d: lastOffsetDelta %d", ErrRaftEntry, e.GetIndex(), h.LastOffsetDelta)
		}
		return b, nil
	case pb.EntryType_EntryConfChange:
		return batch.BuildKRaftVoters(byte(pb.EntryType_EntryConfChange), e.Data, noTimestamp), nil
	case pb.EntryType_EntryConfChangeV2:
		return batch.BuildKRaftVoters(byte(pb.EntryType_EntryConfChangeV2), e.Data, noTimestamp), nil
	}
	return nil, fmt.Errorf("%w: entry %d of type %v", ErrRaftEntry, e.GetIndex(), e.GetType())
}

// batchEntry fills e, the entry stored as batch b (one whole batch) at
// index i: the inverse of entryBatch. b is aliased; e's index, term and
// type point into fields, which the caller allocates with e (one
// allocation per read, not three per entry).
func batchEntry(e *pb.Entry, fields *entryFields, b []byte, i uint64) error {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return err
	}
	fields.index, fields.term, fields.kind = i, uint64(uint32(h.PartitionLeaderEpoch)), pb.EntryType_EntryNormal
	e.Index, e.Term, e.Type = &fields.index, &fields.term, &fields.kind
	if !h.Control() || h.Transactional() {
		e.Data = b
		return nil
	}
	kind, entryType, data, err := batch.ParseRaftControl(b)
	if err != nil {
		return err
	}
	switch kind {
	case batch.ControlKRaftVoters:
		fields.kind = pb.EntryType(entryType)
		e.Data = data
	case batch.ControlLogStart:
		e.Data = b // proposed as this batch (DeleteRecords)
	}
	return nil
}

// entryFields holds what an Entry read from the log points to.
type entryFields struct {
	index, term uint64
	kind        pb.EntryType
}

// rollLocked seals the active segment (its sidecar written) and starts the
// next at the log's next offset.
func (rs *RaftStorage) rollLocked() error {
	w := &rs.l.w
	if err := w.active.pinWriter(); err != nil {
		return err
	}
	if err := w.sealActive(); err != nil {
		return err
	}
	rs.l.syncs.Add(1)
	old := w.active
	if err := rs.sealIndex(&rs.segs[len(rs.segs)-1], false); err != nil {
		return err
	}
	if err := w.createSegment(w.next); err != nil {
		return err
	}
	old.seal()
	w.active.unpinWriter()
	rs.segs = append(rs.segs, raftSegment{seg: w.active, first: rs.last + 1})
	rs.setDurableLocked()
	return nil
}

// syncLocked fsyncs the active segment (sealed ones were synced at their
// seal).
func (rs *RaftStorage) syncLocked() error {
	w := &rs.l.w
	s := w.active
	if err := s.pinWriter(); err != nil {
		return err
	}
	defer s.unpinWriter()
	if err := s.file.Sync(); err != nil {
		return &IOError{Op: "sync " + s.path, Err: err}
	}
	rs.l.syncs.Add(1)
	rs.setDurableLocked()
	return nil
}

// setDurableLocked records that everything written is durable, for the
// recovery point Close checkpoints (syncer.go).
func (rs *RaftStorage) setDurableLocked() {
	p := &rs.l.w.pub
	p.publishMu.Lock()
	p.published = rs.l.w.next
	p.publishMu.Unlock()
}

// truncateLocked removes entries from index first on (a follower's
// conflicting tail), as recovery truncates an unsynced tail: the
// recovery point first moved down to the cut, then the segment holding
// entry first cut there (sealed: it keeps the entries before it; removed
// when none), the later segments removed, and a new active segment begun
// at the cut's offset. Committed entries are never truncated.
func (rs *RaftStorage) truncateLocked(first uint64) error {
	l := rs.l
	w := &l.w
	k := rs.segmentOf(first)
	if k == len(rs.segs) || first <= rs.snap.index {
		return fmt.Errorf("%w: truncation at %d outside the log [%d, %d]", ErrRaftEntry, first, rs.snap.index+1, rs.last)
	}
	rseg := &rs.segs[k]
	at, err := rs.span(rseg, first-rseg.first, first-rseg.first+1)
	if err != nil {
		return err
	}
	cut := at[0]
	s := rseg.seg
	offset := s.base + int64(cut.offsetDelta)
	pos := int64(cut.pos)
	l.mu.RLock()
	hwm := l.hwm
	l.mu.RUnlock()
	if offset < hwm {
		return fmt.Errorf("%w: truncation at entry %d (offset %d) below the committed offset %d", ErrRaftEntry, first, offset, hwm)
	}
	// No recovery point to lower first: the data directory's checkpoint
	// (checkpoint.go) records a log's high watermark, here the end of the
	// committed entries, which the cut never passes (checked above).
	l.logger().Info("truncating a raft log's conflicting tail", "index", first, "offset", offset,
		"entries", rs.last-first+1, "file", s.path, "pos", pos)
	// The segments after k, from the last.
	for j := len(rs.segs) - 1; j > k; j-- {
		if err := rs.removeSegmentLocked(j); err != nil {
			return err
		}
	}
	if pos == 0 {
		if err := rs.removeSegmentLocked(k); err != nil {
			return err
		}
	} else {
		if err := rs.cutSegmentLocked(k, first, offset, pos); err != nil {
			return err
		}
	}
	rs.last = first - 1
	rs.truncateTerms(first)
	w.next = offset
	l.writtenEnd.Store(offset)
	if err := w.createSegment(offset); err != nil {
		return err
	}
	if k < len(rs.segs) {
		rs.segs[k].seg.seal()
	}
	w.active.unpinWriter()
	rs.segs = append(rs.segs, raftSegment{seg: w.active, first: first})
	rs.setDurableLocked()
	return nil
}

// removeSegmentLocked deletes the last segment, j, with its sidecar.
func (rs *RaftStorage) removeSegmentLocked(j int) error {
	l := rs.l
	s := rs.segs[j].seg
	l.mu.Lock()
	l.segments = l.segments[:len(l.segments)-1]
	l.mu.Unlock()
	s.drop()
	for _, name := range []string{s.path, path.Join(l.dir, raftIndexName(s.base))} {
		if err := l.cfg.FS.Remove(name); err != nil {
			if _, serr := l.cfg.FS.Stat(name); serr == nil {
				return &IOError{Op: "remove " + name, Err: err}
			}
		}
	}
	if err := l.cfg.FS.SyncDir(l.dir); err != nil {
		return &IOError{Op: "sync dir", Err: err}
	}
	rs.segs = rs.segs[:j]
	return nil
}

// cutSegmentLocked cuts segment k (the last) at pos, before entry first at
// offset: the file truncated and synced, its indexes trimmed, its sidecar
// rewritten. It is sealed from then on.
func (rs *RaftStorage) cutSegmentLocked(k int, first uint64, offset, pos int64) error {
	l := rs.l
	w := &l.w
	rseg := &rs.segs[k]
	s := rseg.seg
	if s == w.active {
		if err := s.pinWriter(); err != nil {
			return err
		}
		w.writePos = pos
		w.prealloc.reset() // the truncation frees the reserve too
		if err := s.file.Truncate(pos); err != nil {
			return writeError("truncate "+s.path, err)
		}
		if err := s.file.Sync(); err != nil {
			return &IOError{Op: "sync " + s.path, Err: err}
		}
	} else {
		f, err := l.cfg.FS.OpenReadWrite(s.path)
		if err != nil {
			return &IOError{Op: "open " + s.path, Err: err}
		}
		err = f.Truncate(pos)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return &IOError{Op: "truncate " + s.path, Err: err}
		}
	}
	l.mu.Lock()
	s.truncateLocked(offset, pos)
	l.mu.Unlock()
	kept, err := rs.span(rseg, 0, first-rseg.first)
	if err != nil {
		return err
	}
	rseg.entries, rseg.count, rseg.onDisk = slices.Clone(kept), uint64(len(kept)), false
	return rs.sealIndex(rseg, false)
}

// truncateLocked drops s's bytes from pos (the batch at offset) on from
// its indexes (Log.mu held). maxTs keeps the cut's upper bound (the time
// index's last entry may cover a dropped batch): retention by time may
// keep the segment a little longer.
func (s *segment) truncateLocked(offset, pos int64) {
	s.size, s.nextOffset = pos, offset
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].pos >= pos })
	s.index = s.index[:i]
	i = sort.Search(len(s.timeIndex), func(i int) bool { return s.timeIndex[i].pos >= pos })
	s.timeIndex = s.timeIndex[:i]
	if len(s.timeIndex) > 0 {
		s.maxTs = s.timeIndex[len(s.timeIndex)-1].maxTs
	} else {
		s.maxTs, s.maxTsOff = -1, -1
	}
	i = sort.Search(len(s.aborted), func(i int) bool { return s.aborted[i].LastOffset >= offset })
	s.aborted = s.aborted[:i]
}

// segmentOf is the position in segs of the segment holding entry i
// (len(segs) when none does).
func (rs *RaftStorage) segmentOf(i uint64) int {
	return sort.Search(len(rs.segs), func(k int) bool { return rs.segs[k].end() > i })
}

// maxIndexSpan bounds the entries of one sidecar read of readEntriesLocked.
const maxIndexSpan = 4096

// readEntriesLocked reads entries [lo, hi), all in the log, a segment's run
// of them with one read, stopping once maxSize is reached.
func (rs *RaftStorage) readEntriesLocked(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l := rs.l
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; {
		rseg := &rs.segs[rs.segmentOf(i)]
		s := rseg.seg
		end := min(hi, rseg.end(), i+maxIndexSpan)
		// The positions of entries [i, end] (end's: the next batch's, or
		// the segment's end).
		arr, err := rs.span(rseg, i-rseg.first, min(end+1, rseg.end())-rseg.first)
		if err != nil {
			return nil, err
		}
		l.mu.RLock()
		segEnd := s.size
		l.mu.RUnlock()
		posOf := func(j uint64) int64 {
			if j-i < uint64(len(arr)) {
				return int64(arr[j-i].pos)
			}
			return segEnd
		}
		// Read no further than maxSize allows, counting each batch at its
		// own size (a control batch's entry is smaller: the loop reads on).
		startPos := posOf(i)
		stop := i + 1
		for budget := size + uint64(posOf(stop)-startPos); stop < end; stop++ {
			next := budget + uint64(posOf(stop+1)-posOf(stop))
			if next > maxSize {
				break
			}
			budget = next
		}
		buf := make([]byte, posOf(stop)-startPos)
		l.mu.RLock()
		err = s.acquire()
		l.mu.RUnlock()
		if err != nil {
			return nil, err
		}
		err = readFull(s.file, s.path, buf, startPos)
		s.release()
		if err != nil {
			return nil, err
		}
		ents, fields := make([]pb.Entry, stop-i), make([]entryFields, stop-i)
		for j := i; j < stop; j++ {
			from, to := posOf(j)-startPos, posOf(j+1)-startPos
			e := &ents[j-i]
			if err := batchEntry(e, &fields[j-i], buf[from:to:to], j); err != nil {
				return nil, &CorruptionError{File: s.path, Pos: posOf(j), Reason: fmt.Sprintf("raft entry %d: %v", j, err)}
			}
			es := uint64(proto.Size(e))
			if len(out) > 0 && size+es > maxSize {
				return out, nil
			}
			out = append(out, e)
			size += es
		}
		if stop < end {
			return out, nil // the next batch would pass maxSize
		}
		i = stop
	}
	return out, nil
}
