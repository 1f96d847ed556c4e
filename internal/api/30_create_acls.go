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
	fail := func(i int, code int16, msg *string) {
		resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
	}
	valid, at, ok := aclAdminItems(h, creq, req.Creations, "ACL creations", func(c kmsg.CreateACLsRequestCreation) acl.Binding {
		return acl.Binding{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
	}, acl.Binding.Validate, fail)
	if !ok {
		return resp
	}
	h.aclMu.Lock()
	defer h.aclMu.Unlock()
	if n := h.authz.Len() + len(valid); n > maxACLs {
		msg := fmt.Sprintf("the broker would hold %d ACLs, at most %d", n, maxACLs)
		for i := range resp.Results {
			fail(i, kerr.InvalidRequest.Code, &msg)
		}
		return resp
	}
	var errs []error
	if cm := h.clusterMeta(); cm != nil {
		// Through the quorum, answered once applied here (SecurityApplied
		// reloads the authorizer, under aclMu: not held while waiting).
		h.aclMu.Unlock()
		ctx, cancel := clusterChangeContext()
		err := cm.CreateACLs(ctx, valid)
		cancel()
		h.aclMu.Lock()
		errs = make([]error, len(valid))
		for i := range errs {
			errs[i] = err
		}
	} else {
		errs = h.cfg.Catalog.CreateACLs(valid)
	}
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

// aclAdminItems is what CreateACLs and DeleteACLs do first: refuse the
// whole request (every item's error) without ALTER on the cluster or with
// more than maxACLsPerRequest items, else convert each item and validate
// it (INVALID_REQUEST for that item alone). It returns the valid items and
// their indexes in the request; ok is false when the request was refused.
func aclAdminItems[In, Out any](h *Handler, creq *server.Request, items []In, what string, convert func(In) Out, validate func(Out) error,
	fail func(i int, code int16, msg *string)) (valid []Out, at []int, ok bool) {
	refuseAll := func(code int16, msg string) {
		for i := range items {
			fail(i, code, &msg)
		}
	}
	if code, msg := h.aclAdminRefused(creq, acl.Alter); code != 0 {
		refuseAll(code, msg)
		return nil, nil, false
	}
	if len(items) > maxACLsPerRequest {
		refuseAll(kerr.InvalidRequest.Code, fmt.Sprintf("%d %s in one request, at most %d", len(items), what, maxACLsPerRequest))
		return nil, nil, false
	}
	for i, it := range items {
		v := convert(it)
		if err := validate(v); err != nil {
			fail(i, kerr.InvalidRequest.Code, errMessage(err))
			continue
		}
		valid = append(valid, v)
		at = append(at, i)
	}
	return valid, at, true
}
