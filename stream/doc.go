// Package stream is Sushka's typed handler framework: plain Go functions
// as message handlers over a broker client, in the spirit of FastStream,
// Watermill and RustStream.
//
//	app := stream.New(kafka.Transport(kgo.SeedBrokers("127.0.0.1:9092")), stream.Group("billing"))
//	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
//		return Receipt{OrderID: o.ID}, nil
//	}, stream.PublishTo("receipts"))
//	err := app.Run(ctx) // blocks until ctx ends, then shuts down gracefully
//
// What the framework does for a handler:
//
//   - Decoding and encoding (Codec): JSON by default, protobuf for
//     proto.Message types, []byte and string passed through; a decode
//     failure is a *DecodeError on the error path, never a panic.
//   - Metadata from the context: Current(ctx) is the record (key, headers,
//     partition, offset, timestamp), Batch(ctx) a batch's records,
//     Attempt(ctx) the attempt.
//   - Acknowledgement (AckPolicy): by default a message is acknowledged,
//     and its offset committed, only after its handler succeeded and its
//     result was published; an error seeks back and redelivers it.
//     AckAfterHandle, AckFirst and Manual (Ack, Nack) are the others.
//   - Publishing: PublishTo publishes the result, keyed like the message;
//     a Publisher (or App.Producer) publishes from anywhere. Publishing
//     returns when the broker has the record, so what a handler publishes
//     is published before its message is acknowledged.
//   - Middlewares, ordinary functions around the handler: Recover, Timeout,
//     Retry, DeadLetter, Logging, Metrics; Use for all, WithMiddleware for
//     one handler.
//   - Ordered concurrency: partitions are handled concurrently, each in
//     order; KeyConcurrency spreads one partition over lanes by key, each
//     key in order. The committed offset never passes an unfinished
//     message. MaxInFlight bounds what a partition holds: at the bound its
//     fetching is paused (backpressure), not buffered.
//   - Batches: HandleBatch, per partition, bounded by BatchMaxCount,
//     BatchMaxBytes and BatchMaxWait.
//   - Graceful shutdown: when Run's context ends the App stops fetching,
//     lets in-flight handlers finish within ShutdownTimeout and publish
//     their results, commits what they acknowledged, closes the consumer,
//     and closes the transport (its producer) last.
//
// Description: App.AsyncAPI generates the AsyncAPI 3.0 document of the
// handlers and publishers (payload schemas from the Go types) and
// App.AsyncAPIHandler serves it; the document passes the AsyncAPI
// project's own parser (TestAsyncAPIValidatesWithTheAsyncAPIParser).
// Tracing: stream/otelstream (OpenTelemetry, W3C trace context in headers).
//
// Transports: stream/memory (in-process, for tests and for measuring the
// framework's own cost) and stream/kafka (franz-go; Sushka and any Kafka).
// A transport is supported when it passes streamtest.TestTransport, the one
// conformance suite. stream/streamtest runs an App in a test, in memory or
// (Real, STREAMTEST_REAL=1) against an in-process Sushka.
//
// Cost: on the memory transport the delivery path allocates nothing in
// the framework's own code (TestDeliveryAllocations gates every scenario
// at its declared floor: 0 for []byte handlers, with key lanes, batches
// and the Recover, Logging and Metrics middlewares; encoding/json's own
// allocations for JSON; the broker's copy when publishing).
package stream
