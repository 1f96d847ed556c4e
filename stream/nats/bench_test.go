package nats_test

import (
	"context"
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

// BenchmarkConsume measures one consumed message (op = message) two ways
// against the same nats-server, with the same pre-published 512-byte keyed
// messages, the same fetch batch (256) and the same per-message work
// (metadata for the offset, the key header, an explicit ack):
//
//   - raw: nats.go's jetstream Fetch + Ack in a loop;
//   - transport: this package's consumer, Poll + Mark (no App).
//
// Three rounds of each, interleaved, in one run; compare within a run:
// go test ./stream/nats -run '^$' -bench Consume -benchtime 20000x
func BenchmarkConsume(b *testing.B) {
	url := natstest.Start(b)
	payload := make([]byte, 512)
	prepare := func(b *testing.B, tr *nats.NATS) string {
		b.Helper()
		topic := "bench-" + strconv.FormatInt(benchTopics.Add(1), 10)
		js := tr.JetStream()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: nats.StreamName(topic), Subjects: []string{topic}}); err != nil {
			b.Fatal(err)
		}
		const window = 1000 // below nats.go's limit of outstanding async publishes (4000)
		for i := 0; i < b.N; i++ {
			msg := &natsclient.Msg{Subject: topic, Data: payload, Header: natsclient.Header{nats.KeyHeader: {"key-" + strconv.Itoa(i%64)}}}
			if _, err := js.PublishMsgAsync(msg); err != nil {
				b.Fatal(err)
			}
			if (i+1)%window == 0 || i == b.N-1 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					b.Fatal("publishing the benchmark's messages took over a minute")
				}
			}
		}
		return topic
	}

	raw := func(b *testing.B) {
		tr := nats.New(url, nil)
		defer tr.Close()
		topic := prepare(b, tr)
		ctx := context.Background()
		cons, err := tr.JetStream().CreateOrUpdateConsumer(ctx, nats.StreamName(topic), jetstream.ConsumerConfig{
			Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var keys int
		for got := 0; got < b.N; {
			batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			for m := range batch.Messages() {
				meta, err := m.Metadata()
				if err != nil {
					b.Fatal(err)
				}
				keys += len(m.Headers().Get(nats.KeyHeader)) + int(meta.Sequence.Stream&1)
				if err := m.Ack(); err != nil {
					b.Fatal(err)
				}
				got++
				if got == b.N {
					break // not waiting for the rest of the last batch's expiry
				}
			}
		}
		b.StopTimer()
		if keys == 0 {
			b.Fatal("no keys read")
		}
	}

	transport := func(b *testing.B) {
		tr := nats.New(url, nil)
		defer tr.Close()
		topic := prepare(b, tr)
		ctx := context.Background()
		c, err := tr.Consume(ctx, stream.ConsumerConfig{Group: "transport", Topics: []string{topic}})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		tp := stream.TopicPartition{Topic: topic}
		buf := make([]*stream.Record, 0, 512)
		b.ReportAllocs()
		b.ResetTimer()
		var keys int
		for got := 0; got < b.N; {
			records, err := c.Poll(ctx, buf)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range records {
				keys += len(r.Key)
				c.Mark(tp, r.Offset+1)
				got++
			}
			buf = records[:0]
		}
		b.StopTimer()
		if keys == 0 {
			b.Fatal("no keys read")
		}
	}

	// Rounds interleaved R T R T R T in one run (go test's -count repeats
	// each sub-benchmark back to back instead).
	for range 3 {
		b.Run("raw", raw)
		b.Run("transport", transport)
	}
}
