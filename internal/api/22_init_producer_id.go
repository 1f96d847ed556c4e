package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// InitProducerID: v0-5
//
// Behavior:
// * Idempotent producers (no transactional ID) get a fresh producer ID at
//   epoch 0, as Kafka does for them; IDs come from the catalogue's
//   persistent allocator, so they never repeat across restarts. The
//   ProducerID/ProducerEpoch of a KIP-360 epoch bump are ignored: a new ID
//   serves the same purpose for a non-transactional producer.
// * A transactional ID goes to the transaction coordinator (internal/txn):
//   the id's producer id with its epoch bumped (fencing the producer of the
//   epoch before; an ongoing transaction is aborted first and the caller
//   told CONCURRENT_TRANSACTIONS), KIP-360 recovery when the producer gives
//   its id and epoch, a new producer id once the epoch is exhausted,
//   INVALID_TRANSACTION_TIMEOUT above transaction.max.timeout.ms (15 min).
//
// Version notes:
// * v1: no change; v2: flexible versions
// * v3: ProducerID, ProducerEpoch (KIP-360); v4: PRODUCER_FENCED
// * v5: no change (KIP-890)

func init() { regKey(22, 0, 5, (*Handler).handleInitProducerID) }

func (h *Handler) handleInitProducerID(ctx context.Context, creq *server.Request, req *kmsg.InitProducerIDRequest) server.Response {
	return h.authorizedCoordinated(creq, func() server.Response { return h.initProducerID(ctx, creq, req) })
}

func (h *Handler) initProducerID(ctx context.Context, creq *server.Request, req *kmsg.InitProducerIDRequest) server.Response {
	if req.TransactionalID != nil {
		return h.handleTxn(ctx, creq)
	}
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id, err := h.nextProducerID()
	if err != nil {
		h.log.Error("allocating a producer id failed", "err", err)
		resp.ErrorCode = kerr.KafkaStorageError.Code
		return reply(resp)
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return reply(resp)
}
