package group

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/sushka-io/sushka/internal/clock"
	plog "github.com/sushka-io/sushka/internal/log"
	"github.com/sushka-io/sushka/internal/vfs"
)

// offsetsSegmentBytes is Kafka's offsets.topic.segment.bytes.
const offsetsSegmentBytes = 100 << 20

// maxOffsetsBatchBytes bounds one append (a DeleteGroups of a group with
// many offsets writes one batch of tombstones).
const maxOffsetsBatchBytes = 64 << 20

// readChunkBytes is how much replay reads at once.
const readChunkBytes = 16 << 20

// StoreConfig configures the __consumer_offsets logs.
type StoreConfig struct {
	FS         vfs.FS
	DataDir    string // partitions live in DataDir/__consumer_offsets-N
	Partitions int32  // default 1
	Clock      clock.Clock
	Logger     *slog.Logger
	WritePath  plog.WritePath
}

// Store is the __consumer_offsets topic: one partition log per partition,
// appended with AckForced. Kafka compacts this topic; Sushka keeps every
// record for now (no retention: a time-based delete would lose live
// offsets), so the log grows with the number of commits.
type Store struct {
	cfg  StoreConfig
	logs []*plog.Log
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
	s := &Store{cfg: cfg}
	var records []Record
	for p := int32(0); p < cfg.Partitions; p++ {
		dir := filepath.Join(cfg.DataDir, fmt.Sprintf("%s-%d", OffsetsTopic, p))
		// plog.Open creates the directory and makes its entry durable
		// (creating it here first would skip that).
		l, err := plog.Open(plog.Config{
			FS:             cfg.FS,
			Clock:          cfg.Clock,
			Dir:            dir,
			Logger:         cfg.Logger.With("topic", OffsetsTopic, "partition", p),
			SegmentBytes:   offsetsSegmentBytes,
			RetentionBytes: -1,
			RetentionTime:  -1,
			MaxBatchBytes:  maxOffsetsBatchBytes,
			WritePath:      cfg.WritePath,
		})
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
	}
	return s, records, nil
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
