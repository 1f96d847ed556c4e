package api

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DescribeACLs: v0-3
//
// Behavior:
// * The bindings the filter matches (internal/acl Filter: ANY enums and
//   null strings match everything; pattern type MATCH every binding that
//   applies to the named resource: literal, "*" and prefixes), grouped by
//   resource pattern.
// * Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); without
//   --authorizer, SECURITY_DISABLED, as Kafka without an authorizer.
// * A filter with an unknown enum value, or a name longer than
//   acl.MaxNameBytes: INVALID_REQUEST.
//
// Version notes:
// * v1: ResourcePatternType (v0: LITERAL); v2: flexible versions
// * v3: resource type USER

func init() { regKey(29, 0, 3, replyingFor((*Handler).handleDescribeACLs)) }

func (h *Handler) handleDescribeACLs(creq *server.Request, req *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	fail := func(code int16, msg string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp
	}
	if code, msg := h.aclAdminRefused(creq, acl.Describe); code != 0 {
		return fail(code, msg)
	}
	f := acl.Filter{ResourceType: req.ResourceType, ResourceName: req.ResourceName, PatternType: req.ResourcePatternType,
		Principal: req.Principal, Host: req.Host, Operation: req.Operation, Permission: req.PermissionType}
	if err := f.Validate(); err != nil {
		return fail(kerr.InvalidRequest.Code, err.Error())
	}
	type pattern struct {
		rt   acl.ResourceType
		name string
		pt   acl.PatternType
	}
	index := map[pattern]int{}
	bindings := h.metaReads().ACLs()
	slices.SortFunc(bindings, acl.Compare) // by resource pattern first
	for _, b := range bindings {
		if !f.Matches(b) {
			continue
		}
		p := pattern{b.ResourceType, b.ResourceName, b.PatternType}
		i, ok := index[p]
		if !ok {
			r := kmsg.NewDescribeACLsResponseResource()
			r.ResourceType, r.ResourceName, r.ResourcePatternType = p.rt, p.name, p.pt
			resp.Resources = append(resp.Resources, r)
			i = len(resp.Resources) - 1
			index[p] = i
		}
		a := kmsg.NewDescribeACLsResponseResourceACL()
		a.Principal, a.Host, a.Operation, a.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, a)
	}
	return resp
}
