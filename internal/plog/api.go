package plog

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// AckPolicy says when Append returns (design D4).
type AckPolicy uint8

const (
	// AckNone returns once the batch is queued for the writer (acks=0).
	AckNone AckPolicy = iota
	// AckWritten returns once the batch is in the page cache (acks=1); it
	// becomes visible to readers once the writer's next fsync, which every
	// group that wrote bytes gets, has made it durable.
	AckWritten
	// AckForced returns once the batch is fdatasync'd (acks=-1/all).
	AckForced
)

// WritePath selects how the writer puts bytes into the active segment.
type WritePath uint8

const (
	// WriteSyscall appends with one write(2)/writev(2) per group.
	WriteSyscall WritePath = iota
	// WriteMmap copies into a preallocated, mapped segment.
	WriteMmap
)

// TimestampType is the topic's message.timestamp.type.
type TimestampType uint8

const (
	CreateTime TimestampType = iota
	LogAppendTime
)

// Config configures one partition log. Start from DefaultConfig (Kafka's
// defaults) and change what you need: every numeric field means exactly
// what it says, zero included, with Kafka's meaning for 0 and -1, and Open
// and SetConfig refuse values out of range (Validate) instead of quietly
// replacing them. Only the nil Clock and Logger are filled in.
type Config struct {
	FS     vfs.FS       // required
	Clock  clock.Clock  // nil: clock.Real{}
	Dir    string       // required: the partition's directory
	Logger *slog.Logger // nil: slog.Default()

	// SegmentBytes is segment.bytes: a segment is rolled before a batch
	// would take it past this size (a batch larger than it gets a segment
	// of its own). At least 1 here; the broker's topic configs enforce
	// Kafka's 1 MiB minimum (smaller segments are for tests, as Kafka's
	// internal.segment.bytes).
	SegmentBytes int64
	// SegmentMaxAge is segment.ms: the active segment is rolled on the
	// first append after it is this old. At least 1 ms.
	SegmentMaxAge time.Duration
	// RetentionBytes is retention.bytes: EnforceRetention deletes the
	// oldest sealed segments while the rest would still hold this many
	// bytes. Negative: unlimited; 0: keep only the active segment.
	RetentionBytes int64
	// RetentionTime is retention.ms: EnforceRetention deletes sealed
	// segments whose newest record is older than this. Negative:
	// unlimited; 0: a segment may be deleted as soon as it is rolled.
	RetentionTime time.Duration
	// MaxBatchBytes is max.message.bytes: larger batches are refused
	// (ErrBatchTooLarge). At least 0.
	MaxBatchBytes int
	// IndexInterval is index.interval.bytes: bytes between sparse index
	// entries. 0: an entry for every batch.
	IndexInterval int
	TimestampType TimestampType // message.timestamp.type
	WritePath     WritePath
	// QueueDepth bounds the appends queued for the writer. At least 1.
	QueueDepth int
	// SyncInterval is the least time between the starts of two fsyncs
	// (publications) of the WriteSyscall publisher when the later one has
	// no AckForced append to acknowledge: it bounds the fsync rate that
	// AckNone and AckWritten appends cause, and delays their visibility by
	// at most this much. An AckForced append is synced at once, as
	// without it (adaptive group commit). 0: no pacing. At least 0; fixed
	// for the log's life (SetConfig keeps it).
	SyncInterval time.Duration
	// EarlyWritebackBytes starts the disk's writeback of what the writer
	// wrote before the fsync that needs it (RocksDB's bytes_per_sync; Kafka
	// has none): after a group with an AckForced append, once at least this
	// many bytes of whole pages written since the last start are waiting,
	// the writer starts their writeback (vfs.File.StartWriteback,
	// sync_file_range SYNC_FILE_RANGE_WRITE), so the publisher's next
	// fdatasync has less left to write. A hint only: the fdatasync still
	// makes every acknowledged batch durable. 0: off. At least 0.
	EarlyWritebackBytes int64
	// FileCache bounds the open files of sealed segments; a broker shares
	// one among its logs. nil: DefaultFileCache.
	FileCache *FileCache
	// ProducerIDExpiration is producer.id.expiration.ms (a broker config):
	// an idempotent producer that has not appended for this long is
	// forgotten. At least 1 ms.
	ProducerIDExpiration time.Duration
}

// AppendResult is what an acknowledged append tells the producer.
type AppendResult struct {
	BaseOffset     int64 // -1 for AckNone
	LogAppendTime  int64 // ms since epoch for LogAppendTime topics, else -1
	LogStartOffset int64
	Timing         AppendTiming
}

// AppendTiming tells where an acknowledged append's time went (the broker
// exports each step as a histogram, issue 12): the instants, on
// Config.Clock, at which it passed each step. The log reads the clock only
// where it did anyway, except for the AckForced steps (one read per group
// and two per fsync, shared by the group's appends): an AckNone or
// AckWritten append costs no clock read of its own. Steps turns them into
// durations.
type AppendTiming struct {
	// Grouped is when the writer took the append into a group and began
	// writing it (zero: the append never reached the writer).
	Grouped time.Time
	// Written (AckForced) is when its group was written: offsets,
	// idempotence checks and the write system call (writev, or the copy
	// into the mapping).
	Written time.Time
	// SyncStarted and Synced (AckForced) bracket the fdatasync that made
	// it durable.
	SyncStarted, Synced time.Time
}

// Steps are the durations of t's steps for an append enqueued at enqueued
// (on the same clock): the queue (the groups written before it), the
// write, the wait for the fsync before its own (group commit without a
// timer) and its fdatasync. A step not taken is 0, and so are write,
// syncWait and sync for an append that was not AckForced.
func (t AppendTiming) Steps(enqueued time.Time) (queue, write, syncWait, sync time.Duration) {
	if t.Grouped.IsZero() {
		return 0, 0, 0, 0
	}
	queue = t.Grouped.Sub(enqueued)
	if t.Written.IsZero() {
		return queue, 0, 0, 0
	}
	write = t.Written.Sub(t.Grouped)
	if t.SyncStarted.IsZero() {
		return queue, write, 0, 0
	}
	return queue, write, t.SyncStarted.Sub(t.Written), t.Synced.Sub(t.SyncStarted)
}

// TxnMarker is a transaction's end in one partition: the control batch
// (commit or abort marker, KIP-98) that WriteTxnMarker appends for the
// producer's ongoing transaction.
type TxnMarker struct {
	ProducerID    int64
	ProducerEpoch int16 // the coordinator's epoch of the producer; an older one is fenced
	Commit        bool  // false: abort
	// CoordinatorEpoch is the transaction coordinator's epoch, stored in
	// the marker's value as Kafka does.
	CoordinatorEpoch int32
}

// Chunk is a byte range of a segment file holding whole batches.
type Chunk struct {
	File vfs.File
	Pos  int64
	Len  int64
}

// ReadResult holds file ranges to send; call Release once they are sent.
type ReadResult struct {
	HighWatermark    int64
	LogStartOffset   int64
	LastStableOffset int64 // at most HighWatermark (txn.go)
	Chunks           []Chunk
	// Aborted (ReadCommitted only) are the aborted transactions that
	// overlap the chunks, for the consumer to drop; nil when none. Valid
	// until Release.
	Aborted    []AbortedTxn
	abortedBuf *[]AbortedTxn // Aborted's pooled slice, recycled by Release
	seg        *segment      // holds a reference until Release
}

// Errors. Server mapping (Kafka error codes) in parentheses.
var (
	ErrCorruptBatch         = errors.New("log: corrupt record batch")                                                   // CORRUPT_MESSAGE (batch.ErrCorrupt wraps the detail)
	ErrBatchTooLarge        = errors.New("log: batch larger than max.message.bytes")                                    // MESSAGE_TOO_LARGE
	ErrOffsetOutOfRange     = errors.New("log: offset out of range")                                                    // OFFSET_OUT_OF_RANGE
	ErrClosed               = errors.New("log: closed")                                                                 // NOT_LEADER_OR_FOLLOWER
	ErrOutOfOrderSequence   = errors.New("log: out of order sequence number")                                           // OUT_OF_ORDER_SEQUENCE_NUMBER
	ErrDuplicateSequence    = errors.New("log: duplicate sequence number")                                              // success with the original offset (result filled)
	ErrInvalidProducerEpoch = errors.New("log: producer epoch fenced")                                                  // INVALID_PRODUCER_EPOCH
	ErrUnknownProducerID    = errors.New("log: unknown producer id")                                                    // UNKNOWN_PRODUCER_ID
	ErrInvalidTxnState      = errors.New("log: non-transactional batch from a producer with a transaction in progress") // INVALID_TXN_STATE
	ErrCoordinatorFenced    = errors.New("log: marker from an older transaction coordinator epoch")                     // TRANSACTION_COORDINATOR_FENCED
	// An *IOError (KAFKA_STORAGE_ERROR) is returned, sticky, after a failed
	// write or fsync. A *CorruptionError (KAFKA_STORAGE_ERROR) from Open names
	// the file and position of a bad batch in the middle of the log.
)

// IOError is a failed write, fsync or segment operation. It is sticky: the
// log returns it to every later append (fsync is never retried: after a
// failed fsync the page cache may have dropped the dirty pages), except
// that after a write that failed with ENOSPC the writer recovers the log
// from disk and resumes, retrying with backoff (diskFullRetryMin to
// diskFullRetryMax) on the appends that arrive.
type IOError struct {
	Op  string // "write", "sync", "roll", …
	Err error

	// diskFull marks a write (never an fsync) that failed with ENOSPC:
	// nothing of its group was acknowledged, so the log may resume once
	// space is back (writer.go, resume).
	diskFull bool
}

// writeError is the *IOError of a failed write: op failed with err.
func writeError(op string, err error) *IOError {
	return &IOError{Op: op, Err: err, diskFull: errors.Is(err, syscall.ENOSPC)}
}

// resumable reports whether err, a log's sticky error, is a full disk the
// log may resume from.
func resumable(err error) bool {
	var e *IOError
	return errors.As(err, &e) && e.diskFull
}

func (e *IOError) Error() string { return "log: " + e.Op + ": " + e.Err.Error() }
func (e *IOError) Unwrap() error { return e.Err }

// CorruptionError is an invalid batch found by recovery where a torn tail is
// impossible: in a sealed segment, or followed by a valid batch. The
// partition refuses to serve rather than silently drop what follows.
type CorruptionError struct {
	File   string
	Pos    int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("log: corruption in %s at byte %d: %s", e.File, e.Pos, e.Reason)
}
