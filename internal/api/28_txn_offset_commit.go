package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/group"
	"github.com/sushka-io/sushka/internal/server"
)

// TxnOffsetCommit: v0-5
//
// Behavior:
// * The transaction coordinator first verifies that the group's
//   __consumer_offsets partition is in the producer's ongoing transaction
//   at this epoch (AddOffsetsToTxn added it; v5+, KIP-890 part 2, adds it
//   implicitly): INVALID_TXN_STATE when not, PRODUCER_FENCED for another
//   epoch (INVALID_PRODUCER_EPOCH before v3), INVALID_PRODUCER_ID_MAPPING
//   for another producer id.
// * The group coordinator (internal/group) then keeps the offsets pending
//   for (group, producer) until the transaction's marker: committed by a
//   commit, dropped by an abort. KIP-447 (v3+): a member id that is set
//   must be the group's, a generation that is set the group's.
//
// Version notes:
// * v1: no change; v2: LeaderEpoch; v3: Generation, MemberID, InstanceID
//   (KIP-447), flexible; v4: no change; v5: implicit add (KIP-890 part 2)

func init() { regKey(28, 0, 5, (*Handler).handleTxnOffsetCommit) }

func (h *Handler) handleTxnOffsetCommit(ctx context.Context, creq *server.Request, req *kmsg.TxnOffsetCommitRequest) server.Response {
	return h.authorizedCoordinated(creq, func() server.Response { return h.txnOffsetCommit(ctx, creq, req) })
}

func (h *Handler) txnOffsetCommit(ctx context.Context, creq *server.Request, req *kmsg.TxnOffsetCommitRequest) server.Response {
	if h.txns == nil {
		return errorReply(req, kerr.CoordinatorNotAvailable.Code)
	}
	if code := h.verifyTxnOffsets(ctx, req); code != 0 {
		return errorReply(req, code)
	}
	return h.handleGroup(ctx, creq)
}

func (h *Handler) verifyTxnOffsets(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) int16 {
	partition := group.PartitionFor(req.Group, h.groups.Store().Partitions())
	code := txnVerifier{h.txns}.VerifyPartition(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, group.OffsetsTopic, partition, req.Version >= 5)
	if code == kerr.ProducerFenced.Code && req.Version < 3 {
		code = kerr.InvalidProducerEpoch.Code
	}
	return code
}
