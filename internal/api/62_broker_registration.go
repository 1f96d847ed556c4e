package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// BrokerRegistration: v0-3 (cluster mode only)
//
// Behavior (KRaft's; the broker's side is broker/cluster.go):
// * A broker that starts registers with the active controller: its id,
//   a fresh incarnation id, its advertised listeners and rack. Committed
//   through the metadata quorum (RegisterBrokerRecord) and answered once
//   applied here, with the broker's epoch: the registration's index in the
//   metadata log. The broker starts fenced; its heartbeats unfence it.
// * A node that is not the active controller answers NOT_CONTROLLER; a
//   ClusterID not the cluster's is INCONSISTENT_CLUSTER_ID.
// * Refused whole without CLUSTER_ACTION on the cluster (authz.go), as
//   Kafka's controller does: with --authorizer an anonymous client cannot
//   register or fence brokers. Not served (not in ApiVersions) on a single
//   node.
//
// Version notes:
// * v1: IsMigratingZkBroker; v2: LogDirs; v3: PreviousBrokerEpoch

func init() { regKey(62, 0, 3, (*Handler).handleBrokerRegistration).clusterOnly = true }

func (h *Handler) handleBrokerRegistration(ctx context.Context, _ *server.Request, req *kmsg.BrokerRegistrationRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	epoch, err := h.cfg.Cluster.RegisterBroker(ctx, req)
	resp.ErrorCode, resp.BrokerEpoch = errorCode(err), epoch
	if err != nil {
		resp.BrokerEpoch = -1
		h.log.Debug("broker registration refused", "broker", req.BrokerID, "err", err)
	}
	return reply(resp)
}
