package acl

import (
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
)

// Config is the authorizer's configuration (the serve flags --authorizer,
// --super-users, --allow-everyone-if-no-acl-found).
type Config struct {
	// Enabled turns authorization on; off, everything is allowed (Kafka
	// without authorizer.class.name).
	Enabled bool
	// SuperUsers are principals ("User:admin") allowed everything (Kafka's
	// super.users).
	SuperUsers []string
	// AllowIfNoACL allows a request on a resource no binding names
	// (allow.everyone.if.no.acl.found; default false).
	AllowIfNoACL bool
}

// ParseSuperUsers splits Kafka's super.users ("User:a;User:b") and checks
// each principal's form.
func ParseSuperUsers(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ";") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := ValidPrincipal(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Authorizer decides whether a principal may perform an operation on a
// resource. It is safe for concurrent use; Set replaces its bindings.
type Authorizer struct {
	cfg   Config
	super map[principalKey]bool
	idx   atomic.Pointer[index]
}

// principalKey is a principal split at its first colon, as Kafka's
// KafkaPrincipal (type, name): looked up without building a string.
type principalKey struct{ typ, name string }

func splitPrincipal(p string) principalKey {
	i := strings.IndexByte(p, ':')
	if i < 0 {
		return principalKey{name: p}
	}
	return principalKey{p[:i], p[i+1:]}
}

// New returns an authorizer with no bindings.
func New(cfg Config) *Authorizer {
	a := &Authorizer{cfg: cfg, super: map[principalKey]bool{}}
	for _, p := range cfg.SuperUsers {
		a.super[splitPrincipal(p)] = true
	}
	a.idx.Store(buildIndex(nil))
	return a
}

// Enabled reports whether the authorizer checks anything.
func (a *Authorizer) Enabled() bool { return a != nil && a.cfg.Enabled }

// Set replaces the bindings (all of them: the index is rebuilt, which a
// rare ACL change affords, so that a check never waits for a lock).
func (a *Authorizer) Set(bindings []Binding) { a.idx.Store(buildIndex(bindings)) }

// Len is the number of bindings.
func (a *Authorizer) Len() int { return a.idx.Load().n }

// Authorize reports whether the principal (type and name, as
// server.Principal holds them), connecting from host (the zero Addr: an
// unknown host, matched by "*" only), may perform op on the resource of
// type rt named name. It allocates nothing.
func (a *Authorizer) Authorize(principalType, principalName string, host netip.Addr, rt ResourceType, name string, op Operation) bool {
	if a == nil || !a.cfg.Enabled {
		return true
	}
	if len(a.super) > 0 && a.super[principalKey{principalType, principalName}] {
		return true
	}
	ti := a.idx.Load().types[indexOf(rt)]
	if ti == nil {
		return a.cfg.AllowIfNoACL
	}
	q := query{principalType: principalType, principalName: principalName, host: host.Unmap(), op: op}
	// Deny wins wherever it is found, so every section is checked for a
	// deny before an allow is believed (as Kafka's findAclRule).
	q.check(ti.literal[name])
	q.check(ti.wildcard)
	for _, n := range ti.prefixLens {
		if n > len(name) {
			break
		}
		q.check(ti.prefixed[name[:n]])
	}
	switch {
	case q.denied:
		return false
	case q.allowed:
		return true
	default:
		return !q.found && a.cfg.AllowIfNoACL
	}
}

// AuthorizeAny reports whether the principal may perform op on some
// resource of type rt: Kafka's authorizeByResourceType (used for an
// idempotent producer without IDEMPOTENT_WRITE, KIP-679): an ALLOW for the
// operation on any resource of the type, unless a DENY of it covers every
// name (LITERAL "*" or the empty prefix).
func (a *Authorizer) AuthorizeAny(principalType, principalName string, host netip.Addr, rt ResourceType, op Operation) bool {
	if a == nil || !a.cfg.Enabled {
		return true
	}
	if a.super[principalKey{principalType, principalName}] {
		return true
	}
	ti := a.idx.Load().types[indexOf(rt)]
	if ti == nil {
		return a.cfg.AllowIfNoACL
	}
	q := query{principalType: principalType, principalName: principalName, host: host.Unmap(), op: op}
	q.check(ti.literal[Wildcard])
	q.check(ti.prefixed[""])
	if q.denied {
		return false
	}
	for _, es := range ti.literal {
		q.check(es)
	}
	for _, es := range ti.prefixed {
		q.check(es)
	}
	return q.allowed
}

// AuthorizedOperations is KIP-430's bit field of the operations (bit
// 1<<op) in ops the principal may perform on the resource; every one of
// them when the authorizer is off.
func (a *Authorizer) AuthorizedOperations(principalType, principalName string, host netip.Addr, rt ResourceType, name string, ops []Operation) int32 {
	var bits int32
	for _, op := range ops {
		if a.Authorize(principalType, principalName, host, rt, name, op) {
			bits |= 1 << uint(op)
		}
	}
	return bits
}

// SupportedOperations are the operations KIP-430 reports per resource type
// (Kafka's AclEntry.supportedOperations).
func SupportedOperations(rt ResourceType) []Operation {
	switch rt {
	case Topic:
		return []Operation{Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs}
	case Group:
		return []Operation{Read, Describe, Delete}
	case Cluster:
		return []Operation{Create, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, Alter, Describe}
	case TransactionalID:
		return []Operation{Describe, Write}
	case DelegationToken:
		return []Operation{Describe}
	case UserResource:
		return []Operation{CreateTokens, DescribeTokens}
	}
	return nil
}

// query is one check's state while it walks the matching sections.
type query struct {
	principalType, principalName string
	host                         netip.Addr
	op                           Operation
	found, allowed, denied       bool
}

func (q *query) check(es []entry) {
	if len(es) > 0 {
		q.found = true // the resource has bindings: no "no ACL found" rule
	}
	for i := range es {
		e := &es[i]
		if q.denied {
			return
		}
		// User:* matches every principal of its type.
		if e.principalType != q.principalType || (!e.anyPrincipal && e.principalName != q.principalName) {
			continue
		}
		if !e.anyHost && (!e.host.IsValid() || e.host != q.host) {
			continue
		}
		if e.deny {
			if e.op == All || e.op == q.op {
				q.denied = true
			}
			continue
		}
		if implies(e.op, q.op) {
			q.allowed = true
		}
	}
}

// implies reports whether an ALLOW of granted allows requested
// (StandardAuthorizerData.findResult).
func implies(granted, requested Operation) bool {
	switch {
	case granted == All || granted == requested:
		return true
	case requested == Describe:
		return granted == Read || granted == Write || granted == Delete || granted == Alter
	case requested == DescribeConfigs:
		return granted == AlterConfigs
	}
	return false
}

// index is an immutable view of the bindings for checks.
type index struct {
	types [numResourceTypes]*typeIndex
	n     int
}

const numResourceTypes = int(UserResource) + 1

func indexOf(rt ResourceType) int {
	if rt < 0 || int(rt) >= numResourceTypes {
		return 0 // UNKNOWN: never indexed, so nothing matches
	}
	return int(rt)
}

// typeIndex holds one resource type's bindings: literal names (with "*"
// under its own key), prefixes, and the distinct prefix lengths in
// increasing order, so a check looks up name[:n] for each length n: as
// many map lookups as there are distinct prefix lengths, whatever the
// number of bindings.
type typeIndex struct {
	literal    map[string][]entry
	wildcard   []entry // literal["*"], kept apart: every check reads it
	prefixed   map[string][]entry
	prefixLens []int
}

// entry is a binding's entry, parsed for matching.
type entry struct {
	principalType, principalName string
	anyPrincipal                 bool
	host                         netip.Addr // invalid: matches no client
	anyHost                      bool
	op                           Operation
	deny                         bool
}

func buildIndex(bindings []Binding) *index {
	ix := &index{n: len(bindings)}
	for _, b := range bindings {
		i := indexOf(b.ResourceType)
		if i == 0 {
			continue
		}
		ti := ix.types[i]
		if ti == nil {
			ti = &typeIndex{literal: map[string][]entry{}, prefixed: map[string][]entry{}}
			ix.types[i] = ti
		}
		pk := splitPrincipal(b.Principal)
		e := entry{principalType: pk.typ, principalName: pk.name, anyPrincipal: pk.name == Wildcard,
			anyHost: b.Host == Wildcard, op: b.Operation, deny: b.Permission == Deny}
		if !e.anyHost {
			if h, err := netip.ParseAddr(b.Host); err == nil {
				e.host = h.Unmap()
			}
		}
		switch b.PatternType {
		case Literal:
			ti.literal[b.ResourceName] = append(ti.literal[b.ResourceName], e)
		case Prefixed:
			ti.prefixed[b.ResourceName] = append(ti.prefixed[b.ResourceName], e)
		}
	}
	for _, ti := range ix.types {
		if ti == nil {
			continue
		}
		lens := map[int]bool{}
		for p := range ti.prefixed {
			lens[len(p)] = true
		}
		for n := range lens {
			ti.prefixLens = append(ti.prefixLens, n)
		}
		sort.Ints(ti.prefixLens)
		ti.wildcard = ti.literal[Wildcard]
	}
	return ix
}
