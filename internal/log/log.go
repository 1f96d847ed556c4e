package log

import "errors"

var errTODO = errors.New("log: not built yet")

// Log is one partition's log.
type Log struct{}

// Open opens (recovering) or creates the partition log in cfg.Dir.
func Open(cfg Config) (*Log, error) { return nil, errTODO }

// Append validates records (one or more whole v2 batches back to back),
// assigns offsets, checks idempotent-producer sequences, and returns when ack
// is satisfied. The batch bytes are patched in place (base offset).
func (l *Log) Append(records []byte, ack AckPolicy) (AppendResult, error) {
	return AppendResult{}, errTODO
}

// Read returns whole batches from offset as file ranges, at most maxBytes
// unless atLeastOne and the first batch is bigger. offset == HighWatermark
// gives no chunks; outside [LogStartOffset, HighWatermark] ErrOffsetOutOfRange.
func (l *Log) Read(offset, maxBytes int64, atLeastOne bool) (ReadResult, error) {
	return ReadResult{}, errTODO
}

// Release lets the segments of r be closed or deleted.
func (r *ReadResult) Release() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

func (l *Log) HighWatermark() int64  { return 0 }
func (l *Log) LogStartOffset() int64 { return 0 }

// Wait returns a channel closed when the high watermark next advances or
// the log closes.
func (l *Log) Wait() <-chan struct{} { return nil }

// OffsetForTimestamp returns the first offset whose record timestamp is
// >= ts, with that timestamp; found is false when no such record exists.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	return 0, 0, false, errTODO
}

// MaxTimestamp returns the offset and value of the largest timestamp (-1, -1
// when empty).
func (l *Log) MaxTimestamp() (offset, timestamp int64) { return -1, -1 }

// DeleteRecordsBefore advances the log start offset to offset (DeleteRecords).
func (l *Log) DeleteRecordsBefore(offset int64) (logStart int64, err error) { return 0, errTODO }

// EnforceRetention deletes sealed segments past retention.ms/retention.bytes
// and rolls a segment older than segment.ms.
func (l *Log) EnforceRetention() error { return errTODO }

// Size is the bytes on disk of all segments.
func (l *Log) Size() int64 { return 0 }

// SetConfig changes the dynamic settings (retention, segment size and age,
// max batch bytes, timestamp type). FS, Dir and WritePath are ignored.
func (l *Log) SetConfig(cfg Config) {}

// Err is the sticky I/O error, if any.
func (l *Log) Err() error { return nil }

// Close syncs and closes the log.
func (l *Log) Close() error { return nil }
