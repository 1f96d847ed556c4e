package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRequestStepHistograms: acks=all records read by a long-polling
// consumer fill every step of the breakdown (issue 12): request queue and
// response write by API, the append's queue, write, fsync wait and
// fdatasync, and the fetch's wake-up.
func TestRequestStepHistograms(t *testing.T) {
	tb := startBroker(t, Config{AutoCreateTopics: Bool(true)})
	const records = 20
	cons := tb.client(kgo.ConsumeTopics("steps"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(5*time.Second), kgo.AllowAutoTopicCreation())
	prod := tb.client(kgo.DefaultProduceTopic("steps"), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	ctx := ctxT(t, 30*time.Second)
	got := 0
	for i := 0; i < records; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for got <= i {
			fs := cons.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			got += fs.NumRecords()
		}
	}
	reg := tb.Registry()
	for _, h := range []struct {
		name  string
		api   string // the api label's value; "" for unlabelled histograms
		least uint64
	}{
		{"sushka_request_queue_seconds", "Produce", records},
		{"sushka_response_write_seconds", "Produce", records},
		{"sushka_response_write_seconds", "Fetch", 1},
		{"sushka_append_queue_seconds", "", records},
		{"sushka_append_write_seconds", "", records},
		{"sushka_append_sync_wait_seconds", "", records},
		{"sushka_append_fdatasync_seconds", "", records},
		// Most records are produced while the consumer's fetch waits.
		{"sushka_fetch_wake_seconds", "", records / 2},
	} {
		// A response's steps are observed once it is written: maybe just
		// after the client read it.
		var labels []string
		if h.api != "" {
			labels = []string{h.api}
		}
		count := func() uint64 { _, n, _ := gatherMetric(t, reg, h.name, labels...); return n }
		waitFor(2*time.Second, func() bool { return count() >= h.least })
		if n := count(); n < h.least {
			t.Errorf("%s{api=%q}: %d observations, want at least %d", h.name, h.api, n, h.least)
		}
	}
}
