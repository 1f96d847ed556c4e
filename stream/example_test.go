package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

// runUntil runs app until done is closed, then shuts it down.
func runUntil(app *stream.App, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-done
	cancel()
	if err := <-ran; err != nil {
		fmt.Println("run:", err)
	}
}

func publish(tr *memory.Transport, topic, key, value string) {
	rec := stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: []byte(key), Value: []byte(value)}
	if err := tr.Publish(context.Background(), &rec); err != nil {
		panic(err)
	}
}

// A handler is a typed function; its result is published to receipts
// before the order is acknowledged.
func Example() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("billing"))
	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{OrderID: o.ID, Total: o.Amount * 2}, nil
	}, stream.PublishTo("receipts"))

	done := make(chan struct{})
	stream.Consume(app, "receipts", func(ctx context.Context, r Receipt) error {
		fmt.Printf("receipt for %s: %d (key %s)\n", r.OrderID, r.Total, stream.Current(ctx).Key)
		close(done)
		return nil
	})
	publish(tr, "orders", "customer-7", `{"id":"o1","amount":21}`)
	runUntil(app, done)
	fmt.Println("committed:", tr.Committed("billing", stream.TopicPartition{Topic: "orders"}))
	// Output:
	// receipt for o1: 42 (key customer-7)
	// committed: 1
}

// The record's metadata is read from the handler's context.
func ExampleCurrent() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("g"))
	done := make(chan struct{})
	stream.Consume(app, "events", func(ctx context.Context, v string) error {
		r := stream.Current(ctx)
		source, _ := r.Header("source")
		fmt.Printf("%s: key=%s partition=%d offset=%d source=%s attempt=%d\n",
			v, r.Key, r.Partition, r.Offset, source, stream.Attempt(ctx))
		close(done)
		return nil
	})
	rec := stream.Record{Topic: "events", Partition: stream.AnyPartition, Key: []byte("k"), Value: []byte("hello"),
		Headers: []stream.Header{{Key: "source", Value: []byte("web")}}}
	_ = tr.Publish(context.Background(), &rec)
	runUntil(app, done)
	// Output: hello: key=k partition=0 offset=0 source=web attempt=1
}

// With the default policy, NackOnError, a failed message is delivered
// again; its offset is committed only after it succeeds.
func ExampleNackOnError() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond),
		stream.OnError(func(ctx context.Context, _ []*stream.Record, err error) { fmt.Println("error:", err) }))
	done := make(chan struct{})
	stream.Consume(app, "jobs", func(ctx context.Context, v string) error {
		if stream.Attempt(ctx) == 1 {
			return errors.New("flaky")
		}
		fmt.Println("done", v, "at attempt", stream.Attempt(ctx))
		close(done)
		return nil
	})
	publish(tr, "jobs", "", "j1")
	runUntil(app, done)
	// Output:
	// error: flaky
	// done j1 at attempt 2
}

// Manual acknowledgement: the handler decides.
func ExampleAck() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("g"))
	done := make(chan struct{})
	stream.Consume(app, "jobs", func(ctx context.Context, v string) error {
		if v == "keep" {
			stream.Ack(ctx)
		}
		if v == "last" {
			close(done)
		}
		return nil
	}, stream.WithAckPolicy(stream.Manual))
	publish(tr, "jobs", "", "keep")
	publish(tr, "jobs", "", "last") // not acknowledged: delivered again after a restart
	runUntil(app, done)
	fmt.Println("committed:", tr.Committed("g", stream.TopicPartition{Topic: "jobs"}))
	// Output: committed: 1
}

// A Publisher sends typed values with a key, headers or a partition, from
// a handler or from anywhere.
func ExampleNewPublisher() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("g"))
	audit := stream.NewPublisher[string](app, "audit", nil)
	done := make(chan struct{})
	stream.Consume(app, "orders", func(ctx context.Context, o Order) error {
		defer close(done)
		return audit.PublishWith(ctx, stream.Envelope{Key: []byte(o.ID),
			Headers: []stream.Header{{Key: "by", Value: []byte("billing")}}}, "seen "+o.ID)
	})
	publish(tr, "orders", "", `{"id":"o9"}`)
	runUntil(app, done)
	for _, r := range tr.Records("audit") {
		by, _ := r.Header("by")
		fmt.Printf("%s key=%s by=%s\n", r.Value, r.Key, by)
	}
	// Output: seen o9 key=o9 by=billing
}

// Retry inside DeadLetter: a message that keeps failing is parked in a
// dead-letter topic with why, and the partition moves on.
func ExampleDeadLetter() {
	tr := memory.New()
	app := stream.New(tr.Connect(), stream.Group("g"))
	done := make(chan struct{})
	stream.Consume(app, "orders", func(ctx context.Context, o Order) error {
		if o.ID == "ok" {
			close(done)
			return nil
		}
		return errors.New("out of stock")
	}, stream.WithMiddleware(
		stream.DeadLetter(app.Producer(), "orders.dlq"),
		stream.Retry(stream.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond}),
	))
	publish(tr, "orders", "", `{"id":"o1"}`)
	publish(tr, "orders", "", `{"id":"ok"}`)
	runUntil(app, done)
	for _, r := range tr.Records("orders.dlq") {
		why, _ := r.Header(stream.HeaderDeadLetterError)
		attempts, _ := r.Header(stream.HeaderDeadLetterAttempts)
		offset, _ := r.Header(stream.HeaderDeadLetterOffset)
		fmt.Printf("%s: %s after %s attempts (offset %s)\n", r.Value, why, attempts, offset)
	}
	// Output: {"id":"o1"}: out of stock after 3 attempts (offset 0)
}

// A batch handler gets up to BatchMaxCount records of one partition.
func ExampleHandleBatch() {
	tr := memory.New()
	for i := range 5 {
		publish(tr, "clicks", "", fmt.Sprint(i))
	}
	app := stream.New(tr.Connect(), stream.Group("g"))
	done := make(chan struct{})
	total := 0
	stream.HandleBatch(app, "clicks", func(ctx context.Context, clicks []string) error {
		fmt.Println(clicks)
		if total += len(clicks); total == 5 {
			close(done)
		}
		return nil
	}, stream.BatchMaxCount(2), stream.BatchMaxWait(200*time.Millisecond))
	runUntil(app, done)
	// Output:
	// [0 1]
	// [2 3]
	// [4]
}

// KeyConcurrency handles different keys of one partition at once, each
// key in order.
func ExampleKeyConcurrency() {
	tr := memory.New()
	for i := range 6 {
		publish(tr, "payments", fmt.Sprint("account-", i%2), fmt.Sprint(i))
	}
	app := stream.New(tr.Connect(), stream.Group("g"))
	done := make(chan struct{})
	seen := make(chan string, 6)
	var handled atomic.Int32
	stream.Consume(app, "payments", func(ctx context.Context, v string) error {
		seen <- string(stream.Current(ctx).Key) + ":" + v
		if handled.Add(1) == 6 {
			close(done)
		}
		return nil
	}, stream.KeyConcurrency(2))
	runUntil(app, done)
	close(seen)
	perKey := map[string][]string{}
	for s := range seen {
		perKey[s[:9]] = append(perKey[s[:9]], s[10:])
	}
	fmt.Println(perKey["account-0"], perKey["account-1"])
	// Output: [0 2 4] [1 3 5]
}
