package group

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// offsetsSegmentBytes is Kafka's offsets.topic.segment.bytes.
const offsetsSegmentBytes = 100 << 20

// maxOffsetsBatchBytes bounds one append (a DeleteGroups of a group with
// many offsets writes one batch of tombstones).
const maxOffsetsBatchBytes = 64 << 20

// readChunkBytes is how much replay reads at once.
const readChunkBytes = 16 << 20

// defaultCompactAfterBytes is how much a partition may grow past its live
// records before the store rewrites them (see Store.compact).
const defaultCompactAfterBytes = 64 << 20

// StoreConfig configures the __consumer_offsets logs.
type StoreConfig struct {
	FS         vfs.FS
	DataDir    string // partitions live in DataDir/__consumer_offsets-N
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
}

// Store is the __consumer_offsets topic: one partition log per partition,
// appended with AckForced.
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
type Store struct {
	cfg  StoreConfig
	logs []*plog.Log
	live []*liveSet // per partition
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

// OpenStore opens (recovering) every partition and returns the records in
// them, partition by partition, oldest first.
func OpenStore(cfg StoreConfig) (*Store, []Record, error) {
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CompactAfterBytes <= 0 {
		cfg.CompactAfterBytes = defaultCompactAfterBytes
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = offsetsSegmentBytes
	}
	s := &Store{cfg: cfg}
	var records []Record
	for p := int32(0); p < cfg.Partitions; p++ {
		dir := filepath.Join(cfg.DataDir, fmt.Sprintf("%s-%d", OffsetsTopic, p))
		// plog.Open creates the directory and makes its entry durable
		// (creating it here first would skip that).
		lc := plog.DefaultConfig(cfg.FS, dir)
		lc.Clock = cfg.Clock
		lc.Logger = cfg.Logger.With("topic", OffsetsTopic, "partition", p)
		lc.SegmentBytes = cfg.SegmentBytes
		lc.RetentionBytes, lc.RetentionTime = -1, -1 // compaction by snapshot bounds it
		lc.MaxBatchBytes = maxOffsetsBatchBytes
		lc.WritePath = cfg.WritePath
		l, err := plog.Open(lc)
		if err != nil {
			s.Close()
			return nil, nil, fmt.Errorf("group: opening %s: %w", dir, err)
		}
		s.logs = append(s.logs, l)
		recs, err := replay(l, p)
		if err != nil {
			s.Close()
			return nil, nil, fmt.Errorf("group: replaying %s: %w", dir, err)
		}
		records = append(records, recs...)
		ls := newLiveSet()
		for _, r := range recs {
			ls.add(r)
		}
		ls.sizeAtCheck = l.Size()
		s.live = append(s.live, ls)
	}
	if err := s.MaybeCompact(); err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, records, nil
}

// MaybeCompact compacts the partitions that have grown by
// CompactAfterBytes and by four times their live records since their last
// compaction. The Service calls it after its appends; it must not run
// concurrently with Append.
func (s *Store) MaybeCompact() error {
	for p, ls := range s.live {
		grown := s.logs[p].Size() - ls.sizeAtCheck
		if grown < s.cfg.CompactAfterBytes || grown < 4*ls.bytes {
			continue
		}
		if err := s.compact(int32(p)); err != nil {
			return err
		}
	}
	return nil
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
		for n < len(recs) && (n == 0 || size+len(recs[n].Key)+len(recs[n].Value)+64 < maxOffsetsBatchBytes/2) {
			size += len(recs[n].Key) + len(recs[n].Value) + 64
			n++
		}
		res, err := l.Append(EncodeBatch(recs[:n], now), plog.AckForced)
		if err != nil {
			return fmt.Errorf("group: compacting %s-%d: %w", OffsetsTopic, p, err)
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
		return fmt.Errorf("group: compacting %s-%d: %w", OffsetsTopic, p, err)
	}
	ls.sizeAtCheck = l.Size()
	s.cfg.Logger.Info("compacted "+OffsetsTopic, "partition", p, "live_records", len(ls.byKey),
		"live_bytes", ls.bytes, "log_bytes_before", before, "log_bytes_after", ls.sizeAtCheck, "log_start", start)
	return nil
}

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

// Append writes records, one batch per partition, and returns once they
// are fsync'd.
func (s *Store) Append(records []Record) error {
	byPartition := map[int32][]Record{}
	var order []int32
	for _, r := range records {
		if _, ok := byPartition[r.Partition]; !ok {
			order = append(order, r.Partition)
		}
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	now := s.cfg.Clock.Now().UnixMilli()
	for _, p := range order {
		if p < 0 || int(p) >= len(s.logs) {
			return fmt.Errorf("group: record for %s-%d, which has %d partitions", OffsetsTopic, p, len(s.logs))
		}
		if _, err := s.logs[p].Append(EncodeBatch(byPartition[p], now), plog.AckForced); err != nil {
			return fmt.Errorf("group: appending to %s-%d: %w", OffsetsTopic, p, err)
		}
		for _, r := range byPartition[p] {
			s.live[p].add(r)
		}
	}
	return nil
}

// Partitions is the number of __consumer_offsets partitions.
func (s *Store) Partitions() int32 { return int32(len(s.logs)) }

// Log returns a partition's log (Metadata and ListOffsets report it).
func (s *Store) Log(p int32) *plog.Log {
	if p < 0 || int(p) >= len(s.logs) {
		return nil
	}
	return s.logs[p]
}

// Close closes every partition log.
func (s *Store) Close() error {
	var first error
	for _, l := range s.logs {
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.logs = nil
	return first
}
