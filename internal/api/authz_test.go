package api

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/vfs"
)

func authzBroker(t *testing.T) *Handler {
	t.Helper()
	return startTestBroker(t, Config{Authorizer: acl.Config{Enabled: true, SuperUsers: []string{adminPrincipal.String()}}}).Handler
}

func createACLs(t *testing.T, h *Handler, as server.Principal, bs ...acl.Binding) *kmsg.CreateACLsResponse {
	t.Helper()
	r := kmsg.NewPtrCreateACLsRequest()
	r.SetVersion(3)
	for _, b := range bs {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = b.ResourceType, b.ResourceName, b.PatternType
		c.Principal, c.Host, c.Operation, c.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
		r.Creations = append(r.Creations, c)
	}
	return serveAs(t, h, as, 30, r).(*kmsg.CreateACLsResponse)
}

func binding(rt acl.ResourceType, name string, pt acl.PatternType, principal string, op acl.Operation, perm acl.Permission) acl.Binding {
	return acl.Binding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: acl.Wildcard, Operation: op, Permission: perm}
}

func metadataTopics(t *testing.T, h *Handler, p server.Principal, names ...string) map[string]int16 {
	t.Helper()
	r := kmsg.NewPtrMetadataRequest()
	r.SetVersion(12)
	r.AllowAutoTopicCreation = false
	if names != nil {
		for _, n := range names {
			r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{Topic: str(n)})
		}
	} else {
		r.Topics = nil
	}
	out := map[string]int16{}
	for _, st := range serveAs(t, h, p, 3, r).(*kmsg.MetadataResponse).Topics {
		out[*st.Topic] = st.ErrorCode
	}
	return out
}

// TestMetadataHidesOtherTenants: a principal with prefixed ACLs on its own
// tenant's topics sees those topics in a Metadata request for all topics
// and nothing of the other tenant's; naming another tenant's topic, or one
// that does not exist, is TOPIC_AUTHORIZATION_FAILED (no existence leaks).
func TestMetadataHidesOtherTenants(t *testing.T) {
	h := authzBroker(t)
	for _, name := range []string{"a.orders", "a.payments", "b.orders", "b.secrets"} {
		h.adminMu.Lock()
		if _, err := h.createTopicLocked(name, 1, nil); err != nil {
			t.Fatal(err)
		}
		h.adminMu.Unlock()
	}
	resp := createACLs(t, h, adminPrincipal,
		binding(acl.Topic, "a.", acl.Prefixed, "User:alice", acl.Read, acl.Allow),
		binding(acl.Topic, "a.payments", acl.Literal, "User:alice", acl.All, acl.Deny),
		binding(acl.Topic, "b.", acl.Prefixed, "User:bob", acl.Write, acl.Allow))
	for _, r := range resp.Results {
		if r.ErrorCode != 0 {
			t.Fatalf("CreateACLs: %v %v", kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage)
		}
	}
	alice, bob := server.User("alice"), server.User("bob")
	if got := metadataTopics(t, h, alice); len(got) != 1 || got["a.orders"] != 0 {
		t.Errorf("alice sees %v, want a.orders only (a.payments denied, b.* not hers)", got)
	}
	if got := metadataTopics(t, h, bob); len(got) != 2 || got["b.orders"] != 0 || got["b.secrets"] != 0 {
		t.Errorf("bob sees %v, want b.orders and b.secrets (WRITE implies DESCRIBE)", got)
	}
	if got := metadataTopics(t, h, server.Anonymous); len(got) != 0 {
		t.Errorf("anonymous sees %v, want nothing", got)
	}
	if got := metadataTopics(t, h, adminPrincipal); len(got) < 4 {
		t.Errorf("the super user sees %v, want every topic", got)
	}
	named := metadataTopics(t, h, alice, "b.secrets", "no-such-topic", "a.orders")
	if named["b.secrets"] != kerr.TopicAuthorizationFailed.Code || named["no-such-topic"] != kerr.TopicAuthorizationFailed.Code || named["a.orders"] != 0 {
		t.Errorf("alice naming topics: %v", named)
	}
}

// TestAuthorizeHostAndSuperUser: an ACL bound to another host does not
// apply to this client's address; a super user needs no ACL.
func TestAuthorizeHostAndSuperUser(t *testing.T) {
	h := authzBroker(t)
	other := binding(acl.Topic, acl.Wildcard, acl.Literal, "User:carol", acl.Describe, acl.Allow)
	other.Host = "10.1.2.3"
	local := binding(acl.Topic, acl.Wildcard, acl.Literal, "User:dave", acl.Describe, acl.Allow)
	local.Host = "127.0.0.1"
	createACLs(t, h, adminPrincipal, other, local)
	h.adminMu.Lock()
	h.createTopicLocked("t", 1, nil)
	h.adminMu.Unlock()
	if got := metadataTopics(t, h, server.User("carol"), "t"); got["t"] != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("carol's ACL is for 10.1.2.3, the request came from 127.0.0.1: %v", got)
	}
	if got := metadataTopics(t, h, server.User("dave"), "t"); got["t"] != 0 {
		t.Errorf("dave's ACL is for 127.0.0.1: %v", got)
	}
	if got := metadataTopics(t, h, adminPrincipal, "t"); got["t"] != 0 {
		t.Errorf("super user: %v", got)
	}
}

// TestACLAdminValidation: Kafka's errors for bad creations and filters,
// per item, with the others done; the admin keys need the cluster
// permissions; without an authorizer they answer SECURITY_DISABLED.
func TestACLAdminValidation(t *testing.T) {
	h := authzBroker(t)
	good := binding(acl.Topic, "t", acl.Literal, "User:alice", acl.Read, acl.Allow)
	bad := []acl.Binding{
		binding(acl.Topic, "t", acl.Literal, "alice", acl.Read, acl.Allow),                  // principal not Type:name
		binding(acl.AnyResource, "t", acl.Literal, "User:alice", acl.Read, acl.Allow),       // ANY resource
		binding(acl.Topic, "t", acl.Match, "User:alice", acl.Read, acl.Allow),               // MATCH pattern
		binding(acl.Topic, "t", acl.Literal, "User:alice", 77, acl.Allow),                   // unknown operation
		binding(acl.Topic, "t", acl.Literal, "User:alice", acl.Read, 9),                     // unknown permission
		binding(acl.Cluster, "my-cluster", acl.Literal, "User:alice", acl.Alter, acl.Allow), // the cluster is kafka-cluster
		binding(acl.Topic, strings.Repeat("x", acl.MaxNameBytes+1), acl.Literal, "User:alice", acl.Read, acl.Allow),
	}
	resp := createACLs(t, h, adminPrincipal, append([]acl.Binding{good, good}, bad...)...)
	for i, r := range resp.Results {
		want := kerr.InvalidRequest.Code
		if i < 2 {
			want = 0
		}
		if r.ErrorCode != want {
			t.Errorf("creation %d: %v (%v), want %v", i, kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage, kerr.ErrorForCode(want))
		}
	}
	if n := len(h.cfg.Catalog.ACLs()); n != 1 {
		t.Errorf("%d bindings stored, want 1 (the good one, once)", n)
	}

	describe := func(as server.Principal, rt acl.ResourceType, name *string, pt acl.PatternType) *kmsg.DescribeACLsResponse {
		r := kmsg.NewPtrDescribeACLsRequest()
		r.SetVersion(3)
		r.ResourceType, r.ResourceName, r.ResourcePatternType, r.Operation, r.PermissionType = rt, name, pt, acl.AnyOperation, acl.AnyPermission
		return serveAs(t, h, as, 29, r).(*kmsg.DescribeACLsResponse)
	}
	if d := describe(adminPrincipal, acl.Topic, str("t"), acl.Match); d.ErrorCode != 0 || len(d.Resources) != 1 || len(d.Resources[0].ACLs) != 1 {
		t.Errorf("describe MATCH t: %+v", d)
	}
	if d := describe(adminPrincipal, 42, nil, acl.AnyPattern); d.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("describe of resource type 42: %v", kerr.ErrorForCode(d.ErrorCode))
	}
	if d := describe(adminPrincipal, acl.Topic, nil, 0); d.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("describe of pattern type UNKNOWN: %v", kerr.ErrorForCode(d.ErrorCode))
	}
	if d := describe(server.User("alice"), acl.AnyResource, nil, acl.AnyPattern); d.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("describe by alice (no DESCRIBE on the cluster): %v", kerr.ErrorForCode(d.ErrorCode))
	}
	if r := createACLs(t, h, server.User("alice"), good); r.Results[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("create by alice: %v", kerr.ErrorForCode(r.Results[0].ErrorCode))
	}

	del := kmsg.NewPtrDeleteACLsRequest()
	del.SetVersion(3)
	for _, rt := range []acl.ResourceType{acl.Topic, 33} {
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = rt, acl.AnyPattern, acl.AnyOperation, acl.AnyPermission
		del.Filters = append(del.Filters, f)
	}
	dr := serveAs(t, h, adminPrincipal, 31, del).(*kmsg.DeleteACLsResponse)
	if dr.Results[0].ErrorCode != 0 || len(dr.Results[0].MatchingACLs) != 1 || dr.Results[0].MatchingACLs[0].Principal != "User:alice" {
		t.Errorf("delete: %+v", dr.Results[0])
	}
	if dr.Results[1].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("delete with resource type 33: %v", kerr.ErrorForCode(dr.Results[1].ErrorCode))
	}
	if n := len(h.cfg.Catalog.ACLs()); n != 0 {
		t.Errorf("%d bindings left", n)
	}

	// Too many creations in one request: refused, nothing stored.
	many := make([]acl.Binding, maxACLsPerRequest+1)
	for i := range many {
		many[i] = good
	}
	for _, r := range createACLs(t, h, adminPrincipal, many...).Results {
		if r.ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("creation beyond the per-request bound: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if n := len(h.cfg.Catalog.ACLs()); n != 0 {
		t.Errorf("%d bindings stored from a refused request", n)
	}

	off := startTestBroker(t, Config{}).Handler
	if r := createACLs(t, off, adminPrincipal, good); r.Results[0].ErrorCode != kerr.SecurityDisabled.Code {
		t.Errorf("create without an authorizer: %v", kerr.ErrorForCode(r.Results[0].ErrorCode))
	}
}

// TestACLsSurviveRestart: ACLs created through CreateACLs are enforced by
// a handler opened again on the same data directory.
func TestACLsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *Handler {
		catalog, err := meta.Open(vfs.Default, filepath.Join(dir, "meta"))
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Config{FS: vfs.Default, DataDir: dir, Catalog: catalog, Defaults: KafkaDefaults(),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Authorizer: acl.Config{Enabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	h.adminMu.Lock()
	h.createTopicLocked("kept", 1, nil)
	h.adminMu.Unlock()
	// No super user here: the ACL that lets admin create ACLs is made
	// through the catalogue, as an operator's first ACL would be made
	// with --super-users.
	h.cfg.Catalog.CreateACLs([]acl.Binding{binding(acl.Cluster, acl.ClusterName, acl.Literal, "User:admin", acl.Alter, acl.Allow)})
	h.aclMu.Lock()
	h.reloadACLsLocked()
	h.aclMu.Unlock()
	if r := createACLs(t, h, adminPrincipal, binding(acl.Topic, "kept", acl.Literal, "User:alice", acl.Read, acl.Allow)); r.Results[0].ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(r.Results[0].ErrorCode))
	}
	h.Close()
	h.cfg.Catalog.Close()

	h = open()
	defer func() { h.Close(); h.cfg.Catalog.Close() }()
	if h.Authorizer().Len() != 2 {
		t.Fatalf("%d bindings after the restart, want 2", h.Authorizer().Len())
	}
	if got := metadataTopics(t, h, server.User("alice"), "kept"); got["kept"] != 0 {
		t.Errorf("alice's READ on kept after the restart: %v", got)
	}
	if got := metadataTopics(t, h, server.User("mallory"), "kept"); got["kept"] != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("mallory after the restart: %v", got)
	}
}

// TestAuthorizeCheckAllocatesNothing: the check Produce and Fetch make per
// topic allocates nothing, with the authorizer on and off.
func TestAuthorizeCheckAllocatesNothing(t *testing.T) {
	h := authzBroker(t)
	createACLs(t, h, adminPrincipal, binding(acl.Topic, "t.", acl.Prefixed, "User:alice", acl.Write, acl.Allow))
	sess := server.NewSession("PLAINTEXT", server.Plaintext, nil)
	sess.SetPrincipal(server.User("alice"))
	creq := &server.Request{Session: sess, Remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	if n := testing.AllocsPerRun(1000, func() {
		if !h.allowed(creq, acl.Topic, "t.orders", acl.Write) {
			t.Fatal("denied")
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per check", n)
	}
}

// TestAuthorizeMoreRules: what the table test does not reach: KIP-430
// topic authorized operations in Metadata, an idempotent producer's
// InitProducerId (IDEMPOTENT_WRITE on the cluster or WRITE on any topic),
// a replica's fetch (CLUSTER_ACTION, not READ), a DENY on a transactional
// id refusing the whole produce, and a hostile filter's over-long name.
func TestAuthorizeMoreRules(t *testing.T) {
	h := authzBroker(t)
	h.adminMu.Lock()
	h.createTopicLocked("ops", 1, nil)
	h.adminMu.Unlock()
	createACLs(t, h, adminPrincipal,
		binding(acl.Topic, "ops", acl.Literal, "User:reader", acl.Read, acl.Allow),
		binding(acl.Topic, "ops", acl.Literal, "User:writer", acl.Write, acl.Allow),
		binding(acl.TransactionalID, "tx", acl.Literal, "User:writer", acl.Write, acl.Deny))
	reader, writer := server.User("reader"), server.User("writer")

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(10)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: str("ops")}}
	md.IncludeTopicAuthorizedOperations = true
	got := serveAs(t, h, reader, 3, md).(*kmsg.MetadataResponse).Topics[0].AuthorizedOperations
	if want := int32(1<<uint(acl.Read) | 1<<uint(acl.Describe)); got != want {
		t.Errorf("reader's authorized operations on ops %b, want READ|DESCRIBE %b", got, want)
	}

	idem := func(p server.Principal) int16 {
		r := kmsg.NewPtrInitProducerIDRequest()
		r.SetVersion(4)
		return serveAs(t, h, p, 22, r).(*kmsg.InitProducerIDResponse).ErrorCode
	}
	if code := idem(writer); code != 0 {
		t.Errorf("idempotent InitProducerId with WRITE on a topic: %v", kerr.ErrorForCode(code))
	}
	if code := idem(reader); code != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("idempotent InitProducerId with READ only: %v", kerr.ErrorForCode(code))
	}

	fetch := authzCases[1].request().(*kmsg.FetchRequest)
	fetch.SetVersion(12)
	fetch.Topics[0].Topic = "ops"
	fetch.ReplicaID = 1 // a follower's fetch
	if codes := authzErrors(serveAs(t, h, reader, 1, fetch)); !codes[kerr.TopicAuthorizationFailed.Code] {
		t.Errorf("a replica fetch by a principal with READ but no CLUSTER_ACTION: %v", codes)
	}
	fetch.ReplicaID = -1
	if codes := authzErrors(serveAs(t, h, reader, 1, fetch)); len(codes) > 0 {
		t.Errorf("a consumer fetch with READ: %v", codes)
	}

	produce := authzCases[0].request().(*kmsg.ProduceRequest)
	produce.SetVersion(9)
	produce.Topics[0].Topic = "ops"
	produce.TransactionID = str("tx")
	if codes := authzErrors(serveAs(t, h, writer, 0, produce)); !codes[kerr.TransactionalIDAuthorizationFailed.Code] || codes[kerr.TopicAuthorizationFailed.Code] {
		t.Errorf("a transactional produce with the transactional id denied: %v", codes)
	}

	d := kmsg.NewPtrDescribeACLsRequest()
	d.SetVersion(3)
	d.ResourceType, d.ResourceName, d.ResourcePatternType, d.Operation, d.PermissionType = acl.Topic, str(strings.Repeat("n", 1<<20)), acl.Match, acl.AnyOperation, acl.AnyPermission
	if code := serveAs(t, h, adminPrincipal, 29, d).(*kmsg.DescribeACLsResponse).ErrorCode; code != kerr.InvalidRequest.Code {
		t.Errorf("a filter naming a 1 MiB resource: %v", kerr.ErrorForCode(code))
	}
}

// BenchmarkCreateACLWithMany is one CreateACLs of one binding on a broker
// holding n: the record's fsync, then the authorizer's index rebuilt from
// every binding (an ACL change costs O(n), a check O(1)).
func BenchmarkCreateACLWithMany(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("acls=%d", n), func(b *testing.B) {
			tb := startTestBroker(b, Config{Authorizer: acl.Config{Enabled: true, SuperUsers: []string{adminPrincipal.String()}}})
			h := tb.Handler
			var bs []acl.Binding
			for i := 0; i < n; i++ {
				bs = append(bs, binding(acl.Topic, fmt.Sprintf("t-%d", i), acl.Literal, "User:many", acl.Read, acl.Allow))
			}
			h.cfg.Catalog.CreateACLs(bs)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := kmsg.NewPtrCreateACLsRequest()
				r.SetVersion(3)
				c := kmsg.NewCreateACLsRequestCreation()
				c.ResourceType, c.ResourceName, c.ResourcePatternType = acl.Topic, fmt.Sprintf("new-%d", i), acl.Literal
				c.Principal, c.Host, c.Operation, c.PermissionType = "User:x", "*", acl.Read, acl.Allow
				r.Creations = append(r.Creations, c)
				if code := serveAs(b, h, adminPrincipal, 30, r).(*kmsg.CreateACLsResponse).Results[0].ErrorCode; code != 0 {
					b.Fatal(kerr.ErrorForCode(code))
				}
			}
		})
	}
}

// TestDescribeTransactionsHidesTopics: a principal that may describe a
// transaction sees its partitions of the topics it may describe only.
func TestDescribeTransactionsHidesTopics(t *testing.T) {
	h := authzBroker(t)
	for _, name := range []string{"seen", "hidden"} {
		h.adminMu.Lock()
		h.createTopicLocked(name, 1, nil)
		h.adminMu.Unlock()
	}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.SetVersion(4)
	init.TransactionalID, init.TransactionTimeoutMillis = str("tx-topics"), 60_000
	ir := serveAs(t, h, adminPrincipal, 22, init).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(ir.ErrorCode))
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.SetVersion(3)
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "tx-topics", ir.ProducerID, ir.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "seen", Partitions: []int32{0}}, {Topic: "hidden", Partitions: []int32{0}}}
	if codes := responseErrorCodes(serveAs(t, h, adminPrincipal, 24, add)); len(codes) > 0 {
		t.Fatalf("AddPartitionsToTxn: %v", codes)
	}
	createACLs(t, h, adminPrincipal,
		binding(acl.TransactionalID, "tx-topics", acl.Literal, "User:auditor", acl.Describe, acl.Allow),
		binding(acl.Topic, "seen", acl.Literal, "User:auditor", acl.Describe, acl.Allow))
	d := kmsg.NewPtrDescribeTransactionsRequest()
	d.TransactionalIDs = []string{"tx-topics"}
	for _, p := range []server.Principal{adminPrincipal, server.User("auditor")} {
		st := serveAs(t, h, p, 65, d).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]
		var names []string
		for _, tp := range st.Topics {
			names = append(names, tp.Topic)
		}
		want := "hidden,seen"
		if p != adminPrincipal {
			want = "seen"
		}
		sort.Strings(names)
		if strings.Join(names, ",") != want || st.ErrorCode != 0 {
			t.Errorf("%s sees topics %v (%v), want %s", p, names, kerr.ErrorForCode(st.ErrorCode), want)
		}
	}
}
