package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DescribeCluster: v0-2
//
// Behavior:
// * Single node: lists this broker as the only broker and the controller,
//   at the endpoint of the listener the request came through.
// * Cluster mode (cluster.go): every registered unfenced broker (v2 with
//   IncludeFencedBrokers: the fenced ones too, IsFenced set) at its
//   endpoint for the request's listener, and the active controller's id
//   (-1 when none is known).
// * v1+: EndpointType 1 (brokers) is the only type served; 2 (controllers)
//   lists the same brokers (every node is a controller voter: KRaft's
//   combined mode).
//
// Version notes:
// * v1: EndpointType; v2: IncludeFencedBrokers, IsFenced

func init() { regKey(60, 0, 2, (*Handler).handleDescribeCluster) }

func (h *Handler) handleDescribeCluster(_ context.Context, creq *server.Request, req *kmsg.DescribeClusterRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterID = h.clusterID()
	resp.ControllerID = h.controllerID()
	resp.EndpointType = req.EndpointType
	resp.ClusterAuthorizedOperations = -2147483648
	if req.IncludeClusterAuthorizedOperations {
		// KIP-430, as Kafka: the operations only to who may describe the
		// cluster (0 to others); the brokers to everyone.
		resp.ClusterAuthorizedOperations = 0
		if h.allowedCluster(creq, acl.Describe) {
			resp.ClusterAuthorizedOperations = h.authorizedOperations(creq, acl.Cluster, acl.ClusterName)
		}
	}
	for _, lb := range h.listedBrokers(creq, req.Version >= 2 && req.IncludeFencedBrokers) {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack, b.IsFenced = lb.id, lb.host, lb.port, lb.rack, lb.fenced
		resp.Brokers = append(resp.Brokers, b)
	}
	return reply(resp)
}
