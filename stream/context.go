package stream

import "context"

// deliveryContext is the context a handler runs under. There is one per
// lane (the goroutine that runs a partition's, or a key lane's, handler),
// reused for every message, so delivering a message allocates no context:
// the invariant is that a deliveryContext describes the message being
// handled only while its handler runs. A handler that hands its ctx to a
// goroutine outliving the call must not read message metadata from it
// there.
type deliveryContext struct {
	context.Context // the App's handler context: cancelled at the shutdown deadline
	records         []*Record
	attempt         int
	manual          manualDecision
}

type deliveryKey struct{}

func (d *deliveryContext) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return d
	}
	return d.Context.Value(key)
}

func deliveryOf(ctx context.Context) *deliveryContext {
	d, _ := ctx.Value(deliveryKey{}).(*deliveryContext)
	return d
}

// Current returns the record being handled under ctx: the message itself
// for a single-message handler, the first record of the batch for a batch
// handler; nil outside a handler. Its Key, Headers, Partition, Offset and
// Timestamp are the message's metadata. The record is valid only while the
// handler runs.
func Current(ctx context.Context) *Record {
	if d := deliveryOf(ctx); d != nil && len(d.records) > 0 {
		return d.records[0]
	}
	return nil
}

// Batch returns the records being handled under ctx, in offset order (one
// for a single-message handler), or nil outside a handler.
func Batch(ctx context.Context) []*Record {
	if d := deliveryOf(ctx); d != nil {
		return d.records
	}
	return nil
}

// Attempt returns which attempt at the current message this is: 1 for the
// first delivery, counting redeliveries after a nack and retries by the
// Retry middleware; 0 outside a handler.
func Attempt(ctx context.Context) int {
	if d := deliveryOf(ctx); d != nil {
		return d.attempt
	}
	return 0
}
