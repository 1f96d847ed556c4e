package stream

import (
	"context"
	"errors"
)

// A Transport connects an App to a broker. The framework needs exactly
// three things from it: a consumer of a group's topics, a producer, and a
// Close. Implementations live in subpackages (memory, kafka, nats); a transport is
// supported when it passes streamtest.TestTransport.
//
// Exactly once (consume, process, produce in one Kafka transaction) is to
// fit here without changing handlers: a transactional Kafka transport
// would open a transaction per delivery (or batch) on its producer, make
// the handler's publishes part of it, and turn the Mark of that delivery
// into the transaction's offset commit (TxnOffsetCommit) followed by
// EndTxn; a nack aborts. The worker already calls Mark exactly once per
// finished prefix and never before the handler's publishes returned,
// which is the order a transaction needs. kafka.ExactlyOnce does this,
// buffering a delivery's publishes until the commit of its offset (see
// stream/kafka/txn.go).
type Transport interface {
	// Consume joins group and consumes topics until the Consumer is closed.
	Consume(ctx context.Context, cfg ConsumerConfig) (Consumer, error)
	// Producer returns the transport's producer. It is shared and safe for
	// concurrent use; it stays usable until Close.
	Producer() Producer
	// Close releases the transport. The App calls it last, after its
	// consumers are closed and in-flight handlers have published.
	Close() error
}

// ConsumerConfig says what to consume.
type ConsumerConfig struct {
	Group  string
	Topics []string
	// OnRevoked, when set, is called by the transport when partitions are
	// taken away (a rebalance), before the transport commits their offsets
	// and before another member may consume them. It returns when the
	// framework has finished (or abandoned, at its deadline) the in-flight
	// messages of those partitions and marked what they completed.
	OnRevoked func(partitions []TopicPartition)
	// OnLost, when set, is called by the transport when partitions were
	// taken away without a revocation (the member was fenced: its session
	// expired, its heartbeat failed): another member may be consuming them
	// already. It returns at once, without waiting for their in-flight
	// messages, and after it returns the framework marks nothing more for
	// them; the transport then forgets their marks. Without OnLost, the
	// transport calls OnRevoked.
	OnLost func(partitions []TopicPartition)
}

// A Consumer delivers records of its group's partitions. Poll is called from
// one goroutine; Mark, Seek, Pause and Resume may be called from any.
type Consumer interface {
	// Poll appends available records to buf[:0] and returns it, waiting
	// until there is at least one, ctx ends (ctx.Err()) or the consumer is
	// closed (ErrClosed). Records of one partition come in offset order.
	Poll(ctx context.Context, buf []*Record) ([]*Record, error)
	// Mark records that every offset below next of the partition is done;
	// the transport commits marks (at once or periodically, and always
	// before it hands the partition to another member and on Close). A
	// mark below an earlier one is ignored.
	Mark(tp TopicPartition, next int64)
	// Seek makes the partition's next polled record the one at offset: a
	// redelivery. Records of the partition fetched before the seek may
	// still arrive; the framework drops them (see partitionWorker).
	Seek(tp TopicPartition, offset int64)
	// Pause stops fetching the partition; records already fetched may
	// still be polled. Resume undoes it.
	Pause(tp TopicPartition)
	Resume(tp TopicPartition)
	// Close commits what is marked and leaves the group.
	Close(ctx context.Context) error
}

// A Producer sends records. Publish returns when the broker has the record
// (acknowledged by the broker per the transport's configuration), so a
// publish inside a handler completes before that handler's message is
// acknowledged. The producer copies what it keeps: rec may be reused after
// Publish returns.
type Producer interface {
	Publish(ctx context.Context, rec *Record) error
}

// ErrClosed is returned by a closed Consumer's Poll.
var ErrClosed = errors.New("stream: consumer closed")
