// Package kvlog is the storage of Kafka's compacted internal topics
// (__consumer_offsets for internal/group, __transaction_state for
// internal/txn): partition logs of internal/plog appended with AckForced,
// replayed at start-up and compacted by snapshot. Every key of both topics'
// schemas starts with its version (int16) and its owner's name (a group,
// a transactional id) as a Kafka string, which places it (PartitionFor)
// and keeps an owner's records together in a batch (KeyOwner).
package kvlog

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// defaultSegmentBytes is Kafka's offsets.topic.segment.bytes and
// transaction.state.log.segment.bytes.
const defaultSegmentBytes = 100 << 20

// defaultMaxBatchBytes bounds one batch (the log's MaxBatchBytes). Append splits a Ready's records into batches under it; a
// single record above MaxRecordBytes cannot be written at all.
const defaultMaxBatchBytes = 64 << 20

// recordOverheadBytes bounds what a record adds to its key and value in a
// batch (length, attributes, deltas, key and value lengths, header count).
const recordOverheadBytes = 32

// readChunkBytes is how much replay reads at once.
const readChunkBytes = 16 << 20

// defaultCompactAfterBytes is how much a partition may grow past its live
// records before the store rewrites them (see Store.compact).
const defaultCompactAfterBytes = 64 << 20

// ReopenInterval is how long after a partition broke (or failed to reopen)
// ReopenBroken tries it again.
const ReopenInterval = 500 * time.Millisecond

// Record is one record of an internal topic's partition. A nil Value is
// a tombstone.
type Record struct {
	Partition int32
	Key       []byte
	Value     []byte
}

// StoreConfig configures an internal topic's logs.
type StoreConfig struct {
	Topic      string // the internal topic's name
	FS         vfs.FS
	DataDir    string // partitions live in DataDir/<Topic>-N
	Partitions int32  // default 1
	Clock      clock.Clock
	Logger     *slog.Logger
	WritePath  plog.WritePath

	// CompactAfterBytes: a partition is compacted once it has grown by
	// this much (and by 4x its live records) since its last compaction.
	// Default 64 MiB.
	CompactAfterBytes int64
	// SegmentBytes of the partition logs, default Kafka's 100 MiB (tests
	// make it small so compaction deletes segments).
	SegmentBytes int64
	// MaxBatchBytes bounds one batch, default 64 MiB (tests make it small).
	MaxBatchBytes int
}

// Store is an internal topic: one partition log per partition, appended
// with AckForced.
//
// Kafka compacts this topic. Sushka's logs keep offsets contiguous, so the
// store compacts by snapshot instead: it keeps the live records (the latest
// value of every key, tombstoned keys dropped) in memory, and when a
// partition has grown enough it appends them again as new batches and then
// advances the log start offset to the first of them, so the segments below
// are deleted. Replay from the log start then sees exactly the live state.
// A crash in the middle leaves the old log start, and a replay of the old
// records followed by (part of) the snapshot gives the same state, since
// each key's effect is its latest value.
//
// A partition whose append fails (a storage error) is closed and marked
// broken: Append and MaybeCompact skip it and report it, until Reopen opens
// its log again (recovery truncates whatever the failed write left) and
// replays it; the coordinators' drivers call ReopenBroken at the start of
// each round and wake for ReopenAt. Reopening never retries an fsync on the
// file whose fsync failed; it reads back what the log holds and that
// becomes the state.
type Store struct {
	cfg    StoreConfig
	logs   []*plog.Log // nil while broken
	live   []*liveSet  // per partition
	broken []error     // per partition: why it is broken, or nil
	// reopenAt is when ReopenBroken next tries the broken partitions
	// (zero: none is broken, or the last try found them all open).
	reopenAt time.Time
	// replicated: the logs are replicated partitions' (NewReplicatedStore),
	// owned by their replicas; a partition is held only while this node
	// leads it (Lead, Resign), never closed, broken or compacted here.
	replicated bool
}

// liveSet is the latest record of every key of one partition, with the
// order in which they were last written (replay applies them in that
// order).
type liveSet struct {
	byKey       map[string]liveRecord
	seq         uint64
	bytes       int64 // keys and values of byKey
	sizeAtCheck int64 // log size after the last compaction (or at open)
}

type liveRecord struct {
	seq uint64
	rec Record
}

func newLiveSet() *liveSet { return &liveSet{byKey: map[string]liveRecord{}} }

// add applies one record: a tombstone (nil value) removes the key.
func (ls *liveSet) add(r Record) {
	k := string(r.Key)
	if old, ok := ls.byKey[k]; ok {
		ls.bytes -= int64(len(old.rec.Key) + len(old.rec.Value))
		delete(ls.byKey, k)
	}
	if r.Value == nil {
		return
	}
	ls.seq++
	ls.byKey[k] = liveRecord{seq: ls.seq, rec: r}
	ls.bytes += int64(len(r.Key) + len(r.Value))
}

// records returns the live records in the order they were last written.
func (ls *liveSet) records() []Record {
	recs := make([]liveRecord, 0, len(ls.byKey))
	for _, lr := range ls.byKey {
		recs = append(recs, lr)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].seq < recs[j].seq })
	out := make([]Record, len(recs))
	for i, lr := range recs {
		out[i] = lr.rec
	}
	return out
}

// setDefaults fills what both kinds of store need: one partition, the
// real clock, the default logger, the default batch bound.
func (cfg *StoreConfig) setDefaults() {
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = defaultMaxBatchBytes
	}
}

// OpenStore opens (recovering) every partition and returns the records in
// them, partition by partition, oldest first.
func OpenStore(cfg StoreConfig) (*Store, []Record, error) {
	cfg.setDefaults()
	if cfg.CompactAfterBytes <= 0 {
		cfg.CompactAfterBytes = defaultCompactAfterBytes
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = defaultSegmentBytes
	}
	s := &Store{cfg: cfg, logs: make([]*plog.Log, cfg.Partitions), live: make([]*liveSet, cfg.Partitions), broken: make([]error, cfg.Partitions)}
	var records []Record
	for p := int32(0); p < cfg.Partitions; p++ {
		recs, err := s.open(p)
		if err != nil {
			s.Close()
			return nil, nil, err
		}
		records = append(records, recs...)
	}
	for p, err := range s.MaybeCompact() {
		s.Close()
		return nil, nil, fmt.Errorf("kvlog: compacting %s-%d: %w", cfg.Topic, p, err)
	}
	return s, records, nil
}

// open opens and replays partition p's log and rebuilds its live set.
func (s *Store) open(p int32) ([]Record, error) {
	dir := filepath.Join(s.cfg.DataDir, fmt.Sprintf("%s-%d", s.cfg.Topic, p))
	// plog.Open creates the directory and makes its entry durable
	// (creating it here first would skip that).
	lc := plog.DefaultConfig(s.cfg.FS, dir)
	lc.Clock = s.cfg.Clock
	lc.Logger = s.cfg.Logger.With("topic", s.cfg.Topic, "partition", p)
	lc.SegmentBytes = s.cfg.SegmentBytes
	lc.RetentionBytes, lc.RetentionTime = -1, -1 // compaction by snapshot bounds it
	lc.MaxBatchBytes = s.cfg.MaxBatchBytes
	lc.WritePath = s.cfg.WritePath
	l, err := plog.Open(lc)
	if err != nil {
		return nil, fmt.Errorf("kvlog: opening %s: %w", dir, err)
	}
	recs, err := replay(l, p)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("kvlog: replaying %s: %w", dir, err)
	}
	ls := newLiveSet()
	for _, r := range recs {
		ls.add(r)
	}
	ls.sizeAtCheck = l.Size()
	s.logs[p], s.live[p], s.broken[p] = l, ls, nil
	return recs, nil
}

// Broken reports whether partition p failed and awaits Reopen.
func (s *Store) Broken(p int32) bool { return s.broken[p] != nil }

// Reopen opens a broken partition's log again and returns its records, as
// OpenStore does; on error the partition stays broken.
func (s *Store) Reopen(p int32) ([]Record, error) {
	if s.broken[p] == nil {
		return nil, fmt.Errorf("kvlog: %s-%d is not broken", s.cfg.Topic, p)
	}
	if s.replicated {
		return nil, fmt.Errorf("kvlog: %s-%d is replicated: it comes back by Lead", s.cfg.Topic, p)
	}
	return s.open(p)
}

// breakPartition closes partition p after a failed write; ReopenBroken
// tries it ReopenInterval later. A replicated partition is resigned
// instead: its write failed because this node no longer leads it (or the
// replica failed), and it comes back only by a new Lead.
func (s *Store) breakPartition(p int32, err error) {
	if s.replicated {
		s.Resign(p)
		return
	}
	if l := s.logs[p]; l != nil {
		l.Close() // its error is the one already reported (sticky)
	}
	s.logs[p], s.broken[p] = nil, err
	s.reopenAt = s.cfg.Clock.Now().Add(ReopenInterval)
}

// ReopenAt is when ReopenBroken next has something to try; zero: nothing.
func (s *Store) ReopenAt() time.Time { return s.reopenAt }

// ReopenBroken, once ReopenAt has come, reopens every broken partition
// (Reopen) and hands its records to load (the coordinator's LoadPartition,
// which serves its owners again). A partition that does not open stays
// broken and is tried again ReopenInterval later; one that opens but load
// refuses is logged and left open (its records are what the log holds: a
// retry would read them again).
func (s *Store) ReopenBroken(load func(p int32, records []Record) error) {
	if s.reopenAt.IsZero() || s.cfg.Clock.Now().Before(s.reopenAt) {
		return
	}
	s.reopenAt = time.Time{}
	for p := range s.Partitions() {
		if !s.Broken(p) {
			continue
		}
		records, err := s.Reopen(p)
		if err != nil {
			s.reopenAt = s.cfg.Clock.Now().Add(ReopenInterval)
		} else {
			err = load(p, records)
		}
		if err != nil {
			s.cfg.Logger.Warn(s.cfg.Topic+" partition still unavailable", "partition", p, "err", err)
			continue
		}
		s.cfg.Logger.Info(s.cfg.Topic+" partition available again", "partition", p, "records", len(records))
	}
}

// MaxRecordBytes is the largest record (key and value) a batch can hold.
func (s *Store) MaxRecordBytes() int {
	return s.cfg.MaxBatchBytes - batch.HeaderSize - recordOverheadBytes
}

// LiveRecords returns the durable live records of one owner (KeyOwner),
// in the order they were written.
func (s *Store) LiveRecords(owner string) []Record {
	p := PartitionFor(owner, int32(len(s.live)))
	if s.live[p] == nil {
		return nil
	}
	var out []Record
	for _, r := range s.live[p].records() {
		if o, err := KeyOwner(r.Key); err == nil && o == owner {
			out = append(out, r)
		}
	}
	return out
}

// MaybeCompact compacts the partitions that have grown by
// CompactAfterBytes and by four times their live records since their last
// compaction, and returns the partitions that failed (now broken). The
// Service calls it after its appends; it must not run concurrently with
// Append.
func (s *Store) MaybeCompact() map[int32]error {
	if s.replicated {
		// A replicated log's start moves by raft snapshots, not by
		// DeleteRecordsBefore on one replica (docs/replication.md 4d).
		return nil
	}
	var failed map[int32]error
	for p, ls := range s.live {
		if s.logs[p] == nil {
			continue
		}
		grown := s.logs[p].Size() - ls.sizeAtCheck
		if grown < s.cfg.CompactAfterBytes || grown < 4*ls.bytes {
			continue
		}
		if err := s.compact(int32(p)); err != nil {
			if failed == nil {
				failed = map[int32]error{}
			}
			failed[int32(p)] = err
			s.breakPartition(int32(p), err)
		}
	}
	return failed
}

// compact appends the live records of partition p again and advances the
// log start offset to the first of them (see Store).
func (s *Store) compact(p int32) error {
	l, ls := s.logs[p], s.live[p]
	before := l.Size()
	recs := ls.records()
	start := int64(-1) // base offset of the first snapshot batch
	now := s.cfg.Clock.Now().UnixMilli()
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && (n == 0 || size+recordBytes(recs[n]) <= s.batchBudget()) {
			size += recordBytes(recs[n])
			n++
		}
		res, err := l.Append(EncodeBatch(recs[:n], now), plog.AckForced)
		if err != nil {
			return fmt.Errorf("kvlog: compacting %s-%d: %w", s.cfg.Topic, p, err)
		}
		if start < 0 {
			start = res.BaseOffset
		}
		recs = recs[n:]
	}
	if start < 0 {
		start = l.HighWatermark() // nothing is live: all of it is history
	}
	// Every live record is durable at or after start: what lies before
	// it is history.
	if _, err := l.DeleteRecordsBefore(start); err != nil {
		return fmt.Errorf("kvlog: compacting %s-%d: %w", s.cfg.Topic, p, err)
	}
	ls.sizeAtCheck = l.Size()
	s.cfg.Logger.Info("compacted "+s.cfg.Topic, "partition", p, "live_records", len(ls.byKey),
		"live_bytes", ls.bytes, "log_bytes_before", before, "log_bytes_after", ls.sizeAtCheck, "log_start", start)
	return nil
}

// NewReplicatedStore is an internal topic whose partitions are replicated
// partitions' logs (internal/replica), appended through raft with
// AckForced (answered once committed). It holds no partition until Lead:
// a coordinator serves a partition only while this node leads it
// (docs/replication.md 4d). cfg's FS, DataDir and the tuning of the logs
// are unused (the replicas own their logs).
func NewReplicatedStore(cfg StoreConfig) *Store {
	cfg.setDefaults()
	s := &Store{cfg: cfg, logs: make([]*plog.Log, cfg.Partitions), live: make([]*liveSet, cfg.Partitions),
		broken: make([]error, cfg.Partitions), replicated: true}
	for p := range s.broken {
		s.broken[p] = errNotLed
	}
	return s
}

// Lead makes partition p of a replicated store this node's: records are
// its log's replay (ReplayLog, done while leading in the current term),
// its appends go to l from now on.
func (s *Store) Lead(p int32, l *plog.Log, records []Record) {
	ls := newLiveSet()
	for _, r := range records {
		ls.add(r)
	}
	ls.sizeAtCheck = l.Size()
	s.logs[p], s.live[p], s.broken[p] = l, ls, nil
}

// Resign lets go of partition p of a replicated store (another node leads
// it): appends for it fail until the next Lead.
func (s *Store) Resign(p int32) {
	s.logs[p], s.live[p] = nil, nil
	s.broken[p] = errNotLed
}

// errNotLed is why a replicated partition not led here takes no append.
var errNotLed = fmt.Errorf("this node does not lead the partition: %w", plog.ErrNotLeader)

// ReplayLog reads every record of a partition log below its high
// watermark, oldest first: a coordinator's replay of a partition it starts
// to lead. It may run on any goroutine (the log's reads are).
func ReplayLog(l *plog.Log, partition int32) ([]Record, error) { return replay(l, partition) }

// replay reads every record of one partition log.
func replay(l *plog.Log, partition int32) ([]Record, error) {
	var records []Record
	offset := l.LogStartOffset()
	var buf []byte
	for offset < l.HighWatermark() {
		res, err := l.Read(offset, readChunkBytes, true)
		if err != nil {
			return nil, err
		}
		if len(res.Chunks) == 0 {
			res.Release()
			break
		}
		for _, ch := range res.Chunks {
			if int64(cap(buf)) < ch.Len {
				buf = make([]byte, ch.Len)
			}
			data := buf[:ch.Len]
			if _, err := ch.File.ReadAt(data, ch.Pos); err != nil {
				res.Release()
				return nil, err
			}
			next, err := DecodeBatches(data, func(key, value []byte) {
				r := Record{Partition: partition, Key: append([]byte(nil), key...)}
				if value != nil {
					r.Value = append([]byte{}, value...)
				}
				records = append(records, r)
			})
			if err != nil {
				res.Release()
				return nil, err
			}
			if next > offset {
				offset = next
			}
		}
		res.Release()
	}
	return records, nil
}

// recordBytes is what a record takes in a batch, at most.
func recordBytes(r Record) int { return len(r.Key) + len(r.Value) + recordOverheadBytes }

// batchBudget is the room for records in one batch.
func (s *Store) batchBudget() int { return s.cfg.MaxBatchBytes - batch.HeaderSize }

// Append writes records, each at most MaxRecordBytes, and returns once
// they are fsync'd, or the partitions that failed (now broken; records of
// other partitions are durable). Within a partition the records of one
// owner (a group, a transactional id) stay in order and together in one
// batch when they fit in one;
// records of different owners (different keys) may be reordered, and
// batches are cut so none exceeds MaxBatchBytes.
func (s *Store) Append(records []Record) map[int32]error {
	type groupRecords struct {
		partition int32
		records   []Record
	}
	var order []*groupRecords
	byGroup := map[string]*groupRecords{}
	var failed map[int32]error
	fail := func(p int32, err error) {
		if failed == nil {
			failed = map[int32]error{}
		}
		failed[p] = err
	}
	for _, r := range records {
		name, err := KeyOwner(r.Key)
		if err != nil || r.Partition < 0 || int(r.Partition) >= len(s.logs) {
			fail(r.Partition, fmt.Errorf("kvlog: a record for %s-%d (%d partitions) with key %x: %v", s.cfg.Topic, r.Partition, len(s.logs), r.Key, err))
			continue
		}
		g := byGroup[name]
		if g == nil {
			g = &groupRecords{partition: r.Partition}
			byGroup[name] = g
			order = append(order, g)
		}
		g.records = append(g.records, r)
	}
	now := s.cfg.Clock.Now().UnixMilli()
	for p := int32(0); p < int32(len(s.logs)); p++ {
		if failed[p] != nil {
			continue
		}
		// Pack the groups' records into batches, a group whole where it
		// fits.
		var batches [][]Record
		var cur []Record
		size := 0
		for _, g := range order {
			if g.partition != p {
				continue
			}
			groupSize := 0
			for _, r := range g.records {
				groupSize += recordBytes(r)
			}
			if len(cur) > 0 && size+groupSize > s.batchBudget() {
				batches, cur, size = append(batches, cur), nil, 0
			}
			for _, r := range g.records {
				if len(cur) > 0 && size+recordBytes(r) > s.batchBudget() {
					batches, cur, size = append(batches, cur), nil, 0
				}
				cur = append(cur, r)
				size += recordBytes(r)
			}
		}
		if len(cur) > 0 {
			batches = append(batches, cur)
		}
		if len(batches) == 0 {
			continue
		}
		if s.logs[p] == nil {
			fail(p, fmt.Errorf("kvlog: %s-%d is unavailable: %w", s.cfg.Topic, p, s.broken[p]))
			continue
		}
		for _, b := range batches {
			if _, err := s.logs[p].Append(EncodeBatch(b, now), plog.AckForced); err != nil {
				err = fmt.Errorf("kvlog: appending to %s-%d: %w", s.cfg.Topic, p, err)
				fail(p, err)
				s.breakPartition(p, err)
				break
			}
			for _, r := range b {
				s.live[p].add(r)
			}
		}
	}
	return failed
}

// Partitions is the number of the topic's partitions: fixed at OpenStore,
// so any goroutine may read it, before Close or after (a request reaching a
// closed coordinator still places its group or id, without dividing by
// zero, and is answered COORDINATOR_NOT_AVAILABLE).
func (s *Store) Partitions() int32 { return s.cfg.Partitions }

// Topic is the internal topic's name.
func (s *Store) Topic() string { return s.cfg.Topic }

// Log returns a partition's log (Metadata and ListOffsets report it).
func (s *Store) Log(p int32) *plog.Log {
	if p < 0 || int(p) >= len(s.logs) {
		return nil
	}
	return s.logs[p]
}

// Close closes every partition log (a replicated store's belong to their
// replicas: it only lets go of them).
func (s *Store) Close() error {
	if s.replicated {
		s.logs = nil
		return nil
	}
	var first error
	for _, l := range s.logs {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.logs = nil
	return first
}

// KeyOwner returns the owner of a record (its group, its transactional
// id): every key schema of __consumer_offsets (OffsetCommitKey,
// GroupMetadataKey) and __transaction_state (TransactionLogKey) starts
// with the key's version and that name.
func KeyOwner(key []byte) (string, error) {
	if len(key) < 4 {
		return "", fmt.Errorf("record key of %d bytes has no owner", len(key))
	}
	n := int(int16(binary.BigEndian.Uint16(key[2:])))
	if n < 0 || len(key) < 4+n {
		return "", fmt.Errorf("record key's owner name of %d bytes overruns the key", n)
	}
	return string(key[4 : 4+n]), nil
}

// PartitionFor is the partition of an owner (a group, a transactional
// id): Kafka's abs(name.hashCode()) % partitions, with Java's
// String.hashCode, for both internal topics.
func PartitionFor(owner string, partitions int32) int32 {
	var h int32
	for _, r := range owner {
		if r >= 0x10000 { // a UTF-16 surrogate pair
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	if h == -1<<31 { // Kafka's Utils.abs maps MIN_VALUE to 0
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % partitions
}

// EncodeBatch frames records as one uncompressed v2 record batch, as a
// non-idempotent producer would send it, with every record stamped
// timestamp (ms). The base offset is 0: the log assigns it.
func EncodeBatch(records []Record, timestamp int64) []byte {
	kvs := make([]batch.KeyValue, len(records))
	for i, r := range records {
		kvs[i] = batch.KeyValue{Key: r.Key, Value: r.Value} // nil Value: tombstone
	}
	return batch.BuildRecords(kvs, 0, timestamp)
}

// DecodeBatches calls fn with the key and value of every record in data,
// whole uncompressed v2 batches back to back (what EncodeBatch wrote), and
// returns the offset after the last batch. The slices alias data.
func DecodeBatches(data []byte, fn func(key, value []byte)) (next int64, err error) {
	next = -1
	err = batch.Split(data, func(b []byte) error {
		h, err := batch.ParseHeader(b)
		if err != nil {
			return err
		}
		next = h.LastOffset() + 1
		if h.Control() {
			return nil
		}
		if err := batch.ForEachKeyValue(b, func(_ int32, key, value []byte) error {
			fn(key, value)
			return nil
		}); err != nil {
			return fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		return nil
	})
	return next, err
}
