// Package otelstream traces stream handlers with OpenTelemetry and
// propagates the trace context in record headers (W3C traceparent and
// tracestate by default), so that a trace follows a message from the
// producer through every handler that republishes it.
//
//	tracing := otelstream.New(nil, nil) // the global TracerProvider, W3C trace context
//	app := stream.New(tr, stream.Use(tracing.Middleware()), tracing.Propagate())
//
// It lives apart from package stream so that applications without
// OpenTelemetry do not link it.
package otelstream

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sushka-io/sushka/stream"
)

// Tracing holds the tracer and the propagator.
type Tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// New returns tracing with provider (nil: otel.GetTracerProvider()) and
// propagator (nil: W3C trace context, propagation.TraceContext).
func New(provider trace.TracerProvider, propagator propagation.TextMapPropagator) *Tracing {
	if provider == nil {
		provider = otel.GetTracerProvider()
	}
	if propagator == nil {
		propagator = propagation.TraceContext{}
	}
	return &Tracing{tracer: provider.Tracer("github.com/sushka-io/sushka/stream"), propagator: propagator}
}

// Middleware starts a consumer span per delivery, a child of the trace
// context found in the (first) record's headers, named "<topic> process"
// with the messaging attributes of the OpenTelemetry semantic conventions;
// a failure sets the span's status to error. The handler runs under the
// span's context, so what it publishes carries it on (with Propagate).
func (t *Tracing) Middleware() stream.Middleware {
	return func(next stream.HandlerFunc) stream.HandlerFunc {
		return func(ctx context.Context, records []*stream.Record) error {
			r := records[0]
			parent := t.propagator.Extract(ctx, headerCarrier{r})
			ctx, span := t.tracer.Start(parent, r.Topic+" process",
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("messaging.system", "kafka"),
					attribute.String("messaging.operation.type", "process"),
					attribute.String("messaging.destination.name", r.Topic),
					attribute.String("messaging.destination.partition.id", strconv.Itoa(int(r.Partition))),
					attribute.Int64("messaging.kafka.offset", r.Offset),
					attribute.Int("messaging.batch.message_count", len(records)),
					attribute.Int("stream.attempt", stream.Attempt(ctx)),
				))
			defer span.End()
			err := next(ctx, records)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// Propagate is the App option that writes the publishing context's trace
// context into the headers of every record the App publishes.
func (t *Tracing) Propagate() stream.Option {
	return stream.BeforePublish(func(ctx context.Context, rec *stream.Record) {
		t.propagator.Inject(ctx, headerCarrier{rec})
	})
}

// headerCarrier is a propagation.TextMapCarrier over a record's headers.
type headerCarrier struct{ r *stream.Record }

func (c headerCarrier) Get(key string) string {
	v, _ := c.r.Header(key)
	return string(v)
}

// Set replaces the header key (a republished record may carry the
// incoming one).
func (c headerCarrier) Set(key, value string) {
	for i := range c.r.Headers {
		if c.r.Headers[i].Key == key {
			// A copy: the header slice may be shared with a delivered record.
			headers := append([]stream.Header(nil), c.r.Headers...)
			headers[i].Value = []byte(value)
			c.r.Headers = headers
			return
		}
	}
	c.r.Headers = append(c.r.Headers[:len(c.r.Headers):len(c.r.Headers)], stream.Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		keys[i] = h.Key
	}
	return keys
}
