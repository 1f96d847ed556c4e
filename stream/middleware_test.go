package stream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/streamtest"
)

func TestRecoverTurnsAPanicIntoARedelivery(t *testing.T) {
	var calls atomic.Int32
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.Use(stream.Recover()), stream.RedeliveryBackoff(time.Millisecond))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			if calls.Add(1) == 1 {
				panic("first delivery")
			}
			return nil
		})
		return app
	})
	streamtest.Publish(h, "in", nil, "x")
	h.WaitAcked("in", 1)
	var pe *stream.PanicError
	if errs := h.Errors(); len(errs) != 1 || !errors.As(errs[0], &pe) || pe.Value != "first delivery" || len(pe.Stack) == 0 {
		t.Fatalf("errors %v, want one PanicError with its stack", errs)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want the panicked one redelivered once", calls.Load())
	}
}

func TestTimeoutCancelsTheHandlersContext(t *testing.T) {
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			if stream.Current(ctx) == nil {
				return errors.New("metadata lost under the timeout's context")
			}
			<-ctx.Done()
			return ctx.Err()
		}, stream.WithMiddleware(stream.Timeout(20*time.Millisecond)), stream.WithAckPolicy(stream.AckAfterHandle))
		return app
	})
	start := time.Now()
	streamtest.Publish(h, "in", nil, "x")
	h.WaitAcked("in", 1)
	if errs := h.Errors(); len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("errors %v, want the deadline", errs)
	}
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Fatalf("finished after %v, before the timeout", elapsed)
	}
}

func TestRetryBacksOffAndCountsAttempts(t *testing.T) {
	var attempts []int
	var times []time.Time
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			attempts = append(attempts, stream.Attempt(ctx))
			times = append(times, time.Now())
			if len(attempts) < 3 {
				return errors.New("not yet")
			}
			return nil
		}, stream.WithMiddleware(stream.Retry(stream.RetryPolicy{MaxAttempts: 5, InitialInterval: 10 * time.Millisecond, Jitter: 0.0001})))
		return app
	})
	streamtest.Publish(h, "in", nil, "x")
	h.WaitAcked("in", 1)
	if len(attempts) != 3 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
		t.Fatalf("attempts %v, want [1 2 3]", attempts)
	}
	// 10 ms, then 20 ms (multiplier 2), less a negligible jitter.
	if gap := times[1].Sub(times[0]); gap < 9*time.Millisecond {
		t.Fatalf("first retry after %v", gap)
	}
	if gap := times[2].Sub(times[1]); gap < 19*time.Millisecond {
		t.Fatalf("second retry after %v, want the doubled interval", gap)
	}
	if len(h.Errors()) != 0 {
		t.Fatalf("errors reached the error path: %v", h.Errors())
	}
}

func TestDeadLetterKeepsTheOriginalAndWhy(t *testing.T) {
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"))...)
		stream.Consume(app, "orders", func(ctx context.Context, o Order) error {
			return errors.New("out of stock")
		}, stream.WithMiddleware(
			stream.DeadLetter(app.Producer(), "orders.dlq"),
			stream.Retry(stream.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond}),
		))
		return app
	})
	h.PublishRecord(&stream.Record{Topic: "orders", Partition: stream.AnyPartition, Key: []byte("k"),
		Value: []byte(`{"id":"o1"}`), Headers: []stream.Header{{Key: "trace", Value: []byte("t")}}})
	h.PublishRecord(&stream.Record{Topic: "orders", Partition: stream.AnyPartition, Value: []byte(`not json`)})
	h.WaitAcked("orders", 2)
	letters := h.Published("orders.dlq")
	if len(letters) != 2 {
		t.Fatalf("%d dead letters, want 2", len(letters))
	}
	want := []map[string]string{
		{"trace": "t", stream.HeaderDeadLetterError: "out of stock", stream.HeaderDeadLetterAttempts: "3",
			stream.HeaderDeadLetterTopic: "orders", stream.HeaderDeadLetterPartition: "0", stream.HeaderDeadLetterOffset: "0"},
		// A decode error is not retried: one attempt.
		{stream.HeaderDeadLetterAttempts: "1", stream.HeaderDeadLetterOffset: "1"},
	}
	for i, l := range letters {
		for k, v := range want[i] {
			got, _ := (&l).Header(k)
			if k == stream.HeaderDeadLetterError {
				if !strings.Contains(string(got), v) {
					t.Fatalf("letter %d: %s=%q, want it to contain %q", i, k, got, v)
				}
				continue
			}
			if string(got) != v {
				t.Fatalf("letter %d: %s=%q, want %q", i, k, got, v)
			}
		}
	}
	if string(letters[0].Value) != `{"id":"o1"}` || string(letters[0].Key) != "k" || string(letters[1].Value) != "not json" {
		t.Fatalf("dead letters lost the original bytes: %q %q", letters[0].Value, letters[1].Value)
	}
	if got, _ := (&letters[1]).Header(stream.HeaderDeadLetterError); !strings.Contains(string(got), "decode") {
		t.Fatalf("decode failure reported as %q", got)
	}
}

func TestLoggingAndMetrics(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	metrics, err := stream.Metrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.Use(stream.Logging(logger), metrics))...)
		stream.Consume(app, "in", func(ctx context.Context, v string) error {
			if v == "bad" {
				return errors.New("bad value")
			}
			return nil
		}, stream.WithAckPolicy(stream.AckAfterHandle))
		return app
	})
	for _, v := range []string{"a", "bad", "c"} {
		streamtest.Publish(h, "in", nil, v)
	}
	h.WaitAcked("in", 3)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Count(out, "stream: delivered") != 2 || !strings.Contains(out, "stream: delivery failed") || !strings.Contains(out, "error=\"bad value\"") || !strings.Contains(out, "offset=1") {
		t.Fatalf("logs:\n%s", out)
	}
	if got := testutil.ToFloat64(metricVec(t, reg, "stream_deliveries_total", "ok")); got != 2 {
		t.Fatalf("ok deliveries %v", got)
	}
	if got := testutil.ToFloat64(metricVec(t, reg, "stream_deliveries_total", "error")); got != 1 {
		t.Fatalf("failed deliveries %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "stream_handler_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("duration series %d (%v)", n, err)
	}
	if _, err := stream.Metrics(reg); err == nil {
		t.Fatal("registering the metrics twice in one registry must fail")
	}
}

// metricVec finds the counter of name with result in reg.
func metricVec(t *testing.T, reg *prometheus.Registry, name, result string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "result" && l.GetValue() == result {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no %s{result=%q}", name, result)
	return nil
}
