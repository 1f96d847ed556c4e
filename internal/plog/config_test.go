package plog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestDefaultConfig: DefaultConfig is Kafka's defaults and valid as it is.
func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig(vfs.NewMem(), "/d")
	want := Config{
		SegmentBytes: 1 << 30, SegmentMaxAge: 168 * time.Hour,
		RetentionBytes: -1, RetentionTime: 168 * time.Hour,
		MaxBatchBytes: 1048588, IndexInterval: 4096, TimestampType: CreateTime,
		WritePath: DefaultWritePath, QueueDepth: 1024, SyncInterval: 2 * time.Millisecond,
		ProducerIDExpiration: 24 * time.Hour,
	}
	got := cfg
	got.FS, got.Clock, got.Dir, got.Logger = nil, nil, "", nil
	if got != want {
		t.Fatalf("DefaultConfig = %+v, want %+v", got, want)
	}
	if cfg.Clock == nil || cfg.Logger == nil || cfg.FS == nil || cfg.Dir != "/d" {
		t.Fatalf("DefaultConfig left FS, Dir, Clock or Logger unset: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestConfigValidate: each field's range, with Kafka's meaningful zeros and
// negatives accepted as they are, never replaced by a default.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		bad    string // "" valid, else a substring of the error
	}{
		{"defaults", func(*Config) {}, ""},
		{"no FS", func(c *Config) { c.FS = nil }, "FS is required"},
		{"no Dir", func(c *Config) { c.Dir = "" }, "Dir is required"},
		{"segment.bytes 0", func(c *Config) { c.SegmentBytes = 0 }, "segment.bytes is 0, must be in [1, 2147483647]"},
		{"segment.bytes -1", func(c *Config) { c.SegmentBytes = -1 }, "segment.bytes"},
		{"segment.bytes 1", func(c *Config) { c.SegmentBytes = 1 }, ""},
		{"segment.bytes 2^31", func(c *Config) { c.SegmentBytes = 1 << 31 }, "segment.bytes"},
		{"segment.ms 0", func(c *Config) { c.SegmentMaxAge = 0 }, "segment.ms is 0s, must be at least 1ms"},
		{"segment.ms 1ms", func(c *Config) { c.SegmentMaxAge = time.Millisecond }, ""},
		{"retention.ms 0", func(c *Config) { c.RetentionTime = 0 }, ""},
		{"retention.ms -1", func(c *Config) { c.RetentionTime = -time.Millisecond }, ""},
		{"retention.bytes 0", func(c *Config) { c.RetentionBytes = 0 }, ""},
		{"retention.bytes -1", func(c *Config) { c.RetentionBytes = -1 }, ""},
		{"max.message.bytes 0", func(c *Config) { c.MaxBatchBytes = 0 }, ""},
		{"max.message.bytes -1", func(c *Config) { c.MaxBatchBytes = -1 }, "max.message.bytes is -1, must be in [0, 2147483647]"},
		{"index.interval.bytes 0", func(c *Config) { c.IndexInterval = 0 }, ""},
		{"index.interval.bytes -1", func(c *Config) { c.IndexInterval = -1 }, "index.interval.bytes"},
		{"timestamp type 7", func(c *Config) { c.TimestampType = 7 }, "message.timestamp.type"},
		{"write path 9", func(c *Config) { c.WritePath = 9 }, "WritePath"},
		{"queue depth 0", func(c *Config) { c.QueueDepth = 0 }, "QueueDepth is 0, must be at least 1"},
		{"sync interval -1ns", func(c *Config) { c.SyncInterval = -1 }, "SyncInterval is -1ns, must be at least 0"},
		{"sync interval 0", func(c *Config) { c.SyncInterval = 0 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(vfs.NewMem(), "/d/t-0")
			tc.change(&cfg)
			before := cfg
			err := cfg.Validate()
			if cfg != before {
				t.Fatalf("Validate changed the config: %+v -> %+v", before, cfg)
			}
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				l, err := Open(cfg)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer l.Close()
				if got := l.config(); got.RetentionTime != cfg.RetentionTime || got.RetentionBytes != cfg.RetentionBytes ||
					got.MaxBatchBytes != cfg.MaxBatchBytes || got.IndexInterval != cfg.IndexInterval {
					t.Fatalf("Open changed the config: %+v -> %+v", cfg, got)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.bad) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming %q", err, tc.bad)
			}
			if _, err := Open(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Open = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestSetConfigRefusesInvalid: an invalid SetConfig changes nothing.
func TestSetConfigRefusesInvalid(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	defer l.Close()
	cfg := f.cfg
	cfg.SegmentBytes = 0
	if err := l.SetConfig(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetConfig(segment.bytes 0) = %v", err)
	}
	if got := l.config().SegmentBytes; got != f.cfg.SegmentBytes {
		t.Fatalf("segment.bytes %d after a refused SetConfig, want %d", got, f.cfg.SegmentBytes)
	}
}

// TestRetentionZero: retention.ms 0 deletes every sealed segment at the
// next check, retention.bytes 0 keeps only the active segment (Kafka's
// meanings; both were once turned into 7 days and unlimited).
func TestRetentionZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"retention.ms=0", func(c *Config) { c.RetentionTime = 0 }},
		{"retention.bytes=0", func(c *Config) { c.RetentionBytes = 0; c.RetentionTime = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, WriteSyscall)
			f.cfg.SegmentBytes = 2048
			tc.set(&f.cfg)
			l := f.open(t)
			defer l.Close()
			for i := 0; i < 20; i++ {
				mustAppend(t, l, mkBatch(2, 200, t0.UnixMilli()), AckWritten)
			}
			if n := len(l.segments); n < 3 {
				t.Fatalf("%d segments, want several", n)
			}
			f.clock.Set(t0.Add(time.Second)) // records a second old
			if err := l.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			if n := len(l.segments); n != 1 {
				t.Fatalf("%d segments left, want only the active one", n)
			}
			if start, hwm := l.LogStartOffset(), l.HighWatermark(); start != l.segments[0].base || hwm != 40 {
				t.Fatalf("log start %d (active segment at %d), high watermark %d", start, l.segments[0].base, hwm)
			}
		})
	}
}

// TestAppendDecompressBudget: the records of a compressed batch may
// decompress to 64 times max.message.bytes (at least 1 MiB, at most
// batch.MaxDecompressedBytes); more is INVALID_RECORD and nothing is
// written.
func TestAppendDecompressBudget(t *testing.T) {
	if got := batch.DecompressBudget(DefaultMaxBatchBytes); got != batch.MaxDecompressedBytes {
		t.Fatalf("budget for the default max.message.bytes: %d, want %d", got, batch.MaxDecompressedBytes)
	}
	if got := batch.DecompressBudget(0); got != 1<<20 {
		t.Fatalf("budget for max.message.bytes 0: %d, want 1 MiB", got)
	}
	f := newFixture(t, WriteSyscall)
	f.cfg.MaxBatchBytes = 32 << 10 // budget 2 MiB
	l := f.open(t)
	defer l.Close()
	within := batch.Build(batch.BuildOptions{Records: 1000, ValueSize: 1000, Codec: batch.CodecZstd, ProducerID: -1})
	beyond := batch.Build(batch.BuildOptions{Records: 3000, ValueSize: 1000, Codec: batch.CodecZstd, ProducerID: -1})
	if len(beyond) > f.cfg.MaxBatchBytes {
		t.Fatalf("test batch of %d bytes exceeds max.message.bytes", len(beyond))
	}
	mustAppend(t, l, within, AckWritten)
	if _, err := l.Append(beyond, AckWritten); !errors.Is(err, batch.ErrInvalidRecord) || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("append of a batch inflating past the budget: %v, want INVALID_RECORD", err)
	}
	if hwm := l.HighWatermark(); hwm != 1000 {
		t.Fatalf("high watermark %d, want 1000", hwm)
	}
}
