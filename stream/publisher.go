package stream

import (
	"context"
	"fmt"
	"reflect"
	"sync"
)

// Publisher publishes typed values to one topic through an App's producer,
// from a handler or from anywhere else, until the App's Run returns. It is
// safe for concurrent use. Publish returns when the broker has the record,
// so a handler that publishes and then returns has published before its
// message is acknowledged.
type Publisher[T any] struct {
	producer Producer
	topic    string
	codec    Codec[T]
	buffers  sync.Pool // *[]byte: encode buffers, so a steady publisher reuses them
}

// Envelope carries what a record has besides its value.
type Envelope struct {
	Key     []byte
	Headers []Header
	// Partition, when not nil, sends the record to that partition;
	// otherwise the transport chooses (by key when there is one).
	Partition *int32
}

// NewPublisher returns a publisher of T to topic. codec may be nil for T's
// default codec.
func NewPublisher[T any](app *App, topic string, codec Codec[T]) *Publisher[T] {
	if codec == nil {
		codec = DefaultCodec[T]()
	}
	app.publishers = append(app.publishers, publisherInfo{topic: topic, valueType: reflect.TypeFor[T](), codec: codec})
	return &Publisher[T]{producer: app.Producer(), topic: topic, codec: codec}
}

// Publish sends v with no key.
func (p *Publisher[T]) Publish(ctx context.Context, v T) error {
	return p.PublishWith(ctx, Envelope{}, v)
}

// PublishWith sends v with the envelope's key, headers and partition.
func (p *Publisher[T]) PublishWith(ctx context.Context, env Envelope, v T) error {
	bp, _ := p.buffers.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer p.buffers.Put(bp)
	encoded, err := p.codec.Encode((*bp)[:0], v)
	if err != nil {
		return fmt.Errorf("stream: encode for %s: %w", p.topic, err)
	}
	*bp = encoded
	rec := Record{Topic: p.topic, Partition: AnyPartition, Key: env.Key, Value: encoded, Headers: env.Headers}
	if env.Partition != nil {
		rec.Partition = *env.Partition
	}
	return p.producer.Publish(ctx, &rec)
}
