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
// * Cluster mode: every node answers the same coordinator, the unfenced
//   broker of the lowest id (its own __consumer_offsets and
//   __transaction_state: internal topics are not replicated yet, so a
//   group's offsets stay with that node and a new coordinator after it is
//   fenced starts without them).
//
// Version notes:
// * v1: CoordinatorType, ErrorMessage; v3: flexible
// * v4: batched CoordinatorKeys (KIP-699); v6: share coordinator type

func init() { regKey(10, 0, 6, (*Handler).handleFindCoordinator) }

// coordinatorTypeTransaction is FindCoordinator's key type of transactional
// ids.
const coordinatorTypeTransaction = 1

func (h *Handler) handleFindCoordinator(ctx context.Context, creq *server.Request, req *kmsg.FindCoordinatorRequest) server.Response {
	resp := h.authorizedCoordinated(creq, func() server.Response {
		if req.CoordinatorType == coordinatorTypeTransaction {
			return h.handleTxn(ctx, creq)
		}
		return h.handleGroup(ctx, creq)
	})
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
	if id, ok := h.clusterCoordinator(creq); ok && id.ID != h.cfg.NodeID {
		// Cluster mode: every node names the same coordinator (cluster.go).
		ch, cp, _ := h.brokerAddr(creq, id)
		if resp.ErrorCode == 0 {
			resp.NodeID, resp.Host, resp.Port = id.ID, ch, cp
		}
		for i := range resp.Coordinators {
			if c := &resp.Coordinators[i]; c.ErrorCode == 0 {
				c.NodeID, c.Host, c.Port = id.ID, ch, cp
			}
		}
		return
	}
	if resp.ErrorCode == 0 && resp.NodeID == h.cfg.NodeID {
		resp.Host, resp.Port = host, port
	}
	for i := range resp.Coordinators {
		if c := &resp.Coordinators[i]; c.ErrorCode == 0 && c.NodeID == h.cfg.NodeID {
			c.Host, c.Port = host, port
		}
	}
}
