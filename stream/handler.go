package stream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// HandlerFunc is a handler as middlewares see it: the raw records of one
// delivery (one record, or a batch for HandleBatch) in offset order. It
// runs under the delivery's context (Current, Batch, Attempt). Returning
// nil means the delivery succeeded; the ack policy decides what an error
// means.
type HandlerFunc func(ctx context.Context, records []*Record) error

// Middleware wraps a handler: an ordinary function from the next handler
// to a new one (Recover, Timeout, Retry, DeadLetter, Logging, Metrics).
type Middleware func(next HandlerFunc) HandlerFunc

// HandlerOption configures one handler.
type HandlerOption func(*handler)

// handler is one registered handler: its topic, its policy and a factory
// of its typed core. The core is built once per lane (newCore), so that
// every lane owns its decode target and encode buffer and delivery
// allocates nothing of its own.
type handler struct {
	topic       string
	ack         AckPolicy
	middlewares []Middleware
	publishTo   string
	keyLanes    int
	maxInFlight int
	batch       *batchConfig
	inCodec     any // a Codec[In] given by InputCodec, checked at registration
	outCodec    any
	newCore     func(a *App) HandlerFunc
	err         error
	// What the AsyncAPI document says about the handler.
	inType, outType    reflect.Type // outType nil: nothing published by returning
	inCodecDescriptor  any          // the codecs, for their content types
	outCodecDescriptor any
}

type batchConfig struct {
	maxCount int
	maxBytes int
	maxWait  time.Duration
}

// PublishTo publishes each handler result to topic, keyed like the
// message it answers, before that message is acknowledged. Without it a
// Handle result is discarded.
func PublishTo(topic string) HandlerOption { return func(h *handler) { h.publishTo = topic } }

// WithAckPolicy sets when the handler's messages are acknowledged
// (default NackOnError).
func WithAckPolicy(p AckPolicy) HandlerOption { return func(h *handler) { h.ack = p } }

// WithMiddleware adds middlewares around this handler, outermost first,
// inside the App's (Use).
func WithMiddleware(mw ...Middleware) HandlerOption {
	return func(h *handler) { h.middlewares = append(h.middlewares, mw...) }
}

// InputCodec decodes the handler's messages with c instead of the default
// for the type ([]byte, string, protobuf, else JSON). T must be the
// handler's input type; a mismatch is a registration error.
func InputCodec[T any](c Codec[T]) HandlerOption { return func(h *handler) { h.inCodec = c } }

// OutputCodec encodes the handler's results with c (see InputCodec).
func OutputCodec[T any](c Codec[T]) HandlerOption { return func(h *handler) { h.outCodec = c } }

// KeyConcurrency handles up to lanes messages of one partition at once,
// at most one per key: messages are spread over lanes by the hash of their
// key, and each lane is sequential, so messages with one key are handled
// in offset order. The committed offset still never passes a message that
// has not finished. The default, 1, handles a partition sequentially.
// Partitions are always handled concurrently with each other.
func KeyConcurrency(lanes int) HandlerOption { return func(h *handler) { h.keyLanes = lanes } }

// MaxInFlight bounds the messages of one partition that are fetched but
// not yet acknowledged (default 256). At the bound the partition's
// fetching is paused until half of them are done: backpressure instead of
// an unbounded buffer.
func MaxInFlight(n int) HandlerOption { return func(h *handler) { h.maxInFlight = n } }

// BatchMaxCount, BatchMaxBytes and BatchMaxWait bound a HandleBatch batch
// (defaults 100 records, 1 MiB of values, 100 ms after its first record):
// a batch is handed over when it is full by either bound, or when the
// wait has passed and the partition has nothing more fetched. One record
// larger than the byte bound forms a batch of its own.
func BatchMaxCount(n int) HandlerOption { return func(h *handler) { h.batchConfig().maxCount = n } }

// BatchMaxBytes: see BatchMaxCount.
func BatchMaxBytes(n int) HandlerOption { return func(h *handler) { h.batchConfig().maxBytes = n } }

// BatchMaxWait: see BatchMaxCount.
func BatchMaxWait(d time.Duration) HandlerOption {
	return func(h *handler) { h.batchConfig().maxWait = d }
}

func (h *handler) batchConfig() *batchConfig {
	if h.batch == nil {
		h.batch = &batchConfig{maxCount: 100, maxBytes: 1 << 20, maxWait: 100 * time.Millisecond}
	}
	return h.batch
}

func newHandler(topic string, opts []HandlerOption) *handler {
	h := &handler{topic: topic, keyLanes: 1, maxInFlight: 256}
	for _, o := range opts {
		o(h)
	}
	switch {
	case topic == "":
		h.fail(errors.New("stream: handler with an empty topic"))
	case h.keyLanes < 1:
		h.fail(fmt.Errorf("stream: %s: KeyConcurrency must be at least 1", topic))
	case h.maxInFlight < h.keyLanes:
		h.fail(fmt.Errorf("stream: %s: MaxInFlight (%d) below KeyConcurrency (%d)", topic, h.maxInFlight, h.keyLanes))
	case h.ack > Manual:
		h.fail(fmt.Errorf("stream: %s: unknown ack policy %d", topic, h.ack))
	}
	return h
}

func (h *handler) fail(err error) {
	if h.err == nil {
		h.err = err
	}
}

func codecFor[T any](h *handler, given any, role string) Codec[T] {
	if given == nil {
		return DefaultCodec[T]()
	}
	c, ok := given.(Codec[T])
	if !ok {
		var zero T
		h.fail(fmt.Errorf("stream: %s: the %s codec %T does not encode %T", h.topic, role, given, zero))
		return DefaultCodec[T]()
	}
	return c
}

func (h *handler) decodeError(r *Record, err error) error {
	return &DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
}

// Handle registers fn for the messages of topic: each is decoded into In,
// fn's result is encoded and, with PublishTo, published before the
// message is acknowledged.
func Handle[In, Out any](app *App, topic string, fn func(context.Context, In) (Out, error), opts ...HandlerOption) {
	h := newHandler(topic, opts)
	if h.batch != nil {
		h.fail(fmt.Errorf("stream: %s: batch options need HandleBatch", topic))
	}
	inCodec := codecFor[In](h, h.inCodec, "input")
	outCodec := codecFor[Out](h, h.outCodec, "output")
	h.inType, h.inCodecDescriptor = reflect.TypeFor[In](), inCodec
	if h.publishTo != "" {
		h.outType, h.outCodecDescriptor = reflect.TypeFor[Out](), outCodec
	}
	h.newCore = func(a *App) HandlerFunc {
		// Owned by one lane: the decode target, the encode buffer and the
		// outgoing record are reused for every message.
		var in In
		var out Record
		var encoded []byte
		return func(ctx context.Context, records []*Record) error {
			r := records[0]
			var zero In
			in = zero
			if err := inCodec.Decode(r.Value, &in); err != nil {
				return h.decodeError(r, err)
			}
			result, err := fn(ctx, in)
			if err != nil || h.publishTo == "" {
				return err
			}
			if encoded, err = outCodec.Encode(encoded[:0], result); err != nil {
				return fmt.Errorf("stream: %s: encode the result: %w", topic, err)
			}
			out = Record{Topic: h.publishTo, Partition: AnyPartition, Key: r.Key, Value: encoded}
			return a.producer.Publish(ctx, &out)
		}
	}
	app.register(h)
}

// Consume registers fn for the messages of topic, for handlers that
// publish nothing by returning (their Publisher may).
func Consume[In any](app *App, topic string, fn func(context.Context, In) error, opts ...HandlerOption) {
	h := newHandler(topic, opts)
	if h.publishTo != "" || h.batch != nil {
		h.fail(fmt.Errorf("stream: %s: Consume has no result to publish and no batches", topic))
	}
	inCodec := codecFor[In](h, h.inCodec, "input")
	h.inType, h.inCodecDescriptor = reflect.TypeFor[In](), inCodec
	h.newCore = func(*App) HandlerFunc {
		var in In
		return func(ctx context.Context, records []*Record) error {
			r := records[0]
			var zero In
			in = zero
			if err := inCodec.Decode(r.Value, &in); err != nil {
				return h.decodeError(r, err)
			}
			return fn(ctx, in)
		}
	}
	app.register(h)
}

// HandleBatch registers fn for batches of topic's messages: records of
// one partition, in offset order, bounded by BatchMaxCount, BatchMaxBytes
// and BatchMaxWait. The batch is acknowledged (or redelivered) as a whole.
// The slice is reused: fn must not keep it.
func HandleBatch[In any](app *App, topic string, fn func(context.Context, []In) error, opts ...HandlerOption) {
	h := newHandler(topic, opts)
	h.batchConfig()
	if h.publishTo != "" || h.keyLanes != 1 {
		h.fail(fmt.Errorf("stream: %s: a batch handler publishes nothing by returning and has one lane", topic))
	}
	if b := h.batch; b.maxCount < 1 || b.maxBytes < 1 || b.maxWait < 0 || b.maxCount > h.maxInFlight {
		h.fail(fmt.Errorf("stream: %s: batch bounds %+v must be positive, count at most MaxInFlight", topic, *b))
	}
	inCodec := codecFor[In](h, h.inCodec, "input")
	h.inType, h.inCodecDescriptor = reflect.TypeFor[In](), inCodec
	h.newCore = func(*App) HandlerFunc {
		ins := make([]In, 0, h.batch.maxCount)
		return func(ctx context.Context, records []*Record) error {
			var zero In
			ins = ins[:len(records)]
			for i, r := range records {
				ins[i] = zero
				if err := inCodec.Decode(r.Value, &ins[i]); err != nil {
					return h.decodeError(r, err)
				}
			}
			err := fn(ctx, ins)
			clear(ins) // drop references to decoded values between batches
			return err
		}
	}
	app.register(h)
}

// chain builds a lane's full handler: App middlewares outermost, then the
// handler's, then the typed core.
func (h *handler) chain(a *App) HandlerFunc {
	next := h.newCore(a)
	for i := len(h.middlewares) - 1; i >= 0; i-- {
		next = h.middlewares[i](next)
	}
	for i := len(a.cfg.middlewares) - 1; i >= 0; i-- {
		next = a.cfg.middlewares[i](next)
	}
	return next
}
