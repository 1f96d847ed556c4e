package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/streamtest"
)

func newHarness(t *testing.T, opts ...streamtest.Option) *streamtest.Harness {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return streamtest.New(t, func(tr stream.Transport, extra ...stream.Option) *stream.App {
		app, err := NewApp(tr, logger, prometheus.NewRegistry(), extra...)
		if err != nil {
			t.Fatal(err)
		}
		return app
	}, opts...)
}

// TestService runs the service's whole path, once in memory and once
// against an in-process Sushka (the same test, one switch).
func TestService(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []streamtest.Option
	}{
		{"memory", nil},
		{"sushka", []streamtest.Option{streamtest.Real()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.name == "sushka" && testing.Short() {
				t.Skip("starts a broker")
			}
			h := newHarness(t, mode.opts...)
			streamtest.Publish(h, OrdersTopic, []byte("c1"), Order{ID: "o1", Customer: "c1",
				Items: []Item{{SKU: "tea", Quantity: 2, PriceCents: 350}, {SKU: "cake", Quantity: 1, PriceCents: 500}}})
			streamtest.Publish(h, OrdersTopic, []byte("c2"), Order{ID: "o2", Customer: "c2",
				Items: []Item{{SKU: "tea", Quantity: 0, PriceCents: 350}}})
			h.PublishRecord(&stream.Record{Topic: OrdersTopic, Partition: stream.AnyPartition, Key: []byte("c3"), Value: []byte("not json")})
			h.WaitAcked(OrdersTopic, 3)

			receipts := h.Published(ReceiptsTopic)
			if len(receipts) != 1 {
				t.Fatalf("%d receipts, want 1", len(receipts))
			}
			var r Receipt
			if err := json.Unmarshal(receipts[0].Value, &r); err != nil || r != (Receipt{OrderID: "o1", Customer: "c1", TotalCents: 1200}) {
				t.Fatalf("receipt %s (%v)", receipts[0].Value, err)
			}
			if string(receipts[0].Key) != "c1" {
				t.Fatalf("receipt keyed %q, want the customer", receipts[0].Key)
			}

			letters := h.Published(DeadLetters)
			if len(letters) != 2 {
				t.Fatalf("%d dead letters, want the invalid order and the undecodable one", len(letters))
			}
			reasons := map[string]string{}
			for _, l := range letters {
				why, _ := (&l).Header(stream.HeaderDeadLetterError)
				attempts, _ := (&l).Header(stream.HeaderDeadLetterAttempts)
				if string(attempts) != "1" {
					t.Fatalf("dead letter %s after %s attempts: a permanent failure is not retried", l.Key, attempts)
				}
				reasons[string(l.Key)] = string(why)
			}
			if !strings.Contains(reasons["c2"], "invalid order") || !strings.Contains(reasons["c3"], "decode") {
				t.Fatalf("dead-letter reasons %v", reasons)
			}
		})
	}
}
