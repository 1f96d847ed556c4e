package stream

import "context"

// AckPolicy says when a delivered message is acknowledged, that is, when
// its offset may be committed. The names follow FastStream's AckPolicy.
// Whatever the policy, the committed offset of a partition never passes a
// message whose handling has not finished (see KeyConcurrency).
type AckPolicy uint8

const (
	// NackOnError, the default, acknowledges a message after its handler
	// returned nil (and its result was published); on an error it seeks
	// the partition back to the message and redelivers it, with the
	// partition's later messages after it, waiting RedeliveryBackoff
	// first. The offset is committed only after success: at least once.
	// A message that always fails is redelivered forever; put Retry and
	// DeadLetter middlewares in front to bound that.
	NackOnError AckPolicy = iota
	// AckAfterHandle acknowledges a message once its handler has returned,
	// whether it failed or not; a failure goes to the App's error path
	// (OnError) and is not redelivered. FastStream calls this ACK.
	AckAfterHandle
	// AckFirst acknowledges a message before its handler runs: at most
	// once. A failure goes to the error path.
	AckFirst
	// Manual leaves the decision to the handler: Ack(ctx) acknowledges,
	// Nack(ctx) redelivers as NackOnError does. A message the handler
	// returns without either is finished but not acknowledged by itself:
	// Kafka's committed offset is one number per partition, so the next
	// acknowledged message of the partition commits past it, and if none
	// follows before a restart it is delivered again.
	Manual
)

func (p AckPolicy) String() string {
	switch p {
	case NackOnError:
		return "nack-on-error"
	case AckAfterHandle:
		return "ack-after-handle"
	case AckFirst:
		return "ack-first"
	case Manual:
		return "manual"
	}
	return "unknown"
}

// manualDecision is what a Manual handler said about its message.
type manualDecision uint8

const (
	manualNone manualDecision = iota
	manualAck
	manualNack
)

// Ack acknowledges the message being handled under ctx, for handlers with
// the Manual policy; with another policy, or outside a handler, it does
// nothing. The acknowledgement takes effect when the handler returns.
func Ack(ctx context.Context) {
	if d := deliveryOf(ctx); d != nil {
		d.manual = manualAck
	}
}

// Nack asks for the message being handled under ctx to be redelivered, for
// handlers with the Manual policy (see Ack).
func Nack(ctx context.Context) {
	if d := deliveryOf(ctx); d != nil {
		d.manual = manualNack
	}
}
