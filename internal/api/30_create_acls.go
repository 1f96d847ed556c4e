package api

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// CreateACLs: v0-3
//
// Behavior:
// * Each creation is validated as Kafka's controller does (a concrete
//   resource type, LITERAL or PREFIXED, a concrete operation, ALLOW or
//   DENY, a non-empty name, the cluster named kafka-cluster, a principal
//   Type:name, a host "*" or an IP address): INVALID_REQUEST with the
//   reason, the other creations proceed. A binding that exists already
//   succeeds and is stored once.
// * The valid ones are written to the metadata log with one fsync
//   (internal/meta/acls.go) and checked from the answer on.
// * Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
//   creation); without --authorizer, SECURITY_DISABLED.
// * More than maxACLsPerRequest creations, or a store that would pass
//   maxACLs: INVALID_REQUEST for each, nothing created.
//
// Version notes:
// * v1: ResourcePatternType (v0: LITERAL); v2: flexible versions
// * v3: resource type USER

func init() { regKey(30, 0, 3, replyingFor((*Handler).handleCreateACLs)) }

// maxACLsPerRequest bounds the creations or filters of one request, and
// maxACLs the bindings of the broker: each binding is checked on the hot
// path's index and stored in every snapshot (design D13).
const (
	maxACLsPerRequest = 10_000
	maxACLs           = 100_000
)

func (h *Handler) handleCreateACLs(creq *server.Request, req *kmsg.CreateACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	failAll := func(code int16, msg string) kmsg.Response {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, &msg
		}
		return resp
	}
	if code, msg := h.aclAdminRefused(creq, acl.Alter); code != 0 {
		return failAll(code, msg)
	}
	if len(req.Creations) > maxACLsPerRequest {
		return failAll(kerr.InvalidRequest.Code, fmt.Sprintf("%d ACL creations in one request, at most %d", len(req.Creations), maxACLsPerRequest))
	}
	var valid []acl.Binding
	var at []int
	for i, c := range req.Creations {
		b := acl.Binding{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		if err := b.Validate(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, errMessage(err)
			continue
		}
		valid = append(valid, b)
		at = append(at, i)
	}
	h.aclMu.Lock()
	defer h.aclMu.Unlock()
	if n := h.authz.Len() + len(valid); n > maxACLs {
		return failAll(kerr.InvalidRequest.Code, fmt.Sprintf("the broker would hold %d ACLs, at most %d", n, maxACLs))
	}
	errs := h.cfg.Catalog.CreateACLs(valid)
	h.reloadACLsLocked()
	for j, err := range errs {
		if err != nil {
			i := at[j]
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.UnknownServerError.Code, errMessage(err)
			h.log.Error("ACL creation failed", "acl", valid[j].String(), "err", err)
			continue
		}
		h.log.Info("ACL created", "acl", valid[j].String(), "by", creq.Principal().String())
	}
	return resp
}
