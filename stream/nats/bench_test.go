package nats_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/nats"
	"github.com/sushka-io/sushka/stream/nats/natstest"
)

var benchTopics atomic.Int64

// consumeLoop consumes n pre-published messages of a fresh topic and
// returns when the last is acknowledged; start and stop bracket the
// measured part.
type consumeLoop func(tb testing.TB, url string, n int, start, stop func())

// prepare creates a fresh topic and publishes n 512-byte keyed messages.
func prepare(tb testing.TB, tr *nats.NATS, n int) string {
	tb.Helper()
	topic := "bench-" + strconv.FormatInt(benchTopics.Add(1), 10)
	js := tr.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: nats.StreamName(topic), Subjects: []string{topic}}); err != nil {
		tb.Fatal(err)
	}
	payload := make([]byte, 512)
	const window = 1000 // below nats.go's limit of outstanding async publishes (4000)
	for i := 0; i < n; i++ {
		msg := &natsclient.Msg{Subject: topic, Data: payload, Header: natsclient.Header{nats.KeyHeader: {"key-" + strconv.Itoa(i%64)}}}
		if _, err := js.PublishMsgAsync(msg); err != nil {
			tb.Fatal(err)
		}
		if (i+1)%window == 0 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				tb.Fatal("publishing the messages took over a minute")
			}
		}
	}
	return topic
}

// rawLoop is nats.go's jetstream Fetch + Ack, with the per-message work
// the transport does: metadata (for the offset), the key header, an ack.
func rawLoop(tb testing.TB, url string, n int, start, stop func()) {
	tr := nats.New(url, nil)
	defer tr.Close()
	topic := prepare(tb, tr, n)
	ctx := context.Background()
	cons, err := tr.JetStream().CreateOrUpdateConsumer(ctx, nats.StreamName(topic), jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024,
	})
	if err != nil {
		tb.Fatal(err)
	}
	start()
	var keys int
	for got := 0; got < n; {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				tb.Fatal(err)
			}
			keys += len(m.Headers().Get(nats.KeyHeader)) + int(meta.Sequence.Stream&1)
			if err := m.Ack(); err != nil {
				tb.Fatal(err)
			}
			got++
			if got == n {
				break // not waiting for the rest of the last batch's expiry
			}
		}
	}
	stop()
	if keys == 0 {
		tb.Fatal("no keys read")
	}
}

// transportLoop is this package's consumer, Poll + Mark, without an App.
func transportLoop(tb testing.TB, url string, n int, start, stop func()) {
	tr := nats.New(url, nil)
	defer tr.Close()
	topic := prepare(tb, tr, n)
	ctx := context.Background()
	c, err := tr.Consume(ctx, stream.ConsumerConfig{Group: "transport", Topics: []string{topic}})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(ctx)
	tp := stream.TopicPartition{Topic: topic}
	buf := make([]*stream.Record, 0, 512)
	start()
	var keys int
	for got := 0; got < n; {
		records, err := c.Poll(ctx, buf)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range records {
			keys += len(r.Key)
			c.Mark(tp, r.Offset+1)
			got++
		}
		buf = records[:0]
	}
	stop()
	if keys == 0 {
		tb.Fatal("no keys read")
	}
}

// BenchmarkConsume measures one consumed message (op = message) by
// rawLoop and by transportLoop against the same nats-server, with the
// same pre-published messages and the same fetch batch (256). Three rounds
// of each, interleaved in one run (go test's -count would repeat each
// back to back); compare within a run:
//
//	go test ./stream/nats -run '^$' -bench Consume -benchtime 20000x
func BenchmarkConsume(b *testing.B) {
	url := natstest.Start(b)
	run := func(loop consumeLoop) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			loop(b, url, b.N, b.ResetTimer, b.StopTimer)
		}
	}
	for range 3 {
		b.Run("raw", run(rawLoop))
		b.Run("transport", run(transportLoop))
	}
}

// transportAllocsOverRaw is the floor of the transport's own allocations
// per consumed message beyond nats.go's: the stream.Record, and its key
// decoded from the header.
const transportAllocsOverRaw = 2

// TestConsumeAllocsOverRaw gates transportAllocsOverRaw: both loops
// consume the same messages, and the difference of their allocations per
// message (all goroutines, nats.go's included: they are the same work in
// both) may exceed the floor by half an allocation of noise (heartbeats,
// timers) and no more.
func TestConsumeAllocsOverRaw(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	url := natstest.Start(t)
	const n = 3000
	perMessage := func(loop consumeLoop) float64 {
		var before, after runtime.MemStats
		loop(t, url, n, func() { runtime.ReadMemStats(&before) }, func() { runtime.ReadMemStats(&after) })
		return float64(after.Mallocs-before.Mallocs) / n
	}
	raw, transport := perMessage(rawLoop), perMessage(transportLoop)
	t.Logf("allocations per message: raw nats.go %.2f, transport %.2f", raw, transport)
	if transport-raw > transportAllocsOverRaw+0.5 {
		t.Fatalf("the transport allocates %.2f per message beyond raw nats.go (%.2f vs %.2f); the floor is %d",
			transport-raw, transport, raw, transportAllocsOverRaw)
	}
}
