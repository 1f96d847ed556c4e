package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// BrokerHeartbeat: v0-1 (cluster mode only)
//
// Behavior (KRaft's; the broker sends one every 2 s,
// broker.heartbeat.interval.ms):
// * Renews the broker's session on the active controller; a broker not
//   heard from for 9 s (broker.session.timeout.ms) is fenced. A fenced
//   broker whose CurrentMetadataOffset has reached its own registration is
//   unfenced (UnfenceBrokerRecord, answered once applied here). IsFenced
//   and IsCaughtUp say where the broker stands.
// * A BrokerEpoch that is not the broker's current registration is
//   STALE_BROKER_EPOCH, an unknown broker BROKER_ID_NOT_REGISTERED (the
//   broker registers again), a node that is not the active controller
//   NOT_CONTROLLER. WantFence and WantShutdown are not acted on yet
//   (controlled shutdown is later): the session times out instead.
// * Refused whole without CLUSTER_ACTION on the cluster (authz.go). Not
//   served on a single node.
//
// Version notes:
// * v1: OfflineLogDirs (tagged)

func init() { regKey(63, 0, 1, (*Handler).handleBrokerHeartbeat).clusterOnly = true }

func (h *Handler) handleBrokerHeartbeat(ctx context.Context, _ *server.Request, req *kmsg.BrokerHeartbeatRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	fenced, err := h.cfg.Cluster.BrokerHeartbeat(ctx, req)
	resp.ErrorCode, resp.IsFenced, resp.IsCaughtUp = errorCode(err), fenced, err == nil && !fenced
	return reply(resp)
}
