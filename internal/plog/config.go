package plog

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// The defaults of DefaultConfig: Apache Kafka's, so that a topic without
// overrides behaves as it would on Kafka. This is their one home: the
// broker's topic config defaults (api.KafkaDefaults) are read from here.
const (
	DefaultSegmentBytes   = 1 << 30            // segment.bytes / log.segment.bytes
	DefaultSegmentMaxAge  = 7 * 24 * time.Hour // segment.ms / log.roll.ms (log.roll.hours=168)
	DefaultRetentionBytes = -1                 // retention.bytes / log.retention.bytes: unlimited
	DefaultRetentionTime  = 7 * 24 * time.Hour // retention.ms / log.retention.hours=168
	DefaultMaxBatchBytes  = 1<<20 + 12         // max.message.bytes / message.max.bytes
	DefaultIndexInterval  = 4096               // index.interval.bytes
	DefaultQueueDepth     = 1024               // appends queued for the writer
	// DefaultSyncInterval paces the fsyncs of AckNone/AckWritten appends
	// (Config.SyncInterval; measured in docs/benchmarks.md).
	DefaultSyncInterval = 2 * time.Millisecond
	// DefaultProducerIDExpiration is producer.id.expiration.ms.
	DefaultProducerIDExpiration = 24 * time.Hour
	// CheckpointInterval is log.flush.offset.checkpoint.interval.ms (and
	// log.flush.start.offset.checkpoint.interval.ms): how often, at most,
	// a data directory's checkpoint files are rewritten while its logs
	// publish (checkpoint.go). Past the recovery points they hold, a crash
	// costs an fsync and a lenient recovery of the last segment.
	CheckpointInterval   = 60 * time.Second
	defaultTimestampType = CreateTime    // message.timestamp.type
	maxInt32             = math.MaxInt32 // the largest value of Kafka's INT configs
)

// DefaultWritePath is the write path chosen by measurement (docs/benchmarks.md).
var DefaultWritePath = WriteSyscall

// DefaultEarlyWritebackBytes is Config.EarlyWritebackBytes' default, chosen
// by measurement (docs/benchmarks.md, "Early writeback"): off.
const DefaultEarlyWritebackBytes int64 = 0

// DefaultConfig returns the configuration of a partition log in dir on fs
// with Kafka's defaults; change fields from there.
func DefaultConfig(fs vfs.FS, dir string) Config {
	return Config{
		FS:             fs,
		Clock:          clock.Real{},
		Dir:            dir,
		Logger:         slog.Default(),
		SegmentBytes:   DefaultSegmentBytes,
		SegmentMaxAge:  DefaultSegmentMaxAge,
		RetentionBytes: DefaultRetentionBytes,
		RetentionTime:  DefaultRetentionTime,
		MaxBatchBytes:  DefaultMaxBatchBytes,
		IndexInterval:  DefaultIndexInterval,
		TimestampType:  defaultTimestampType,
		WritePath:      DefaultWritePath,
		QueueDepth:     DefaultQueueDepth,
		SyncInterval:   DefaultSyncInterval,

		EarlyWritebackBytes:  DefaultEarlyWritebackBytes,
		ProducerIDExpiration: DefaultProducerIDExpiration,
	}
}

// setNilDefaults fills in the fields whose zero value (nil) is not a
// setting anybody could ask for. Numbers are never defaulted: see Config.
func (c *Config) setNilDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FileCache == nil {
		c.FileCache = DefaultFileCache
	}
}

// ErrInvalidConfig wraps every error of Config.Validate.
var ErrInvalidConfig = errors.New("log: invalid config")

// Validate checks every field against its allowed range; the error names
// the config (Kafka's name where there is one) and the range.
func (c *Config) Validate() error {
	bad := func(name string, value any, allowed string) error {
		return fmt.Errorf("%w: %s is %v, must be %s", ErrInvalidConfig, name, value, allowed)
	}
	switch {
	case c.FS == nil:
		return fmt.Errorf("%w: FS is required", ErrInvalidConfig)
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrInvalidConfig)
	case c.SegmentBytes < 1 || c.SegmentBytes > maxInt32:
		return bad("segment.bytes", c.SegmentBytes, fmt.Sprintf("in [1, %d]", maxInt32))
	case c.SegmentMaxAge < time.Millisecond:
		return bad("segment.ms", c.SegmentMaxAge, "at least 1ms")
	case c.MaxBatchBytes < 0 || c.MaxBatchBytes > maxInt32:
		return bad("max.message.bytes", c.MaxBatchBytes, fmt.Sprintf("in [0, %d]", maxInt32))
	case c.IndexInterval < 0 || c.IndexInterval > maxInt32:
		return bad("index.interval.bytes", c.IndexInterval, fmt.Sprintf("in [0, %d]", maxInt32))
	case c.TimestampType != CreateTime && c.TimestampType != LogAppendTime:
		return bad("message.timestamp.type", c.TimestampType, "CreateTime or LogAppendTime")
	case c.WritePath != WriteSyscall && c.WritePath != WriteMmap:
		return bad("WritePath", c.WritePath, "WriteSyscall or WriteMmap")
	case c.QueueDepth < 1:
		return bad("QueueDepth", c.QueueDepth, "at least 1")
	case c.SyncInterval < 0:
		return bad("SyncInterval", c.SyncInterval, "at least 0")
	case c.EarlyWritebackBytes < 0:
		return bad("EarlyWritebackBytes", c.EarlyWritebackBytes, "at least 0")
	case c.ProducerIDExpiration < time.Millisecond:
		return bad("producer.id.expiration.ms", c.ProducerIDExpiration, "at least 1ms")
	}
	// RetentionBytes and RetentionTime take any value: negative is
	// unlimited, as in Kafka.
	return nil
}
