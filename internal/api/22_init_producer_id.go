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
// * A transactional ID is refused with INVALID_REQUEST: transactions are not
//   built yet. Not TRANSACTIONAL_ID_AUTHORIZATION_FAILED (nothing is wrong
//   with the client's rights) and not a retriable code such as
//   COORDINATOR_NOT_AVAILABLE (the client would retry forever);
//   INVALID_REQUEST is non-retriable, so the client fails at once. The
//   broker log says why.
//
// Version notes:
// * v1: no change; v2: flexible versions
// * v3: ProducerID, ProducerEpoch (KIP-360); v4: PRODUCER_FENCED
// * v5: no change (KIP-890)

func init() { regKey(22, 0, 5, (*Handler).handleInitProducerID) }

func (h *Handler) handleInitProducerID(_ context.Context, creq *server.Request, req *kmsg.InitProducerIDRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		h.log.Warn("InitProducerID with a transactional id refused: transactions are not supported yet",
			"transactional_id", *req.TransactionalID, "client", creq.Remote, "client_id", creq.ClientID)
		resp.ErrorCode = kerr.InvalidRequest.Code
		return reply(resp)
	}
	id, err := h.cfg.Catalog.NextProducerID()
	if err != nil {
		h.log.Error("allocating a producer id failed", "err", err)
		resp.ErrorCode = kerr.KafkaStorageError.Code
		return reply(resp)
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return reply(resp)
}
