package otelstream_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/otelstream"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// TestTraceFollowsTheMessage: the consumer span is a child of the trace in
// the incoming traceparent header, and the result published by the
// handler carries the consumer span as its parent.
func TestTraceFollowsTheMessage(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tracing := otelstream.New(provider, nil)
	h := streamtest.New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group("g"), stream.Use(tracing.Middleware()), tracing.Propagate(),
			stream.RedeliveryBackoff(1))...)
		failed := false
		stream.Handle(app, "orders", func(ctx context.Context, v string) (string, error) {
			if !failed {
				failed = true
				return "", errors.New("first attempt fails")
			}
			return "receipt " + v, nil
		}, stream.PublishTo("receipts"))
		return app
	})
	const incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	h.PublishRecord(&stream.Record{Topic: "orders", Partition: stream.AnyPartition, Value: []byte("o1"),
		Headers: []stream.Header{{Key: "traceparent", Value: []byte(incoming)}}})
	h.WaitAcked("orders", 1)

	spans := recorder.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per attempt (2)", len(spans))
	}
	wantTrace, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	wantParent, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	for _, s := range spans {
		if s.SpanContext().TraceID() != wantTrace || s.Parent().SpanID() != wantParent || s.SpanKind() != trace.SpanKindConsumer {
			t.Fatalf("span %s: trace %s parent %s kind %v", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind())
		}
		if s.Name() != "orders process" {
			t.Fatalf("span name %q", s.Name())
		}
	}
	if spans[0].Status().Code != codes.Error || spans[1].Status().Code == codes.Error {
		t.Fatalf("statuses %v, %v: want the failed attempt marked", spans[0].Status(), spans[1].Status())
	}
	receipts := h.Published("receipts")
	if len(receipts) != 1 {
		t.Fatalf("%d receipts", len(receipts))
	}
	tp, _ := (&receipts[0]).Header("traceparent")
	want := "00-" + wantTrace.String() + "-" + spans[1].SpanContext().SpanID().String() + "-01"
	if string(tp) != want {
		t.Fatalf("receipt traceparent %q, want %q (the successful consumer span)", tp, want)
	}
}
