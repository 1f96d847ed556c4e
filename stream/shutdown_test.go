package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

// TestShutdownDeadline: a handler that ignores its context past twice the
// shutdown timeout is abandoned: Run returns ErrShutdownTimeout, and the
// transport stays open, because that handler may still publish.
func TestShutdownDeadline(t *testing.T) {
	store := memory.New()
	app := stream.New(store, stream.Group("g"), stream.ShutdownTimeout(30*time.Millisecond))
	entered, release := make(chan struct{}), make(chan struct{})
	cancelled := make(chan bool, 1)
	stream.Consume(app, "in", func(ctx context.Context, v string) error {
		close(entered)
		<-release
		cancelled <- ctx.Err() != nil
		return nil
	})
	if err := store.Publish(context.Background(), &stream.Record{Topic: "in", Partition: stream.AnyPartition, Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-entered
	start := time.Now()
	cancel()
	err := <-ran
	if !errors.Is(err, stream.ErrShutdownTimeout) {
		t.Fatalf("Run: %v, want ErrShutdownTimeout", err)
	}
	if waited := time.Since(start); waited < 60*time.Millisecond {
		t.Fatalf("Run gave up after %v, before twice the shutdown timeout", waited)
	}
	if err := app.Producer().Publish(context.Background(), &stream.Record{Topic: "out", Partition: stream.AnyPartition}); err != nil {
		t.Fatalf("the transport was closed under a running handler: %v", err)
	}
	if got := store.Committed("g", stream.TopicPartition{Topic: "in"}); got != -1 {
		t.Fatalf("committed %d for a message whose handler has not finished", got)
	}
	close(release)
	if !<-cancelled {
		t.Fatal("the abandoned handler's context was not cancelled at the deadline")
	}
	// When it returns, what it finished is committed and the transport
	// closes after it.
	deadline := time.Now().Add(5 * time.Second)
	for app.Producer().Publish(context.Background(), &stream.Record{Topic: "out", Partition: stream.AnyPartition}) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the transport stayed open after the abandoned handler returned")
		}
		time.Sleep(time.Millisecond)
	}
	if got := store.Committed("g", stream.TopicPartition{Topic: "in"}); got != 1 {
		t.Fatalf("committed %d after the late handler succeeded, want 1", got)
	}
}

// TestSlowRevokeCancelsOnlyItsPartitions: a rebalance that gives up after
// the shutdown timeout cancels the revoked partition's handler only; the
// partitions the App keeps go on with live contexts.
func TestSlowRevokeCancelsOnlyItsPartitions(t *testing.T) {
	store := memory.New(memory.Partitions(2))
	app := stream.New(store.Connect(), stream.Group("g"), stream.ShutdownTimeout(20*time.Millisecond))
	blocked, release := make(chan struct{}), make(chan struct{})
	contextAlive := make(chan bool, 1)
	stream.Consume(app, "in", func(ctx context.Context, v string) error {
		switch stream.Current(ctx).Partition {
		case 0:
			close(blocked)
			<-release // ignores ctx
		case 1:
			contextAlive <- ctx.Err() == nil
		}
		return nil
	})
	p0, p1 := int32(0), int32(1)
	publishTo := func(p int32) {
		if err := store.Publish(context.Background(), &stream.Record{Topic: "in", Partition: p, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	publishTo(p0)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-blocked
	start := time.Now()
	store.Revoke("g", []stream.TopicPartition{{Topic: "in", Partition: 0}})
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("revoke returned after %v, before twice the shutdown timeout", waited)
	}
	publishTo(p1)
	if !<-contextAlive {
		t.Fatal("a handler of a kept partition ran with a cancelled context after another partition's slow revoke")
	}
	close(release)
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// TestMarkAfterRevocationIsDropped: a handler abandoned at the revocation
// deadline that ignores its context and then succeeds must not mark its
// offset: the partition may be another member's by then, and a mark would
// be committed over the new owner's progress.
func TestMarkAfterRevocationIsDropped(t *testing.T) {
	store := memory.New(memory.Partitions(1))
	app := stream.New(store.Connect(), stream.Group("g"), stream.ShutdownTimeout(10*time.Millisecond))
	blocked, release := make(chan struct{}), make(chan struct{})
	stream.Consume(app, "in", func(ctx context.Context, v string) error {
		close(blocked)
		<-release // ignores ctx, then succeeds
		return nil
	})
	if err := store.Publish(context.Background(), &stream.Record{Topic: "in", Partition: 0, Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-blocked
	tp := stream.TopicPartition{Topic: "in", Partition: 0}
	store.Revoke("g", []stream.TopicPartition{tp}) // returns at the deadline, the handler still running
	close(release)
	cancel()
	<-ran // shutdown waits for the abandoned handler: its mark, if any, is made by now
	if got := store.Committed("g", tp); got > 0 {
		t.Fatalf("committed %d: the handler abandoned at the revocation marked its offset after the partition was revoked", got)
	}
}
