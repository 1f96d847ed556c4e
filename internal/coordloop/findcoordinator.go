package coordloop

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator is the answer both coordinators give to a
// FindCoordinator for their keys: keyError is a key's error code, 0 when
// this node (node at host:port) coordinates it. A request before v4 names
// one key (CoordinatorKey) and gets its answer at the top level, with the
// error message from v1.
func FindCoordinator(req *kmsg.FindCoordinatorRequest, node int32, host string, port int32, keyError func(key string) int16) *kmsg.FindCoordinatorResponse {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key, co.NodeID, co.Port = key, -1, -1
		if co.ErrorCode = keyError(key); co.ErrorCode != 0 {
			msg := kerr.ErrorForCode(co.ErrorCode).(*kerr.Error).Description
			co.ErrorMessage = &msg
		} else {
			co.NodeID, co.Host, co.Port = node, host, port
		}
		resp.Coordinators = append(resp.Coordinators, co)
	}
	if req.Version < 4 {
		co := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = co.ErrorCode, co.NodeID, co.Host, co.Port
		if req.Version >= 1 {
			resp.ErrorMessage = co.ErrorMessage
		}
	}
	return resp
}
