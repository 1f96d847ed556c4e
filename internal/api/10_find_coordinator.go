package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// FindCoordinator: v0-6
//
// Behavior:
// * The coordinator is this node at the endpoint of the listener the
//   request came through, as Kafka answers with the coordinator's endpoint
//   of the request's listener name.
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
	var resp server.Response
	if req.CoordinatorType == coordinatorTypeTransaction {
		resp = h.handleTxn(ctx, req)
	} else {
		resp = h.handleGroup(ctx, creq)
	}
	if fc, ok := resp.Body.(*kmsg.FindCoordinatorResponse); ok {
		h.listenerCoordinators(creq, fc)
	}
	return resp
}

// listenerCoordinators puts the endpoint of creq's listener into the
// coordinators of resp that are this node (the coordinators answer with
// the default listener's).
func (h *Handler) listenerCoordinators(creq *server.Request, resp *kmsg.FindCoordinatorResponse) {
	host, port := h.advertisedAddr(creq)
	if resp.ErrorCode == 0 && resp.NodeID == h.cfg.NodeID {
		resp.Host, resp.Port = host, port
	}
	for i := range resp.Coordinators {
		if c := &resp.Coordinators[i]; c.ErrorCode == 0 && c.NodeID == h.cfg.NodeID {
			c.Host, c.Port = host, port
		}
	}
}
