package api

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
)

// DescribeClientQuotas: v0-1
//
// Behavior (Kafka's ClientQuotasImage.describe):
// * The quotas of every entity (user, client-id, or both; a nil name is
//   the <default>) matching every filter component: match type 0 (exact)
//   needs a name, 1 (the default) and 2 (any name, "specified") must not
//   have one. An entity must have each filtered type; Strict also refuses
//   entities with a type the filter does not name.
// * An empty entity type, a type named twice, a match string where none
//   belongs, an unknown match type, or "ip" together with user or
//   client-id: INVALID_REQUEST. An entity type other than user, client-id
//   and ip: UNSUPPORTED_VERSION (as Kafka). ip filters match nothing: ip
//   quotas are not kept (AlterClientQuotas refuses them).
//
// Version notes:
// * v1: flexible versions

func init() { regKey(48, 0, 1, replying((*Handler).handleDescribeClientQuotas)) }

func (h *Handler) handleDescribeClientQuotas(req *kmsg.DescribeClientQuotasRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	filter, err := quotaFilterOf(req)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		resp.ErrorMessage = errMessage(err)
		return resp
	}
	for _, q := range h.metaReads().ClientQuotas() {
		if !filter.matches(q.Entity) {
			continue
		}
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, p := range q.Entity {
			ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = p.Type, p.Name
			e.Entity = append(e.Entity, ee)
		}
		for _, key := range slices.Sorted(maps.Keys(q.Values)) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = key, q.Values[key]
			e.Values = append(e.Values, v)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp
}

// quotaFilter is a DescribeClientQuotas filter: the types that must match a
// name exactly (nil: the default), and those that need only be present.
type quotaFilter struct {
	exact  map[string]*string
	any    map[string]bool
	strict bool
}

func quotaFilterOf(req *kmsg.DescribeClientQuotasRequest) (quotaFilter, error) {
	f := quotaFilter{exact: map[string]*string{}, any: map[string]bool{}, strict: req.Strict}
	for _, c := range req.Components {
		_, inExact := f.exact[c.EntityType]
		switch {
		case c.EntityType == "":
			return f, fmt.Errorf("%w: invalid empty entity type", meta.ErrInvalidQuota)
		case inExact || f.any[c.EntityType]:
			return f, fmt.Errorf("%w: entity type %s cannot appear more than once in the filter", meta.ErrInvalidQuota, c.EntityType)
		case c.EntityType != meta.QuotaEntityUser && c.EntityType != meta.QuotaEntityClientID && c.EntityType != meta.QuotaEntityIP:
			return f, fmt.Errorf("%w: %s", meta.ErrUnsupportedQuotaEntity, c.EntityType)
		}
		switch c.MatchType {
		case kmsg.QuotasMatchTypeExact:
			if c.Match == nil {
				return f, fmt.Errorf("%w: match type exact (0) with a null match string", meta.ErrInvalidQuota)
			}
			f.exact[c.EntityType] = c.Match
		case kmsg.QuotasMatchTypeDefault:
			if c.Match != nil {
				return f, fmt.Errorf("%w: match type default (1) with a match string", meta.ErrInvalidQuota)
			}
			f.exact[c.EntityType] = nil
		case kmsg.QuotasMatchTypeAny:
			if c.Match != nil {
				return f, fmt.Errorf("%w: match type any (2) with a match string", meta.ErrInvalidQuota)
			}
			f.any[c.EntityType] = true
		default:
			return f, fmt.Errorf("%w: unknown match type %d", meta.ErrInvalidQuota, c.MatchType)
		}
	}
	_, ipExact := f.exact[meta.QuotaEntityIP]
	if (ipExact || f.any[meta.QuotaEntityIP]) && len(f.exact)+len(f.any) > 1 {
		return f, fmt.Errorf("%w: an ip filter component cannot be used with user or client-id components", meta.ErrInvalidQuota)
	}
	return f, nil
}

func (f quotaFilter) matches(entity []meta.QuotaEntityPart) bool {
	if f.strict && len(entity) != len(f.exact)+len(f.any) {
		return false
	}
	has := func(typ string) (*string, bool) {
		for _, p := range entity {
			if p.Type == typ {
				return p.Name, true
			}
		}
		return nil, false
	}
	for typ, want := range f.exact {
		got, ok := has(typ)
		if !ok || (got == nil) != (want == nil) || (got != nil && *got != *want) {
			return false
		}
	}
	for typ := range f.any {
		if _, ok := has(typ); !ok {
			return false
		}
	}
	return true
}
