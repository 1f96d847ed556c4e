package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// DescribeCluster: v0-2
//
// Behavior:
// * Lists this broker as the only broker and the controller, at the
//   endpoint of the listener the request came through.
// * v1+: EndpointType 1 (brokers) is the only type served; 2 (controllers)
//   also lists this node, which is its own controller.
//
// Version notes:
// * v1: EndpointType; v2: IncludeFencedBrokers, IsFenced

func init() { regKey(60, 0, 2, (*Handler).handleDescribeCluster) }

func (h *Handler) handleDescribeCluster(_ context.Context, creq *server.Request, req *kmsg.DescribeClusterRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterID = h.cfg.Catalog.ClusterID()
	resp.ControllerID = h.cfg.NodeID
	resp.EndpointType = req.EndpointType
	resp.ClusterAuthorizedOperations = -2147483648
	b := kmsg.NewDescribeClusterResponseBroker()
	b.NodeID = h.cfg.NodeID
	b.Host, b.Port = h.advertisedAddr(creq)
	resp.Brokers = append(resp.Brokers, b)
	return reply(resp)
}
