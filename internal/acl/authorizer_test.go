package acl

import (
	"fmt"
	"net/netip"
	"testing"
)

var (
	clientIP = netip.MustParseAddr("10.0.0.7")
	otherIP  = netip.MustParseAddr("10.0.0.8")
)

func allow(rt ResourceType, name string, pt PatternType, principal string, op Operation) Binding {
	return Binding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: Wildcard, Operation: op, Permission: Allow}
}

func deny(rt ResourceType, name string, pt PatternType, principal string, op Operation) Binding {
	b := allow(rt, name, pt, principal, op)
	b.Permission = Deny
	return b
}

func enabled(bs ...Binding) *Authorizer {
	a := New(Config{Enabled: true, SuperUsers: []string{"User:admin"}})
	a.Set(bs)
	return a
}

func TestAuthorizeRules(t *testing.T) {
	hostBound := allow(Topic, "hosted", Literal, "User:alice", Read)
	hostBound.Host = clientIP.String()
	cases := []struct {
		name      string
		bindings  []Binding
		principal string
		host      netip.Addr
		rt        ResourceType
		resource  string
		op        Operation
		want      bool
	}{
		{"no acl: denied", nil, "User:alice", clientIP, Topic, "t", Read, false},
		{"super user without acl", nil, "User:admin", clientIP, Topic, "t", Delete, true},
		{"literal allow", []Binding{allow(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Read, true},
		{"literal allow, other name", []Binding{allow(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t2", Read, false},
		{"literal allow, other principal", []Binding{allow(Topic, "t", Literal, "User:alice", Read)}, "User:bob", clientIP, Topic, "t", Read, false},
		{"literal allow, other type", []Binding{allow(Group, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Read, false},
		{"read does not imply write", []Binding{allow(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Write, false},
		{"read implies describe", []Binding{allow(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Describe, true},
		{"write implies describe", []Binding{allow(Topic, "t", Literal, "User:alice", Write)}, "User:alice", clientIP, Topic, "t", Describe, true},
		{"delete implies describe", []Binding{allow(Topic, "t", Literal, "User:alice", Delete)}, "User:alice", clientIP, Topic, "t", Describe, true},
		{"alter implies describe", []Binding{allow(Topic, "t", Literal, "User:alice", Alter)}, "User:alice", clientIP, Topic, "t", Describe, true},
		{"create does not imply describe", []Binding{allow(Topic, "t", Literal, "User:alice", Create)}, "User:alice", clientIP, Topic, "t", Describe, false},
		{"alter_configs implies describe_configs", []Binding{allow(Topic, "t", Literal, "User:alice", AlterConfigs)}, "User:alice", clientIP, Topic, "t", DescribeConfigs, true},
		{"describe_configs does not imply alter_configs", []Binding{allow(Topic, "t", Literal, "User:alice", DescribeConfigs)}, "User:alice", clientIP, Topic, "t", AlterConfigs, false},
		{"all implies everything", []Binding{allow(Topic, "t", Literal, "User:alice", All)}, "User:alice", clientIP, Topic, "t", AlterConfigs, true},
		{"wildcard resource", []Binding{allow(Topic, Wildcard, Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "anything", Read, true},
		{"wildcard principal", []Binding{allow(Topic, "t", Literal, WildcardPrincipal, Read)}, "User:bob", clientIP, Topic, "t", Read, true},
		{"wildcard principal is of type User", []Binding{allow(Topic, "t", Literal, WildcardPrincipal, Read)}, "Group:ops", clientIP, Topic, "t", Read, false},
		{"prefixed allow", []Binding{allow(Topic, "tenant-a.", Prefixed, "User:alice", Write)}, "User:alice", clientIP, Topic, "tenant-a.orders", Write, true},
		{"prefixed allow, other prefix", []Binding{allow(Topic, "tenant-a.", Prefixed, "User:alice", Write)}, "User:alice", clientIP, Topic, "tenant-b.orders", Write, false},
		{"prefixed name equal to the prefix", []Binding{allow(Topic, "tenant-a.", Prefixed, "User:alice", Write)}, "User:alice", clientIP, Topic, "tenant-a.", Write, true},
		{"prefix longer than the name", []Binding{allow(Topic, "tenant-a.orders.x", Prefixed, "User:alice", Write)}, "User:alice", clientIP, Topic, "tenant-a.orders", Write, false},
		{"literal is not a prefix", []Binding{allow(Topic, "tenant", Literal, "User:alice", Write)}, "User:alice", clientIP, Topic, "tenant-a", Write, false},
		{"deny beats allow", []Binding{allow(Topic, "t", Literal, "User:alice", Read), deny(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Read, false},
		{"prefixed deny beats literal allow", []Binding{allow(Topic, "t.x", Literal, "User:alice", Read), deny(Topic, "t.", Prefixed, "User:alice", Read)}, "User:alice", clientIP, Topic, "t.x", Read, false},
		{"wildcard deny beats literal allow", []Binding{allow(Topic, "t", Literal, "User:alice", Read), deny(Topic, Wildcard, Literal, WildcardPrincipal, All)}, "User:alice", clientIP, Topic, "t", Read, false},
		{"deny of read does not deny describe", []Binding{allow(Topic, "t", Literal, "User:alice", Write), deny(Topic, "t", Literal, "User:alice", Read)}, "User:alice", clientIP, Topic, "t", Describe, true},
		{"deny of other principal", []Binding{allow(Topic, "t", Literal, "User:alice", Read), deny(Topic, "t", Literal, "User:bob", Read)}, "User:alice", clientIP, Topic, "t", Read, true},
		{"super user despite deny", []Binding{deny(Topic, "t", Literal, WildcardPrincipal, All)}, "User:admin", clientIP, Topic, "t", Read, true},
		{"host matches", []Binding{hostBound}, "User:alice", clientIP, Topic, "hosted", Read, true},
		{"host differs", []Binding{hostBound}, "User:alice", otherIP, Topic, "hosted", Read, false},
		{"host as 4in6", []Binding{hostBound}, "User:alice", netip.AddrFrom16(clientIP.As16()), Topic, "hosted", Read, true},
		{"unknown host only matches *", []Binding{hostBound}, "User:alice", netip.Addr{}, Topic, "hosted", Read, false},
		{"cluster", []Binding{allow(Cluster, ClusterName, Literal, "User:alice", Alter)}, "User:alice", clientIP, Cluster, ClusterName, Alter, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := enabled(c.bindings...)
			p := splitPrincipal(c.principal)
			if got := a.Authorize(p.typ, p.name, c.host, c.rt, c.resource, c.op); got != c.want {
				t.Errorf("Authorize(%s, %s %s:%s) = %v, want %v with %v", c.principal, c.op, c.rt, c.resource, got, c.want, c.bindings)
			}
		})
	}
}

func TestAuthorizeDisabledAndNoACL(t *testing.T) {
	off := New(Config{})
	if !off.Authorize("User", "ANONYMOUS", netip.Addr{}, Topic, "t", Delete) {
		t.Error("a disabled authorizer denied")
	}
	var none *Authorizer
	if !none.Authorize("User", "x", netip.Addr{}, Cluster, ClusterName, Alter) {
		t.Error("a nil authorizer denied")
	}
	open := New(Config{Enabled: true, AllowIfNoACL: true})
	open.Set([]Binding{allow(Topic, "guarded", Literal, "User:alice", Read)})
	if !open.Authorize("User", "bob", clientIP, Topic, "free", Read) {
		t.Error("allow.everyone.if.no.acl.found: a topic without ACLs was denied")
	}
	if open.Authorize("User", "bob", clientIP, Topic, "guarded", Read) {
		t.Error("allow.everyone.if.no.acl.found: a topic with ACLs for others was allowed")
	}
	if !open.Authorize("User", "bob", clientIP, Group, "g", Read) {
		t.Error("allow.everyone.if.no.acl.found: a resource type without ACLs was denied")
	}
}

func TestAuthorizeAny(t *testing.T) {
	a := enabled(allow(Topic, "t", Literal, "User:alice", Write))
	if !a.AuthorizeAny("User", "alice", clientIP, Topic, Write) {
		t.Error("WRITE on one topic: AuthorizeAny(WRITE) denied")
	}
	if a.AuthorizeAny("User", "bob", clientIP, Topic, Write) {
		t.Error("bob has no ACL: AuthorizeAny allowed")
	}
	a.Set([]Binding{allow(Topic, "t", Literal, "User:alice", Write), deny(Topic, Wildcard, Literal, "User:alice", Write)})
	if a.AuthorizeAny("User", "alice", clientIP, Topic, Write) {
		t.Error("a DENY on every topic: AuthorizeAny allowed")
	}
}

func TestAuthorizedOperations(t *testing.T) {
	a := enabled(allow(Topic, "t", Literal, "User:alice", Read))
	got := a.AuthorizedOperations("User", "alice", clientIP, Topic, "t", SupportedOperations(Topic))
	want := int32(1<<uint(Read) | 1<<uint(Describe))
	if got != want {
		t.Errorf("authorized operations %b, want %b", got, want)
	}
}

func TestFilterMatches(t *testing.T) {
	str := func(s string) *string { return &s }
	lit := allow(Topic, "orders", Literal, "User:alice", Read)
	wild := allow(Topic, Wildcard, Literal, "User:alice", Read)
	pre := allow(Topic, "ord", Prefixed, "User:alice", Read)
	other := allow(Group, "orders", Literal, "User:bob", Write)
	cases := []struct {
		name string
		f    Filter
		want []bool // lit, wild, pre, other
	}{
		{"any", Filter{ResourceType: AnyResource, PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}, []bool{true, true, true, true}},
		{"any named orders", Filter{ResourceType: AnyResource, ResourceName: str("orders"), PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}, []bool{true, false, false, true}},
		{"match orders", Filter{ResourceType: Topic, ResourceName: str("orders"), PatternType: Match, Operation: AnyOperation, Permission: AnyPermission}, []bool{true, true, true, false}},
		{"literal orders", Filter{ResourceType: Topic, ResourceName: str("orders"), PatternType: Literal, Operation: AnyOperation, Permission: AnyPermission}, []bool{true, false, false, false}},
		{"prefixed ord", Filter{ResourceType: Topic, ResourceName: str("ord"), PatternType: Prefixed, Operation: AnyOperation, Permission: AnyPermission}, []bool{false, false, true, false}},
		{"principal bob", Filter{ResourceType: AnyResource, PatternType: AnyPattern, Principal: str("User:bob"), Operation: AnyOperation, Permission: AnyPermission}, []bool{false, false, false, true}},
		{"operation write", Filter{ResourceType: AnyResource, PatternType: AnyPattern, Operation: Write, Permission: AnyPermission}, []bool{false, false, false, true}},
		{"deny", Filter{ResourceType: AnyResource, PatternType: AnyPattern, Operation: AnyOperation, Permission: Deny}, []bool{false, false, false, false}},
		{"host *", Filter{ResourceType: AnyResource, PatternType: AnyPattern, Host: str("*"), Operation: AnyOperation, Permission: AnyPermission}, []bool{true, true, true, true}},
	}
	for _, c := range cases {
		for i, b := range []Binding{lit, wild, pre, other} {
			if got := c.f.Matches(b); got != c.want[i] {
				t.Errorf("%s: Matches(%v) = %v, want %v", c.name, b, got, c.want[i])
			}
		}
	}
}

func TestValidate(t *testing.T) {
	good := allow(Topic, "t", Literal, "User:alice", Read)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Binding){
		func(b *Binding) { b.ResourceType = AnyResource },
		func(b *Binding) { b.ResourceType = 42 },
		func(b *Binding) { b.PatternType = Match },
		func(b *Binding) { b.PatternType = AnyPattern },
		func(b *Binding) { b.Operation = AnyOperation },
		func(b *Binding) { b.Operation = 99 },
		func(b *Binding) { b.Permission = AnyPermission },
		func(b *Binding) { b.ResourceName = "" },
		func(b *Binding) { b.Principal = "alice" },
		func(b *Binding) { b.Principal = "User:" },
		func(b *Binding) { b.Host = "" },
		func(b *Binding) { b.Host = "not-an-ip" },
		func(b *Binding) { b.ResourceType, b.ResourceName = Cluster, "mine" },
		func(b *Binding) { b.ResourceName = string(make([]byte, MaxNameBytes+1)) },
	}
	for i, f := range bad {
		b := good
		f(&b)
		if err := b.Validate(); err == nil {
			t.Errorf("case %d: %v validated", i, b)
		}
	}
	if err := (Filter{ResourceType: 9, PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}).Validate(); err == nil {
		t.Error("a filter of resource type 9 validated")
	}
	if err := (Filter{ResourceType: 0, PatternType: AnyPattern, Operation: AnyOperation, Permission: AnyPermission}).Validate(); err == nil {
		t.Error("a filter of resource type UNKNOWN validated")
	}
}

// manyBindings is n bindings over n/4 principals, literal and prefixed,
// topics and groups, with the one the benchmark's principal needs among
// them.
func manyBindings(n int) []Binding {
	bs := make([]Binding, 0, n)
	for i := 0; len(bs) < n-2; i++ {
		p := fmt.Sprintf("User:u%d", i/4)
		bs = append(bs, allow(Topic, fmt.Sprintf("topic-%d", i), Literal, p, Read))
		bs = append(bs, allow(Topic, fmt.Sprintf("tenant-%d.", i), Prefixed, p, Write))
		bs = append(bs, allow(Group, fmt.Sprintf("group-%d", i), Literal, p, Read))
	}
	bs = bs[:n-2]
	bs = append(bs, allow(Topic, "bench.", Prefixed, "User:bench", Write), deny(Topic, "bench.secret", Literal, "User:bench", Write))
	return bs
}

func TestAuthorizeAllocatesNothing(t *testing.T) {
	for _, n := range []int{10, 10_000} {
		a := enabled(manyBindings(n)...)
		allocs := testing.AllocsPerRun(1000, func() {
			if !a.Authorize("User", "bench", clientIP, Topic, "bench.orders", Write) {
				t.Fatal("denied")
			}
			if a.Authorize("User", "bench", clientIP, Topic, "bench.secret", Write) {
				t.Fatal("allowed")
			}
		})
		if allocs != 0 {
			t.Errorf("%d bindings: %.1f allocations per check", n, allocs)
		}
	}
}

func BenchmarkAuthorize(b *testing.B) {
	off := New(Config{})
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if !off.Authorize("User", "bench", clientIP, Topic, "bench.orders", Write) {
				b.Fatal("denied")
			}
		}
	})
	for _, n := range []int{10, 10_000} {
		a := enabled(manyBindings(n)...)
		b.Run(fmt.Sprintf("acls=%d/allowed", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if !a.Authorize("User", "bench", clientIP, Topic, "bench.orders", Write) {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("acls=%d/denied", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if a.Authorize("User", "bench", clientIP, Topic, "bench.secret", Write) {
					b.Fatal("allowed")
				}
			}
		})
		b.Run(fmt.Sprintf("acls=%d/no-match", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if a.Authorize("User", "nobody", clientIP, Topic, "topic-1", Read) {
					b.Fatal("allowed")
				}
			}
		})
	}
}
