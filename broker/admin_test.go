package broker

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIdempotentRetriesAcrossKilledConnections: the broker drops every
// client connection again and again while an idempotent producer sends;
// retried batches must not be stored twice.
func TestIdempotentRetriesAcrossKilledConnections(t *testing.T) {
	tb := startBroker(t, Config{DefaultPartitions: 2})
	cl := tb.client(kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }))
	const n = 2000
	// Get the producer ID first: kgo gives up on InitProducerID when the
	// connection dies right after the request, as if SASL were missing.
	if err := cl.ProduceSync(ctxT(t, 10*time.Second), &kgo.Record{Topic: "idem-warm", Value: []byte("warm")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var killed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
				tb.CloseClientConnections()
				killed.Add(1)
			}
		}
	}()
	var failed atomic.Int64
	var firstErr atomic.Value
	var pwg sync.WaitGroup
	for i := range n {
		pwg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: "idem", Key: []byte(strconv.Itoa(i % 7)), Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			pwg.Done()
		})
		if i%100 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	pwg.Wait()
	close(stop)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d records failed; first: %v", f, firstErr.Load())
	}
	t.Logf("connections dropped %d times during production", killed.Load())
	got := consumeAll(t, tb, "idem", n)
	seen := map[string]int{}
	for _, r := range got {
		seen[string(r.Value)]++
	}
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Fatalf("record %d stored %d times", i, c)
		}
	}
	// Nothing more than n records either.
	end, err := tb.admin().ListEndOffsets(ctxT(t, 10*time.Second), "idem")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	end.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Fatalf("partitions hold %d records, want %d", total, n)
	}
}

func TestListOffsetsByTime(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	base := time.UnixMilli(1_700_000_000_000)
	ctx := ctxT(t, 20*time.Second)
	for i := range 10 {
		r := &kgo.Record{Topic: "times", Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := tb.admin()
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{base.Add(-time.Hour), 0}, {base, 0}, {base.Add(3500 * time.Millisecond), 4}, {base.Add(9 * time.Second), 9}, {base.Add(time.Hour), -1}} {
		res, err := adm.ListOffsetsAfterMilli(ctx, c.at.UnixMilli(), "times")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := res.Lookup("times", 0)
		// kadm maps "none found" to the end offset; the raw answer is -1.
		want := c.want
		if want == -1 {
			want = 10
		}
		if o.Err != nil || o.Offset != want {
			t.Fatalf("after %v: offset %d (%v), want %d", c.at.Sub(base), o.Offset, o.Err, want)
		}
	}
	start, _ := adm.ListStartOffsets(ctx, "times")
	end, _ := adm.ListEndOffsets(ctx, "times")
	if s, _ := start.Lookup("times", 0); s.Offset != 0 {
		t.Fatalf("start %d", s.Offset)
	}
	if e, _ := end.Lookup("times", 0); e.Offset != 10 {
		t.Fatalf("end %d", e.Offset)
	}
	maxTS := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "times"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	maxTS.Topics = append(maxTS.Topics, rt)
	resp, err := maxTS.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.Offset != 9 || p.Timestamp != base.Add(9*time.Second).UnixMilli() {
		t.Fatalf("max timestamp: %+v", p)
	}
}

func TestTopicAdmin(t *testing.T) {
	tb := startBroker(t, Config{AutoCreateTopics: Bool(false)})
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)

	// Validate-only creates nothing.
	if _, err := adm.ValidateCreateTopics(ctx, 3, 1, nil, "v"); err != nil {
		t.Fatal(err)
	}
	if td, _ := adm.ListTopics(ctx); td.Has("v") {
		t.Fatal("validate-only created the topic")
	}
	resp, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")}, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil || r.ID == [16]byte{} || r.NumPartitions != 2 || configValue(r.Configs["retention.ms"]) != "60000" {
			t.Fatalf("create %s: %+v", r.Topic, r)
		}
	}
	for name, cr := range map[string]func() error{
		"exists":   func() error { _, err := adm.CreateTopic(ctx, 1, 1, nil, "a"); return err },
		"bad name": func() error { _, err := adm.CreateTopic(ctx, 1, 1, nil, "a/b"); return err },
		"rf 3":     func() error { _, err := adm.CreateTopic(ctx, 1, 3, nil, "rf"); return err },
		"bad config": func() error {
			_, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "cfg")
			return err
		},
	} {
		if cr() == nil {
			t.Errorf("%s: created", name)
		}
	}
	// Grow a to 5 partitions and produce to the new one.
	if _, err := adm.UpdatePartitions(ctx, 5, "a"); err != nil {
		t.Fatal(err)
	}
	if r, _ := adm.UpdatePartitions(ctx, 3, "a"); r["a"].Err == nil {
		t.Fatal("shrinking succeeded")
	}
	cl := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "a", Partition: 4, Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Delete b; it is gone, and auto creation (off) does not bring it back.
	if r, err := adm.DeleteTopics(ctx, "b"); err != nil || r["b"].Err != nil {
		t.Fatalf("delete: %v %v", err, r["b"].Err)
	}
	md, err := adm.Metadata(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !errorsIs(md.Topics["b"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("deleted topic: %v", md.Topics["b"].Err)
	}
	// Recreate b: empty.
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "b"); err != nil {
		t.Fatal(err)
	}
	end, _ := adm.ListEndOffsets(ctx, "b")
	if o, _ := end.Lookup("b", 0); o.Offset != 0 {
		t.Fatalf("recreated topic has end offset %d", o.Offset)
	}
	// A restart keeps everything.
	dir := tb.dir
	tb.stop()
	tb2 := startBroker(t, Config{DataDir: dir, AutoCreateTopics: Bool(false)})
	topics, err := tb2.admin().ListTopics(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !topics.Has("a") || len(topics["a"].Partitions) != 5 || !topics.Has("b") {
		t.Fatalf("after restart: %v", topics.Names())
	}
	end, _ = tb2.admin().ListEndOffsets(ctxT(t, 10*time.Second), "a")
	if o, _ := end.Lookup("a", 4); o.Offset != 1 {
		t.Fatalf("partition a/4 end offset %d after restart", o.Offset)
	}
}

func configValue(c kadm.Config) string { return c.MaybeValue() }

func errorsIs(err error, target *kerr.Error) bool { return err == target }

func TestConfigs(t *testing.T) {
	tb := startBroker(t, Config{RetentionBytes: Ptr[int64](1 << 30)})
	adm := tb.admin()
	ctx := ctxT(t, 30*time.Second)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")}, "c"); err != nil {
		t.Fatal(err)
	}
	describe := func() map[string]kadm.Config {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On("c", nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("describe: %v %v", err, rc.Err)
		}
		out := map[string]kadm.Config{}
		for _, c := range rc.Configs {
			out[c.Key] = c
		}
		return out
	}
	cs := describe()
	check := func(key, value string, source kmsg.ConfigSource) {
		t.Helper()
		c, ok := cs[key]
		if !ok || c.MaybeValue() != value || c.Source != source {
			t.Fatalf("%s: %+v (value %q), want %q from %v", key, c, c.MaybeValue(), value, source)
		}
	}
	check("retention.ms", "60000", kmsg.ConfigSourceDynamicTopicConfig)
	check("retention.bytes", strconv.Itoa(1<<30), kmsg.ConfigSourceStaticBrokerConfig)
	check("segment.bytes", strconv.Itoa(1<<30), kmsg.ConfigSourceDefaultConfig)
	check("cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)

	// Incremental: set one, delete another.
	_, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2000000")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "c")
	if err != nil {
		t.Fatal(err)
	}
	cs = describe()
	check("max.message.bytes", "2000000", kmsg.ConfigSourceDynamicTopicConfig)
	check("retention.ms", strconv.Itoa(7*24*3600*1000), kmsg.ConfigSourceDefaultConfig)

	// Invalid values change nothing.
	r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("soon")}}, "c")
	if err == nil && r[0].Err == nil {
		t.Fatal("invalid segment.ms accepted")
	}
	// Non-incremental replaces the whole set.
	if _, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "message.timestamp.type", Value: kadm.StringPtr("LogAppendTime")}}, "c"); err != nil {
		t.Fatal(err)
	}
	cs = describe()
	check("message.timestamp.type", "LogAppendTime", kmsg.ConfigSourceDynamicTopicConfig)
	check("max.message.bytes", "1048588", kmsg.ConfigSourceDefaultConfig)

	// LogAppendTime: the broker stamps records.
	cl := tb.client()
	before := time.Now().Add(-time.Second)
	old := time.UnixMilli(1000)
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: "c", Value: []byte("x"), Timestamp: old})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, tb, "c", 1)
	if got[0].Timestamp.Before(before) || got[0].Attrs.TimestampType() != 1 {
		t.Fatalf("LogAppendTime topic returned timestamp %v type %d", got[0].Timestamp, got[0].Attrs.TimestampType())
	}

	// Broker configs: described, read-only, not alterable.
	bcs, err := adm.DescribeBrokerConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rc := range bcs {
		for _, c := range rc.Configs {
			if c.Key == "log.retention.bytes" {
				found = true
				if c.MaybeValue() != strconv.Itoa(1<<30) || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
					t.Fatalf("log.retention.bytes: %+v", c)
				}
			}
		}
	}
	if !found {
		t.Fatal("log.retention.bytes not described")
	}
	if r, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "log.retention.ms", Value: kadm.StringPtr("1")}}); err == nil && r[0].Err == nil {
		t.Fatal("broker config altered")
	}
}

func TestDescribeLogDirsAndDeleteRecords(t *testing.T) {
	tb := startBroker(t, Config{DefaultPartitions: 2})
	cl := tb.client(kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := ctxT(t, 30*time.Second)
	var recs []*kgo.Record
	for i := range 100 {
		value := make([]byte, 1000)
		rand.Read(value) // incompressible: kgo compresses with snappy by default
		recs = append(recs, &kgo.Record{Topic: "dirs", Partition: 0, Value: value, Key: []byte(fmt.Sprint(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := tb.admin()
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var size0, size1 int64 = -1, -1
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == "dirs" && p.Partition == 0 {
				size0 = p.Size
			}
			if p.Topic == "dirs" && p.Partition == 1 {
				size1 = p.Size
			}
		})
	})
	if size0 < 100_000 || size0 > 200_000 || size1 != 0 {
		t.Fatalf("sizes: partition 0 %d (want ~100 KB), partition 1 %d (want 0)", size0, size1)
	}

	// DeleteRecords moves the start offset.
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "dirs", Partition: 0, At: 40})
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup("dirs", 0); r.Err != nil || r.LowWatermark != 40 {
		t.Fatalf("delete records: %+v", r)
	}
	start, _ := adm.ListStartOffsets(ctx, "dirs")
	if s, _ := start.Lookup("dirs", 0); s.Offset != 40 {
		t.Fatalf("start offset %d after DeleteRecords", s.Offset)
	}
}
