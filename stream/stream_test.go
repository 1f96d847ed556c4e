package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/streamtest"
)

type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type Receipt struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

func billing(tr stream.Transport, opts ...stream.Option) *stream.App {
	app := stream.New(tr, append(opts, stream.Group("billing"))...)
	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{OrderID: o.ID, Total: o.Amount * 2}, nil
	}, stream.PublishTo("receipts"))
	return app
}

func TestHandlePublishesTheResultBeforeAcknowledging(t *testing.T) {
	memoryOnly(t)
	h := streamtest.New(t, billing)
	streamtest.Publish(h, "orders", []byte("k1"), Order{ID: "o1", Amount: 21})
	acked := h.WaitAcked("orders", 1)
	published := h.Published("receipts")
	if len(published) != 1 {
		t.Fatalf("published %d receipts when the order was acknowledged, want 1", len(published))
	}
	var r Receipt
	if err := json.Unmarshal(published[0].Value, &r); err != nil || r != (Receipt{OrderID: "o1", Total: 42}) {
		t.Fatalf("receipt %q (%v)", published[0].Value, err)
	}
	if string(published[0].Key) != "k1" {
		t.Fatalf("receipt key %q, want the order's key k1", published[0].Key)
	}
	if acked[0].Offset != 0 {
		t.Fatalf("acked offset %d", acked[0].Offset)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := h.Memory.Committed("billing", stream.TopicPartition{Topic: "orders"}); got != 1 {
		t.Fatalf("committed %d after shutdown, want 1", got)
	}
}

func TestMetadataFromTheContext(t *testing.T) {
	type seen struct {
		key, header string
		partition   int32
		offset      int64
		timestamp   time.Time
		attempt     int
	}
	got := make(chan seen, 2)
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			r := stream.Current(ctx)
			hv, _ := r.Header("trace")
			got <- seen{string(r.Key), string(hv), r.Partition, r.Offset, r.Timestamp, stream.Attempt(ctx)}
			return nil
		})
		return app
	})
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.PublishRecord(&stream.Record{Topic: "in", Key: []byte("a"), Value: []byte("x"), Partition: stream.AnyPartition})
	h.PublishRecord(&stream.Record{Topic: "in", Key: []byte("b"), Value: []byte("y"), Partition: stream.AnyPartition,
		Headers: []stream.Header{{Key: "trace", Value: []byte("t1")}}, Timestamp: ts})
	first, second := <-got, <-got
	if first.key != "a" || first.offset != 0 || first.attempt != 1 || first.timestamp.IsZero() {
		t.Fatalf("first: %+v", first)
	}
	if second.key != "b" || second.header != "t1" || second.offset != 1 || !second.timestamp.Equal(ts) {
		t.Fatalf("second: %+v", second)
	}
	if stream.Current(context.Background()) != nil || stream.Attempt(context.Background()) != 0 {
		t.Fatal("metadata outside a handler")
	}
}

func TestDecodeErrorGoesToTheErrorPath(t *testing.T) {
	var handled atomic.Int32
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "orders", func(ctx context.Context, o Order) error {
			handled.Add(1)
			return nil
		}, stream.WithAckPolicy(stream.AckAfterHandle))
		return app
	})
	h.PublishRecord(&stream.Record{Topic: "orders", Value: []byte("{not json"), Partition: stream.AnyPartition})
	streamtest.Publish(h, "orders", nil, Order{ID: "ok"})
	h.WaitAcked("orders", 2)
	if handled.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (only for the valid order)", handled.Load())
	}
	errs := h.Errors()
	var de *stream.DecodeError
	if len(errs) != 1 || !errors.As(errs[0], &de) || de.Offset != 0 {
		t.Fatalf("errors %v, want one DecodeError at offset 0", errs)
	}
}

func TestNackOnErrorRedeliversInOrder(t *testing.T) {
	memoryOnly(t)
	var calls []string
	failedOnce := false
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			calls = append(calls, v) // one partition, one lane: sequential
			if v == "b" && !failedOnce {
				failedOnce = true
				if stream.Attempt(ctx) != 1 {
					t.Errorf("first attempt reported as %d", stream.Attempt(ctx))
				}
				return errors.New("transient")
			}
			if v == "b" && stream.Attempt(ctx) != 2 {
				t.Errorf("redelivery reported as attempt %d", stream.Attempt(ctx))
			}
			return nil
		})
		return app
	})
	for _, v := range []string{"a", "b", "c"} {
		streamtest.Publish(h, "in", nil, v)
	}
	h.WaitAcked("in", 3)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls, ","); got != "a,b,b,c" {
		t.Fatalf("calls %s, want a,b,b,c", got)
	}
	if got := h.Memory.Committed("g", stream.TopicPartition{Topic: "in"}); got != 3 {
		t.Fatalf("committed %d", got)
	}
}

func TestAckPolicies(t *testing.T) {
	memoryOnly(t)
	boom := errors.New("boom")
	for _, tc := range []struct {
		policy        stream.AckPolicy
		wantCommitted int64 // after a, fail(b), c with b failing every time
		wantCalls     string
	}{
		{stream.AckFirst, 3, "a,b,c"},
		{stream.AckAfterHandle, 3, "a,b,c"},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			var calls []string
			var ackedBeforeHandler []bool
			var h *streamtest.Harness
			h = streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
				app := stream.New(tr, append(opts, stream.Group("g"))...)
				stream.Consume(app, "in", func(ctx context.Context, v string) error {
					calls = append(calls, v)
					ackedBeforeHandler = append(ackedBeforeHandler, len(h.Acked("in")) == len(calls))
					if v == "b" {
						return boom
					}
					return nil
				}, stream.WithAckPolicy(tc.policy))
				return app
			})
			for _, v := range []string{"a", "b", "c"} {
				streamtest.Publish(h, "in", nil, v)
			}
			h.WaitAcked("in", 3)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(calls, ","); got != tc.wantCalls {
				t.Fatalf("calls %s", got)
			}
			if got := h.Memory.Committed("g", stream.TopicPartition{Topic: "in"}); got != tc.wantCommitted {
				t.Fatalf("committed %d, want %d", got, tc.wantCommitted)
			}
			for i, before := range ackedBeforeHandler {
				if before != (tc.policy == stream.AckFirst) {
					t.Fatalf("message %d acknowledged before its handler: %v under %v", i, before, tc.policy)
				}
			}
			if len(h.Failed("in")) != 1 {
				t.Fatalf("failures reported: %d", len(h.Failed("in")))
			}
		})
	}
}

func TestManualAck(t *testing.T) {
	memoryOnly(t)
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond))...)
		nacked := false
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			switch {
			case v == "nack-once" && !nacked:
				nacked = true
				stream.Nack(ctx)
			case v == "leave":
				// neither: finished, not acknowledged by itself
			default:
				stream.Ack(ctx)
			}
			return nil
		}, stream.WithAckPolicy(stream.Manual))
		return app
	})
	tp := stream.TopicPartition{Topic: "in"}
	streamtest.Publish(h, "in", nil, "ack")
	streamtest.Publish(h, "in", nil, "nack-once")
	h.WaitAcked("in", 2)
	if got := h.Memory.Committed("g", tp); got != 2 {
		t.Fatalf("committed %d after ack, nack then ack: want 2", got)
	}
	if n := len(h.Handled("in")); n != 3 {
		t.Fatalf("handled %d times, want 3 (the nacked one twice)", n)
	}
	streamtest.Publish(h, "in", nil, "leave")
	h.Wait(stream.EventHandled, "in", 4)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := h.Memory.Committed("g", tp); got != 2 {
		t.Fatalf("committed %d: a message left without Ack must not be committed by itself", got)
	}
}

func TestPublisherWithKeyHeadersPartition(t *testing.T) {
	var pub *stream.Publisher[Receipt]
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		pub = stream.NewPublisher[Receipt](app, "receipts", nil)
		stream.Consume(app, "orders", func(ctx context.Context, o Order) error {
			p := int32(0)
			return pub.PublishWith(ctx, stream.Envelope{
				Key:       []byte(o.ID),
				Headers:   []stream.Header{{Key: "source", Value: []byte("billing")}},
				Partition: &p,
			}, Receipt{OrderID: o.ID})
		})
		return app
	})
	streamtest.Publish(h, "orders", nil, Order{ID: "o7"})
	h.WaitAcked("orders", 1)
	got := h.Published("receipts")
	if len(got) != 1 || string(got[0].Key) != "o7" || got[0].Partition != 0 {
		t.Fatalf("published %+v", got)
	}
	if v, _ := (&got[0]).Header("source"); string(v) != "billing" {
		t.Fatalf("header source=%q", v)
	}
	// Outside any handler too.
	if err := pub.Publish(context.Background(), Receipt{OrderID: "direct"}); err != nil {
		t.Fatal(err)
	}
	h.WaitPublished("receipts", 2)
}

func TestAFailedPublishIsAFailedMessage(t *testing.T) {
	memoryOnly(t)
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		return billing(tr, append(opts, stream.RedeliveryBackoff(time.Millisecond))...)
	})
	var failures atomic.Int32
	h.Memory.FailPublish(func(r *stream.Record) error {
		if r.Topic == "receipts" && failures.Add(1) <= 2 {
			return errors.New("broker unavailable")
		}
		return nil
	})
	streamtest.Publish(h, "orders", nil, Order{ID: "o1"})
	h.WaitAcked("orders", 1)
	if len(h.Failed("orders")) != 2 || len(h.Published("receipts")) != 1 {
		t.Fatalf("failed %d, published %d: want the order failed twice, then its receipt published once",
			len(h.Failed("orders")), len(h.Published("receipts")))
	}
}

func TestRegistrationErrorsReturnedByRun(t *testing.T) {
	app := stream.New(memoryTransport())
	stream.Consume(app, "t", func(context.Context, string) error { return nil })
	stream.Consume(app, "t", func(context.Context, string) error { return nil })
	stream.Consume(app, "u", func(context.Context, Order) error { return nil }, stream.InputCodec[string](stream.String{}))
	err := app.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "two handlers") || !strings.Contains(err.Error(), "codec") {
		t.Fatalf("Run: %v", err)
	}
}
