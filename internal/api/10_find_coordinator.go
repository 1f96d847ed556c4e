package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// FindCoordinator: v0-6
//
// Behavior:
// * Group keys (internal/group): this node, once __consumer_offsets is
//   loaded (COORDINATOR_NOT_AVAILABLE before).
// * Transaction keys (internal/txn): this node, once __transaction_state
//   is loaded; an empty key INVALID_REQUEST. Other key types (share
//   groups): INVALID_REQUEST.
//
// Version notes:
// * v1: CoordinatorType, ErrorMessage; v3: flexible
// * v4: batched CoordinatorKeys (KIP-699); v6: share coordinator type

func init() { regKey(10, 0, 6, (*Handler).handleFindCoordinator) }

// coordinatorTypeTransaction is FindCoordinator's key type of transactional
// ids.
const coordinatorTypeTransaction = 1

func (h *Handler) handleFindCoordinator(ctx context.Context, creq *server.Request, req *kmsg.FindCoordinatorRequest) server.Response {
	if req.CoordinatorType == coordinatorTypeTransaction {
		return h.handleTxn(ctx, creq)
	}
	return h.handleGroup(ctx, creq)
}
