package api

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestKafkaDefaults: the broker defaults are Kafka's and pass their own
// validation.
func TestKafkaDefaults(t *testing.T) {
	d := KafkaDefaults()
	want := Defaults{RetentionMs: 604800000, RetentionBytes: -1, SegmentBytes: 1073741824, SegmentMs: 604800000,
		MaxMessageBytes: 1048588, TimestampType: "CreateTime"}
	if d.RetentionMs != want.RetentionMs || d.RetentionBytes != want.RetentionBytes || d.SegmentBytes != want.SegmentBytes ||
		d.SegmentMs != want.SegmentMs || d.MaxMessageBytes != want.MaxMessageBytes || d.TimestampType != want.TimestampType {
		t.Fatalf("KafkaDefaults = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestTopicConfigValidation: every topic config's boundaries, as Kafka 4's
// LogConfig draws them.
func TestTopicConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"segment.bytes", "1048576", true}, {"segment.bytes", "1048575", false}, {"segment.bytes", "14", false},
		{"segment.bytes", "2147483647", true}, {"segment.bytes", "2147483648", false},
		{"segment.ms", "1", true}, {"segment.ms", "0", false},
		{"retention.ms", "-1", true}, {"retention.ms", "0", true}, {"retention.ms", "-2", false},
		{"retention.ms", "9223372036854775807", true},
		{"retention.bytes", "-1", true}, {"retention.bytes", "0", true}, {"retention.bytes", "-7", true},
		{"retention.bytes", "1e9", false},
		{"max.message.bytes", "0", true}, {"max.message.bytes", "-1", false},
		{"min.insync.replicas", "1", true}, {"min.insync.replicas", "0", false},
		{"message.timestamp.type", "LogAppendTime", true}, {"message.timestamp.type", "logappendtime", false},
		{"cleanup.policy", "delete", true}, {"cleanup.policy", "compact", false},
		{"unknown.config", "1", false},
	} {
		v := tc.value
		err := meta.ValidateConfig(tc.name, &v)
		if (err == nil) != tc.ok {
			t.Errorf("%s=%s: %v, want ok=%v", tc.name, tc.value, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%s: error %q does not name the config", tc.name, tc.value, err)
		}
	}
}

// TestLogConfigInForce: the partition log gets exactly the effective values
// (zeros included), and Long.MAX_VALUE milliseconds saturates instead of
// overflowing into a negative (unlimited) duration.
func TestLogConfigInForce(t *testing.T) {
	// ProducerIDExpiration as New defaults it (the Handler is built by hand).
	h := &Handler{cfg: Config{FS: vfs.NewMem(), DataDir: "/d", Defaults: KafkaDefaults(), ProducerIDExpiration: plog.DefaultProducerIDExpiration}}
	h.log = slog.New(slog.DiscardHandler)
	cfg := h.logConfig(meta.Topic{Name: "t", Configs: map[string]string{
		"retention.ms": "0", "retention.bytes": "0", "max.message.bytes": "0", "segment.ms": "9223372036854775807",
	}}, 0)
	if cfg.RetentionTime != 0 || cfg.RetentionBytes != 0 || cfg.MaxBatchBytes != 0 || cfg.SegmentMaxAge != math.MaxInt64 {
		t.Fatalf("logConfig = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = h.logConfig(meta.Topic{Name: "t", Configs: map[string]string{"retention.ms": "-1"}}, 0)
	if cfg.RetentionTime >= 0 || cfg.SegmentMaxAge != 7*24*time.Hour || cfg.SegmentBytes != 1<<30 {
		t.Fatalf("logConfig = %+v", cfg)
	}
}

// TestLogConfigCarriesProducerIDExpiration: the broker's
// producer.id.expiration.ms reaches every partition's log.
func TestLogConfigCarriesProducerIDExpiration(t *testing.T) {
	h := &Handler{cfg: Config{FS: vfs.NewMem(), DataDir: "/d", Defaults: KafkaDefaults(), ProducerIDExpiration: 5 * time.Minute}}
	h.log = slog.New(slog.DiscardHandler)
	if got := h.logConfig(meta.Topic{Name: "t"}, 0).ProducerIDExpiration; got != 5*time.Minute {
		t.Fatalf("ProducerIDExpiration = %s, want 5m", got)
	}
}

// TestLogConfigCarriesSyncInterval: the broker's fsync pacing reaches every
// partition's log, 0 (no pacing, as New maps a negative setting) included.
func TestLogConfigCarriesSyncInterval(t *testing.T) {
	for _, d := range []time.Duration{7 * time.Millisecond, 0} {
		h := &Handler{cfg: Config{FS: vfs.NewMem(), DataDir: "/d", Defaults: KafkaDefaults(), SyncInterval: d,
			ProducerIDExpiration: plog.DefaultProducerIDExpiration}}
		h.log = slog.New(slog.DiscardHandler)
		cfg := h.logConfig(meta.Topic{Name: "t"}, 0)
		if cfg.SyncInterval != d {
			t.Fatalf("SyncInterval = %s, want %s", cfg.SyncInterval, d)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLogConfigCarriesEarlyWriteback: the broker's early writeback setting
// (sushka serve --early-writeback-bytes) reaches every partition's log; it
// used to be a process-wide plog variable the flag overwrote.
func TestLogConfigCarriesEarlyWriteback(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{128 << 10, 128 << 10}, {0, plog.DefaultEarlyWritebackBytes}, {-1, 0}} {
		fs := vfs.NewMem()
		catalog, err := meta.Open(fs, "/d/meta")
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Config{FS: fs, DataDir: "/d", Catalog: catalog, Defaults: KafkaDefaults(),
			Logger: slog.New(slog.DiscardHandler), EarlyWritebackBytes: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		cfg := h.logConfig(meta.Topic{Name: "t"}, 0)
		h.Close()
		if cfg.EarlyWritebackBytes != tc.want {
			t.Fatalf("set %d: EarlyWritebackBytes = %d, want %d", tc.set, cfg.EarlyWritebackBytes, tc.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}
