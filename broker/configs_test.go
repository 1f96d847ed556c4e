package broker

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// segmentFiles counts the segment files of a partition directory.
func segmentFiles(t *testing.T, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// TestRetentionZeroConfigs: retention.ms=0 deletes segments as soon as they
// are rolled and retention.bytes=0 keeps only the active one, as in Kafka
// (both once became 7 days and unlimited while DescribeConfigs said 0).
func TestRetentionZeroConfigs(t *testing.T) {
	tb := startBroker(t, Config{RetentionCheckInterval: 20 * time.Millisecond})
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)
	cl := tb.client(kgo.DefaultProduceTopic("unused"))
	for _, tc := range []struct{ topic, config string }{
		{"zero-ms", "retention.ms"},
		{"zero-bytes", "retention.bytes"},
	} {
		t.Run(tc.config, func(t *testing.T) {
			// segment.ms=1: every produce a millisecond after the last
			// rolls a segment. Retention by time judges a segment by its
			// newest record, so the records carry an old timestamp.
			configs := map[string]*string{tc.config: kadm.StringPtr("0"), "segment.ms": kadm.StringPtr("1")}
			if tc.config == "retention.bytes" {
				configs["retention.ms"] = kadm.StringPtr("-1")
			}
			if _, err := adm.CreateTopic(ctx, 1, 1, configs, tc.topic); err != nil {
				t.Fatal(err)
			}
			rcs, err := adm.DescribeTopicConfigs(ctx, tc.topic)
			if err != nil {
				t.Fatal(err)
			}
			rc, _ := rcs.On(tc.topic, nil)
			for _, c := range rc.Configs {
				if c.Key == tc.config && c.MaybeValue() != "0" {
					t.Fatalf("DescribeConfigs %s = %q, want 0", c.Key, c.MaybeValue())
				}
			}
			const n = 6
			for i := range n {
				time.Sleep(3 * time.Millisecond)
				r := &kgo.Record{Topic: tc.topic, Value: []byte{byte(i)}, Timestamp: time.Now().Add(-time.Hour)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(tb.dir, tc.topic+"-0")
			deadline := time.Now().Add(10 * time.Second)
			for segmentFiles(t, dir) != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("%d segment files after %d rolled produces with %s=0, want only the active one", segmentFiles(t, dir), n, tc.config)
				}
				time.Sleep(10 * time.Millisecond)
			}
			starts, err := adm.ListStartOffsets(ctx, tc.topic)
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := starts.Lookup(tc.topic, 0); o.Err != nil || o.Offset != n-1 {
				t.Fatalf("log start offset %d (%v), want %d: only the last batch, in the active segment", o.Offset, o.Err, n-1)
			}
		})
	}
}

// TestInvalidConfigsRefused: values Kafka refuses (segment.bytes below
// 1 MiB, retention.ms below -1, ...) answer INVALID_CONFIG naming the config
// and its range in CreateTopics, AlterConfigs and IncrementalAlterConfigs,
// and refuse to start a broker when they are its defaults.
func TestInvalidConfigsRefused(t *testing.T) {
	tb := startBroker(t, Config{})
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "valid"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, value, want string }{
		{"segment.bytes", "14", "segment.bytes: must be a 32-bit integer of at least 1048576"},
		{"segment.bytes", "1048575", "at least 1048576"},
		{"segment.ms", "0", "segment.ms: must be a 64-bit integer of at least 1"},
		{"retention.ms", "-2", "retention.ms: must be a 64-bit integer of at least -1"},
		{"max.message.bytes", "-1", "max.message.bytes"},
		{"min.insync.replicas", "0", "min.insync.replicas"},
		{"message.timestamp.type", "Now", "CreateTime or LogAppendTime"},
		{"cleanup.policy", "keep", "must be delete"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			check := func(api string, err error, errMessage *string) {
				t.Helper()
				msg := ""
				if errMessage != nil {
					msg = *errMessage
				}
				if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(msg, tc.want) {
					t.Fatalf("%s: %v %q, want INVALID_CONFIG with %q", api, err, msg, tc.want)
				}
			}
			cr, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{tc.name: &tc.value}, "bad-"+strings.ReplaceAll(tc.name, ".", "-"))
			if err == nil {
				err = cr.Err
			}
			check("CreateTopics", err, &cr.ErrMessage)

			ar, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: tc.name, Value: &tc.value}}, "valid")
			if err != nil {
				t.Fatal(err)
			}
			check("AlterConfigs", ar[0].Err, &ar[0].ErrMessage)

			ir, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: tc.name, Value: &tc.value}}, "valid")
			if err != nil {
				t.Fatal(err)
			}
			check("IncrementalAlterConfigs", ir[0].Err, &ir[0].ErrMessage)
		})
	}

	// APPEND to a config that is not a list is INVALID_CONFIG too, as in
	// Kafka.
	ir, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("5")}}, "valid")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ir[0].Err, kerr.InvalidConfig) || !strings.Contains(ir[0].ErrMessage, "retention.ms") {
		t.Fatalf("APPEND to retention.ms: %v %q, want INVALID_CONFIG", ir[0].Err, ir[0].ErrMessage)
	}

	// The broker's own defaults are checked the same way.
	for _, cfg := range []Config{
		{SegmentBytes: Ptr[int64](14)},
		{SegmentMaxAge: Ptr(time.Duration(0))},
		{MaxMessageBytes: Ptr[int32](-1)},
	} {
		cfg.DataDir = t.TempDir()
		cfg.Logger = testLogger()
		if b, err := New(cfg); err == nil {
			b.Shutdown(ctx)
			t.Fatalf("New(%+v) accepted", cfg)
		} else if !strings.Contains(err.Error(), "invalid value") {
			t.Fatalf("New: %v", err)
		}
	}
	// retention 0 is a valid default, reported as it is.
	b, err := New(Config{DataDir: t.TempDir(), Logger: testLogger(), RetentionTime: Ptr(time.Duration(0)), RetentionBytes: Ptr[int64](0)})
	if err != nil {
		t.Fatal(err)
	}
	b.Shutdown(ctx)
}
