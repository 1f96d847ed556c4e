package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// WriteTxnMarkers: v0-2
//
// Behavior:
// * Writes each marker (commit or abort of a producer's transaction) to
//   each named partition, durable before the answer, as a partition leader
//   does for Kafka's coordinator; admin tools use it to abort a hanging
//   transaction (kafka-transactions.sh abort). A __consumer_offsets
//   partition's marker commits or drops the producer's pending offsets
//   there. Per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH
//   for an older epoch than the partition's, KAFKA_STORAGE_ERROR.
//
// Version notes:
// * v1: flexible; v2: TransactionVersion (KIP-890 part 2)

func init() { regKey(27, 0, 2, (*Handler).handleWriteTxnMarkers) }

func (h *Handler) handleWriteTxnMarkers(ctx context.Context, creq *server.Request, req *kmsg.WriteTxnMarkersRequest) server.Response {
	if !h.allowedCluster(creq, acl.ClusterAction) && !h.allowedCluster(creq, acl.Alter) {
		return errorReply(req, kerr.ClusterAuthorizationFailed.Code)
	}
	w := txnMarkers{h}
	return reply(errresp.WriteTxnMarkers(req, func(m *kmsg.WriteTxnMarkersRequestMarker, topic string, p int32) int16 {
		marker := plog.TxnMarker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}
		return w.WriteTxnMarker(ctx, topic, p, marker)
	}))
}
