package api

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/sasl"
)

// errorCodes is the package's one mapping from the errors of the catalogue
// (internal/meta), the partition log (internal/plog, plog/batch), SASL
// (internal/sasl) and this package to the Kafka error codes clients react
// to. The first entry the error matches (errors.Is) wins; the sentinels of
// different packages never wrap each other, so the order only matters
// within one package.
var errorCodes = []struct {
	err  error
	code int16
}{
	{meta.ErrTopicExists, kerr.TopicAlreadyExists.Code},
	{meta.ErrUnknownTopic, kerr.UnknownTopicOrPartition.Code},
	{meta.ErrInvalidTopic, kerr.InvalidTopicException.Code},
	{meta.ErrBadPartitions, kerr.InvalidPartitions.Code},
	{meta.ErrInvalidQuota, kerr.InvalidRequest.Code},
	{meta.ErrUnsupportedQuotaEntity, kerr.UnsupportedVersion.Code},
	// The metadata quorum's (internal/controller; no handler answers
	// them yet).
	{meta.ErrNotController, kerr.NotController.Code},
	{meta.ErrInvalidReplicationFactor, kerr.InvalidReplicationFactor.Code},
	{meta.ErrBrokerNotRegistered, kerr.BrokerIDNotRegistered.Code},
	{meta.ErrStaleBrokerEpoch, kerr.StaleBrokerEpoch.Code},

	{plog.ErrBatchTooLarge, kerr.MessageTooLarge.Code},
	{batch.ErrInvalidRecord, kerr.InvalidRecord.Code},
	{plog.ErrCorruptBatch, kerr.CorruptMessage.Code},
	{batch.ErrCorrupt, kerr.CorruptMessage.Code},
	{plog.ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber.Code},
	{plog.ErrInvalidProducerEpoch, kerr.InvalidProducerEpoch.Code},
	{plog.ErrUnknownProducerID, kerr.UnknownProducerID.Code},
	{plog.ErrInvalidTxnState, kerr.InvalidTxnState.Code},
	{plog.ErrCoordinatorFenced, kerr.TransactionCoordinatorFenced.Code},
	{plog.ErrOffsetOutOfRange, kerr.OffsetOutOfRange.Code},
	{sasl.ErrIllegalState, kerr.IllegalSaslState.Code},
	{sasl.ErrUnsupportedMechanism, kerr.UnsupportedSaslMechanism.Code},
	{sasl.ErrAuthenticationFailed, kerr.SaslAuthenticationFailed.Code},
	{sasl.ErrUnacceptableCredential, kerr.UnacceptableCredential.Code},
	{meta.ErrNoScramCredential, kerr.ResourceNotFound.Code},
	{errDuplicateUser, kerr.DuplicateResource.Code},

	// A closed log is a partition this node no longer leads (deleted, or
	// the broker is shutting down): the client refreshes its metadata.
	{plog.ErrClosed, kerr.NotLeaderForPartition.Code},
	// A replicated partition's replica that does not lead it (or stopped
	// leading with the batch in flight): retriable, as a closed log.
	{plog.ErrNotLeader, kerr.NotLeaderForPartition.Code},
	// min.insync.replicas on a replicated partition (acks=all): refused
	// before the append, or answered after it was committed with the
	// in-sync replicas fallen below it. Both retriable, as in Kafka.
	{plog.ErrNotEnoughReplicas, kerr.NotEnoughReplicas.Code},
	{plog.ErrNotEnoughReplicasAfterAppend, kerr.NotEnoughReplicasAfterAppend.Code},
}

// errorCode maps an error to the Kafka error code of the response (0 for
// nil). Anything unknown comes from the storage: the partition log's I/O
// errors are sticky and mean this partition's disk failed.
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	// An answer relayed from another node (cluster mode: a creation
	// forwarded to the controller) keeps the code that node gave.
	var relayed *kerr.Error
	if errors.As(err, &relayed) {
		return relayed.Code
	}
	return kerr.KafkaStorageError.Code
}
