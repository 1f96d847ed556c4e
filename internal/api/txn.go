package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/internal/plog"
)

// The partition side of transactions (KIP-98). The transaction coordinator
// (internal/txn) is a separate component; the partition handlers (Produce,
// Fetch, ListOffsets, DescribeProducers) meet it only through the two
// points below, so either side can change behind them.
//
//   - Produce asks Config.TxnVerifier, for every partition of a
//     transactional Produce, whether that partition belongs to the
//     producer's ongoing transaction (KIP-890 part 1), before appending.
//   - The coordinator writes the commit or abort markers of a transaction
//     with Handler.WriteTxnMarker (one control batch per partition, durable
//     before it returns), which ends the producer's transaction in that
//     partition and moves its last stable offset.

// TxnVerifier is the transaction coordinator as the Produce handler sees
// it. nil (Config.TxnVerifier) means no coordinator: transactional produce
// is refused, as before transactions existed.
type TxnVerifier interface {
	// VerifyPartition answers 0 when the partition may take a batch of the
	// producer's ongoing transaction, else the Kafka error code Produce
	// answers for it: INVALID_TXN_STATE when the partition was not added
	// (KIP-890 part 1: a late or hanging write), PRODUCER_FENCED or
	// INVALID_PRODUCER_EPOCH for an older epoch, TRANSACTIONAL_ID_NOT_FOUND,
	// COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, ...
	//
	// implicitAdd is true when the client's Produce version (v12+, KIP-890
	// part 2) lets the partition join the transaction by this produce
	// alone (the client sends no AddPartitionsToTxn for it): the
	// coordinator then adds it, durably, before answering 0, if the
	// transaction of that producer and epoch is ongoing.
	//
	// Called from the Produce handler's goroutine, once per partition of a
	// transactional request, before anything of the request is appended;
	// it may block (ctx is the request's).
	VerifyPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, topic string, partition int32, implicitAdd bool) int16
}

// WriteTxnMarker writes the commit or abort marker m of a transaction to a
// partition and returns once it is durable (fsynced) and the partition's
// last stable offset has moved past the transaction (plog.WriteTxnMarker):
// the per-partition answer of WriteTxnMarkers, 0 or a Kafka error code.
// UNKNOWN_TOPIC_OR_PARTITION for a partition this broker does not have,
// INVALID_PRODUCER_EPOCH for an epoch older than the producer's in that
// partition, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch,
// KAFKA_STORAGE_ERROR when the partition's disk failed,
// NOT_LEADER_OR_FOLLOWER when it is closing.
func (h *Handler) WriteTxnMarker(ctx context.Context, topic string, partition int32, m plog.TxnMarker) int16 {
	l := h.lookup(topic).partition(partition)
	if l == nil {
		return kerr.UnknownTopicOrPartition.Code
	}
	if _, err := l.WriteTxnMarker(ctx, m); err != nil {
		if ctx.Err() != nil {
			return kerr.RequestTimedOut.Code // not queued: nothing written
		}
		code := errorCode(err)
		if code == kerr.KafkaStorageError.Code {
			h.log.Error("writing a transaction marker failed", "topic", topic, "partition", partition, "producer_id", m.ProducerID, "err", err)
		}
		return code
	}
	return 0
}
