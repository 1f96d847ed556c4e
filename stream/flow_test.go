package stream_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// TestBackpressurePausesThePartition: with MaxInFlight 8 and a handler that
// is blocked, the worker pauses the partition's fetching instead of
// buffering the other 92 records, and resumes once it drains.
func TestBackpressurePausesThePartition(t *testing.T) {
	memoryOnly(t)
	release := make(chan struct{})
	var handled atomic.Int32
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			<-release
			handled.Add(1)
			return nil
		}, stream.MaxInFlight(8))
		return app
	})
	tp := stream.TopicPartition{Topic: "in"}
	for i := range 100 {
		streamtest.Publish(h, "in", nil, strconv.Itoa(i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !h.Memory.Paused("g", tp) {
		if time.Now().After(deadline) {
			t.Fatal("the partition was never paused while its handler was blocked")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	h.WaitAcked("in", 100)
	if h.Memory.Paused("g", tp) {
		t.Fatal("the partition stayed paused after it drained")
	}
	if handled.Load() != 100 {
		t.Fatalf("handled %d", handled.Load())
	}
}

func TestBatchBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []stream.HandlerOption
		sizes []int // of batches for 10 records of 100 bytes published before the App starts
	}{
		{"count", []stream.HandlerOption{stream.BatchMaxCount(4)}, []int{4, 4, 2}},
		{"bytes", []stream.HandlerOption{stream.BatchMaxCount(100), stream.BatchMaxBytes(350)}, []int{3, 3, 3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memory.New()
			value := make([]byte, 100)
			for range 10 {
				if err := store.Publish(context.Background(), &stream.Record{Topic: "in", Partition: stream.AnyPartition, Value: value}); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var sizes []int
			h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
				app := stream.New(tr, append(opts, stream.Group("g"))...)
				stream.HandleBatch(app, "in", func(ctx context.Context, batch [][]byte) error {
					mu.Lock()
					sizes = append(sizes, len(batch))
					mu.Unlock()
					return nil
				}, append(tc.opts, stream.BatchMaxWait(200*time.Millisecond))...)
				return app
			}, streamtest.WithTransport(store))
			h.WaitAcked("in", 10)
			mu.Lock()
			defer mu.Unlock()
			if len(sizes) != len(tc.sizes) {
				t.Fatalf("batch sizes %v, want %v", sizes, tc.sizes)
			}
			for i := range sizes {
				if sizes[i] != tc.sizes[i] {
					t.Fatalf("batch sizes %v, want %v", sizes, tc.sizes)
				}
			}
		})
	}
}

// TestBatchWaitHandsOverAPartialBatch: a batch that cannot fill is handed
// over after BatchMaxWait, not held.
func TestBatchWaitHandsOverAPartialBatch(t *testing.T) {
	got := make(chan int, 1)
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.HandleBatch(app, "in", func(ctx context.Context, batch []string) error {
			got <- len(batch)
			return nil
		}, stream.BatchMaxCount(50), stream.BatchMaxWait(30*time.Millisecond))
		return app
	})
	h.WaitStarted()
	start := time.Now()
	streamtest.Publish(h, "in", nil, "only")
	if n := <-got; n != 1 {
		t.Fatalf("batch of %d", n)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("partial batch handed over after %v, want about the 30 ms wait", waited)
	}
}

func TestBatchNackRedeliversTheWholeBatch(t *testing.T) {
	var mu sync.Mutex
	var batches [][]string
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond))...)
		stream.HandleBatch(app, "in", func(ctx context.Context, batch []string) error {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, append([]string(nil), batch...))
			if len(batches) == 1 {
				return errors.New("first batch fails")
			}
			return nil
		}, stream.BatchMaxCount(3), stream.BatchMaxWait(20*time.Millisecond))
		return app
	})
	for _, v := range []string{"a", "b", "c"} {
		streamtest.Publish(h, "in", nil, v)
	}
	h.WaitAcked("in", 3)
	mu.Lock()
	defer mu.Unlock()
	var all []string
	for _, b := range batches[1:] {
		all = append(all, b...)
	}
	if len(batches[0]) == 0 || all[0] != "a" || len(all) != 3 {
		t.Fatalf("batches %v: want the failed batch delivered again from its first record", batches)
	}
}

// TestKeyLanesNackDoesNotCommitPastTheFailure: with key lanes, a failure
// of one key's message holds the committed offset below it while other
// lanes finish, then everything from it is delivered again.
func TestKeyLanesNackDoesNotCommitPastTheFailure(t *testing.T) {
	memoryOnly(t)
	var failed atomic.Bool
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.RedeliveryBackoff(5*time.Millisecond))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			if v == "5" && failed.CompareAndSwap(false, true) {
				time.Sleep(20 * time.Millisecond) // let other lanes finish later offsets
				return errors.New("fail offset 5 once")
			}
			return nil
		}, stream.KeyConcurrency(4))
		return app
	})
	for i := range 20 {
		streamtest.Publish(h, "in", []byte("k"+strconv.Itoa(i)), strconv.Itoa(i))
	}
	h.WaitAcked("in", 20)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	// Had the mark moved past 5 while it was failing, 6 and later would
	// have been acknowledged before 5.
	acked := h.Acked("in")
	for i, r := range acked {
		if r.Offset != int64(i) {
			t.Fatalf("acknowledged offsets %v...: not every offset once in order", r.Offset)
		}
	}
	if got := h.Memory.Committed("g", stream.TopicPartition{Topic: "in"}); got != 20 {
		t.Fatalf("committed %d", got)
	}
}

func TestProtobufCodecs(t *testing.T) {
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		// The default codec of a protobuf message type is protobuf.
		stream.Handle(app, "names", func(ctx context.Context, v *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String("hello " + v.GetValue()), nil
		}, stream.PublishTo("greetings"),
			stream.OutputCodec(stream.Proto[wrapperspb.StringValue]()))
		return app
	})
	streamtest.Publish(h, "names", nil, wrapperspb.String("ann"))
	h.WaitAcked("names", 1)
	var out *wrapperspb.StringValue
	if err := stream.Proto[wrapperspb.StringValue]().Decode(h.Published("greetings")[0].Value, &out); err != nil || out.GetValue() != "hello ann" {
		t.Fatalf("greeting %v (%v)", out, err)
	}
}
