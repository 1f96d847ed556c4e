package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DeleteACLs: v0-3
//
// Behavior:
// * Each filter (as DescribeACLs') deletes every binding it matches and
//   returns them; a binding two filters match is deleted and returned by
//   the first. All the removals are written with one fsync.
// * A filter with an unknown enum value or an over-long name:
//   INVALID_REQUEST for that filter, the others proceed.
// * Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
//   filter); without --authorizer, SECURITY_DISABLED. More than
//   maxACLsPerRequest filters: INVALID_REQUEST for each, nothing deleted.
//
// Version notes:
// * v1: ResourcePatternType (v0: LITERAL); v2: flexible versions
// * v3: resource type USER

func init() { regKey(31, 0, 3, replyingFor((*Handler).handleDeleteACLs)) }

func (h *Handler) handleDeleteACLs(creq *server.Request, req *kmsg.DeleteACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	valid, at, ok := aclAdminItems(h, creq, req.Filters, "ACL filters", func(rf kmsg.DeleteACLsRequestFilter) acl.Filter {
		return acl.Filter{ResourceType: rf.ResourceType, ResourceName: rf.ResourceName, PatternType: rf.ResourcePatternType,
			Principal: rf.Principal, Host: rf.Host, Operation: rf.Operation, Permission: rf.PermissionType}
	}, acl.Filter.Validate, func(i int, code int16, msg *string) {
		resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
	})
	if !ok {
		return resp
	}
	h.aclMu.Lock()
	defer h.aclMu.Unlock()
	var deleted [][]acl.Binding
	var err error
	if cm := h.clusterMeta(); cm != nil {
		h.aclMu.Unlock() // SecurityApplied takes it when this node applies the removal
		ctx, cancel := clusterChangeContext()
		deleted, err = cm.DeleteACLs(ctx, valid)
		cancel()
		h.aclMu.Lock()
	} else {
		deleted, err = h.cfg.Catalog.DeleteACLs(valid)
	}
	h.reloadACLsLocked()
	if err != nil {
		h.log.Error("ACL deletion failed", "err", err)
		for _, i := range at {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.UnknownServerError.Code, errMessage(err)
		}
		return resp
	}
	for j, bs := range deleted {
		r := &resp.Results[at[j]]
		for _, b := range bs {
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = b.ResourceType, b.ResourceName, b.PatternType
			m.Principal, m.Host, m.Operation, m.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
			r.MatchingACLs = append(r.MatchingACLs, m)
			h.log.Info("ACL deleted", "acl", b.String(), "by", creq.Principal().String())
		}
	}
	return resp
}
