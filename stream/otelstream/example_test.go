package otelstream_test

import (
	"context"
	"fmt"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/otelstream"
)

// A handler's span continues the trace of the message it handles, and
// what it publishes continues the handler's span.
func Example() {
	recorder := tracetest.NewSpanRecorder()
	tracing := otelstream.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)), nil)

	store := memory.New()
	app := stream.New(store.Connect(), stream.Group("g"), stream.Use(tracing.Middleware()), tracing.Propagate())
	stream.Handle(app, "orders", func(ctx context.Context, v string) (string, error) {
		return "receipt for " + v, nil
	}, stream.PublishTo("receipts"))
	done := make(chan struct{})
	stream.Consume(app, "receipts", func(ctx context.Context, v string) error {
		close(done)
		return nil
	})
	_ = store.Publish(context.Background(), &stream.Record{Topic: "orders", Partition: stream.AnyPartition, Value: []byte("o1"),
		Headers: []stream.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}})

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-done
	cancel()
	<-ran
	// Sorted: the receipts span may end before the orders span that
	// published its message (they run on two partition workers).
	var lines []string
	for _, s := range recorder.Ended() {
		lines = append(lines, fmt.Sprint(s.Name(), " trace ", s.SpanContext().TraceID()))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// orders process trace 0af7651916cd43dd8448eb211c80319c
	// receipts process trace 0af7651916cd43dd8448eb211c80319c
}
