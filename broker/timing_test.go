package broker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// histogramCount is the number of observations of the histogram name
// (summed over labels) whose labels include want (name → value; nil: any).
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == k && lp.GetValue() == v
				}
				if !found {
					continue next
				}
			}
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

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
		name   string
		labels map[string]string
		least  uint64
	}{
		{"sushka_request_queue_seconds", map[string]string{"api": "Produce"}, records},
		{"sushka_response_write_seconds", map[string]string{"api": "Produce"}, records},
		{"sushka_response_write_seconds", map[string]string{"api": "Fetch"}, 1},
		{"sushka_append_queue_seconds", nil, records},
		{"sushka_append_write_seconds", nil, records},
		{"sushka_append_sync_wait_seconds", nil, records},
		{"sushka_append_fdatasync_seconds", nil, records},
		// Most records are produced while the consumer's fetch waits.
		{"sushka_fetch_wake_seconds", nil, records / 2},
	} {
		// A response's steps are observed once it is written: maybe just
		// after the client read it.
		waitFor(2*time.Second, func() bool { return histogramCount(t, reg, h.name, h.labels) >= h.least })
		if n := histogramCount(t, reg, h.name, h.labels); n < h.least {
			t.Errorf("%s%v: %d observations, want at least %d", h.name, h.labels, n, h.least)
		}
	}
}
