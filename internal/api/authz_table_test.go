package api

import (
	"context"
	"net"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// The resources every authorization case names: the table's grants are
// given on these.
const (
	authzTopic = "authz-topic"
	authzGroup = "authz-group"
	authzTxnID = "authz-txn"
)

var (
	allowedPrincipal = server.User("allowed")
	deniedPrincipal  = server.User("denied")
	adminPrincipal   = server.User("admin")
)

// authzCase is how the authorization table test serves one API key: a
// request naming the resources above and, for a key that filters rather
// than refuses, whether the answer shows them.
type authzCase struct {
	request func() kmsg.Request
	visible func(kmsg.Response) bool
}

func str(s string) *string { return &s }

// authzCases has a case for every served key; TestAuthorizationTable
// fails for a key without one (a key cannot be served untested).
var authzCases = map[int16]authzCase{
	0: {request: func() kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.Acks = 1
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = authzTopic
		rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: mkPlain(1)}}
		r.Topics = append(r.Topics, rt)
		return r
	}},
	1: {request: func() kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.MaxBytes, r.MaxWaitMillis = 1<<20, 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = authzTopic
		p := kmsg.NewFetchRequestTopicPartition()
		p.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, p)
		r.Topics = append(r.Topics, rt)
		return r
	}},
	2: {request: func() kmsg.Request {
		r := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = authzTopic
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Timestamp = -1
		rt.Partitions = append(rt.Partitions, p)
		r.Topics = append(r.Topics, rt)
		return r
	}},
	3: {request: func() kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.Topics = []kmsg.MetadataRequestTopic{{Topic: str(authzTopic)}}
		return r
	}},
	8: {request: func() kmsg.Request {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.Generation = authzGroup, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = authzTopic
		rt.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 0, LeaderEpoch: -1}}
		r.Topics = append(r.Topics, rt)
		return r
	}},
	9: {request: func() kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = authzGroup
		g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: authzTopic, Partitions: []int32{0}}}
		r.Groups = append(r.Groups, g)
		return r
	}},
	10: {request: func() kmsg.Request {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorKeys = []string{authzGroup}
		return r
	}},
	11: {request: func() kmsg.Request {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = authzGroup, 10_000, 10_000, "consumer"
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0}}}
		return r // no member id: MEMBER_ID_REQUIRED at once (KIP-394)
	}},
	12: {request: func() kmsg.Request {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = authzGroup, "nobody", 1
		return r
	}},
	13: {request: func() kmsg.Request {
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group = authzGroup
		r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "nobody"}}
		return r
	}},
	14: {request: func() kmsg.Request {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = authzGroup, "nobody", 1
		return r
	}},
	15: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = []string{authzGroup}
		return r
	}},
	16: {request: func() kmsg.Request { return kmsg.NewPtrListGroupsRequest() }, visible: func(r kmsg.Response) bool {
		for _, g := range r.(*kmsg.ListGroupsResponse).Groups {
			if g.Group == authzGroup {
				return true
			}
		}
		return false
	}},
	18: {request: func() kmsg.Request { return kmsg.NewPtrApiVersionsRequest() }},
	19: {request: func() kmsg.Request {
		r := kmsg.NewPtrCreateTopicsRequest()
		r.ValidateOnly = true
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = authzTopic, 1, 1
		r.Topics = append(r.Topics, rt)
		return r
	}},
	20: {request: func() kmsg.Request {
		r := kmsg.NewPtrDeleteTopicsRequest()
		r.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: str(authzTopic)}}
		r.TopicNames = []string{authzTopic}
		return r
	}},
	21: {request: func() kmsg.Request {
		r := kmsg.NewPtrDeleteRecordsRequest()
		r.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: authzTopic, Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 0}}}}
		return r
	}},
	22: {request: func() kmsg.Request {
		r := kmsg.NewPtrInitProducerIDRequest()
		r.TransactionalID, r.TransactionTimeoutMillis = str(authzTxnID), 60_000
		return r
	}},
	23: {request: func() kmsg.Request {
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: authzTopic, Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1, LeaderEpoch: 0}}}}
		return r
	}},
	24: {request: func() kmsg.Request {
		r := kmsg.NewPtrAddPartitionsToTxnRequest()
		r.SetVersion(3) // v4+ is a broker's request (CLUSTER_ACTION): the client's is v0-3
		r.TransactionalID, r.ProducerID, r.ProducerEpoch = authzTxnID, 1, 0
		r.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: authzTopic, Partitions: []int32{0}}}
		return r
	}},
	25: {request: func() kmsg.Request {
		r := kmsg.NewPtrAddOffsetsToTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = authzTxnID, 1, 0, authzGroup
		return r
	}},
	26: {request: func() kmsg.Request {
		r := kmsg.NewPtrEndTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch = authzTxnID, 1, 0
		return r
	}},
	27: {request: func() kmsg.Request {
		r := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch = 123456, 0
		m.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: authzTopic, Partitions: []int32{0}}}
		r.Markers = append(r.Markers, m)
		return r
	}},
	28: {request: func() kmsg.Request {
		r := kmsg.NewPtrTxnOffsetCommitRequest()
		r.TransactionalID, r.Group, r.ProducerID, r.ProducerEpoch, r.Generation = authzTxnID, authzGroup, 1, 0, -1
		r.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: authzTopic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 0, LeaderEpoch: -1}}}}
		return r
	}},
	29: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeACLsRequest()
		r.ResourceType, r.ResourcePatternType, r.Operation, r.PermissionType = acl.AnyResource, acl.AnyPattern, acl.AnyOperation, acl.AnyPermission
		return r
	}},
	30: {request: func() kmsg.Request {
		r := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = acl.Topic, "authz-created", acl.Literal
		c.Principal, c.Host, c.Operation, c.PermissionType = "User:someone", "*", acl.Read, acl.Allow
		r.Creations = append(r.Creations, c)
		return r
	}},
	31: {request: func() kmsg.Request {
		r := kmsg.NewPtrDeleteACLsRequest()
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourceName, f.ResourcePatternType = acl.Topic, str("authz-created"), acl.Literal
		f.Operation, f.PermissionType = acl.AnyOperation, acl.AnyPermission
		r.Filters = append(r.Filters, f)
		return r
	}},
	32: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: authzTopic}}
		return r
	}},
	33: {request: func() kmsg.Request {
		r := kmsg.NewPtrAlterConfigsRequest()
		r.ValidateOnly = true
		r.Resources = []kmsg.AlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: authzTopic}}
		return r
	}},
	35: {request: func() kmsg.Request { return kmsg.NewPtrDescribeLogDirsRequest() }},
	37: {request: func() kmsg.Request {
		r := kmsg.NewPtrCreatePartitionsRequest()
		r.ValidateOnly = true
		r.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: authzTopic, Count: 2}}
		return r
	}},
	42: {request: func() kmsg.Request {
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{authzGroup}
		return r
	}},
	44: {request: func() kmsg.Request {
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r.ValidateOnly = true
		r.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: authzTopic}}
		return r
	}},
	47: {request: func() kmsg.Request {
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = authzGroup
		r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: authzTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
		return r
	}},
	60: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeClusterRequest()
		r.IncludeClusterAuthorizedOperations = true
		return r
	}, visible: func(r kmsg.Response) bool { return r.(*kmsg.DescribeClusterResponse).ClusterAuthorizedOperations > 0 }},
	61: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeProducersRequest()
		r.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: authzTopic, Partitions: []int32{0}}}
		return r
	}},
	65: {request: func() kmsg.Request {
		r := kmsg.NewPtrDescribeTransactionsRequest()
		r.TransactionalIDs = []string{authzTxnID}
		return r
	}},
	66: {request: func() kmsg.Request { return kmsg.NewPtrListTransactionsRequest() }, visible: func(r kmsg.Response) bool {
		for _, s := range r.(*kmsg.ListTransactionsResponse).TransactionStates {
			if s.TransactionalID == authzTxnID {
				return true
			}
		}
		return false
	}},
	68: {request: func() kmsg.Request {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberEpoch, r.RebalanceTimeoutMillis = authzGroup, 0, 10_000
		r.SubscribedTopicNames = []string{authzTopic}
		return r
	}},
	69: {request: func() kmsg.Request {
		r := kmsg.NewPtrConsumerGroupDescribeRequest()
		r.Groups = []string{authzGroup}
		return r
	}},

	// The sibling parts' keys (served once they merge).
	17: {request: func() kmsg.Request {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = "PLAIN"
		return r
	}},
	36: {request: func() kmsg.Request { return kmsg.NewPtrSASLAuthenticateRequest() }},
	48: {request: func() kmsg.Request { return kmsg.NewPtrDescribeClientQuotasRequest() }},
	49: {request: func() kmsg.Request {
		r := kmsg.NewPtrAlterClientQuotasRequest()
		r.ValidateOnly = true
		r.Entries = []kmsg.AlterClientQuotasRequestEntry{{
			Entity: []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "user", Name: str("authz-user")}},
			Ops:    []kmsg.AlterClientQuotasRequestEntryOp{{Key: "producer_byte_rate", Value: 1 << 20}},
		}}
		return r
	}},
	50: {request: func() kmsg.Request { return kmsg.NewPtrDescribeUserSCRAMCredentialsRequest() }},
	51: {request: func() kmsg.Request {
		r := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		r.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "authz-user", Mechanism: 1}}
		return r
	}},
}

// authzCodes are the authorization errors.
var authzCodes = map[int16]bool{
	kerr.TopicAuthorizationFailed.Code:           true,
	kerr.GroupAuthorizationFailed.Code:           true,
	kerr.ClusterAuthorizationFailed.Code:         true,
	kerr.TransactionalIDAuthorizationFailed.Code: true,
}

// grantedBindings are the bindings that give principal every need of rule
// by its first alternative, on the resources the cases name.
func grantedBindings(rule authzRule, principal server.Principal) []acl.Binding {
	var out []acl.Binding
	for _, n := range rule.needs {
		g := n[0]
		name := map[acl.ResourceType]string{acl.Topic: authzTopic, acl.Group: authzGroup, acl.TransactionalID: authzTxnID, acl.Cluster: acl.ClusterName}[g.resource]
		out = append(out, acl.Binding{ResourceType: g.resource, ResourceName: name, PatternType: acl.Literal,
			Principal: principal.String(), Host: acl.Wildcard, Operation: g.op, Permission: acl.Allow})
	}
	return out
}

// TestAuthorizationTable serves every registered API key, at its highest
// version, to a principal granted what the key's rule (authzRules) says it
// needs and to one granted nothing: the first must get no authorization
// error, the second the rule's error (or, for a filtering key, not see the
// resource). A key without a case here fails: a key added to the registry
// (regKey requires its rule) must also be tested.
func TestAuthorizationTable(t *testing.T) {
	tb := startTestBroker(t, Config{Authorizer: acl.Config{Enabled: true, SuperUsers: []string{adminPrincipal.String()}}})
	h := tb.Handler
	var keys []int
	for key, k := range apiKeys {
		// The cluster's keys (62, 63) are not served by a single node; their
		// CLUSTER_ACTION gate is checked on a node of a cluster by
		// test/cluster's TestClusterKeysNeedClusterAction.
		if k != nil && !k.clusterOnly {
			keys = append(keys, key)
		}
	}
	sort.Ints(keys)
	for _, key := range keys {
		key := int16(key)
		k := apiKeys[key]
		c, ok := authzCases[key]
		if !ok {
			t.Errorf("key %d (%s) is served but has no case in authzCases (authz_table_test.go)", key, kmsg.NameForKey(key))
			continue
		}
		t.Run(kmsg.NameForKey(key), func(t *testing.T) {
			prepareAuthzResources(t, h)
			setACLs(t, h, grantedBindings(k.authz, allowedPrincipal))
			serve := func(p server.Principal) kmsg.Response {
				body := c.request()
				if body.GetVersion() == 0 {
					body.SetVersion(k.maxVersion)
				}
				return serveAs(t, h, p, key, body)
			}
			allowedResp := serve(allowedPrincipal)
			if codes := authzErrors(allowedResp); len(codes) > 0 {
				t.Errorf("allowed principal (granted %v) got %v", grantedBindings(k.authz, allowedPrincipal), codes)
			}
			prepareAuthzResources(t, h) // the allowed request may have deleted them
			deniedResp := serve(deniedPrincipal)
			switch {
			case k.authz.none:
				if codes := authzErrors(deniedResp); len(codes) > 0 {
					t.Errorf("a key needing nothing answered %v", codes)
				}
			case k.authz.filters:
				if c.visible == nil {
					t.Fatal("a filtering key's case needs visible")
				}
				if !c.visible(allowedResp) {
					t.Errorf("the allowed principal does not see the resource: %+v", allowedResp)
				}
				if c.visible(deniedResp) {
					t.Errorf("the denied principal sees the resource: %+v", deniedResp)
				}
			default:
				if codes := authzErrors(deniedResp); !codes[k.authz.denied] {
					t.Errorf("denied principal got %v, want %s", codes, kerr.ErrorForCode(k.authz.denied))
				}
			}
		})
	}
}

// prepareAuthzResources makes sure the resources the cases name exist: the
// topic, the group (a simple consumer's commit) and the transactional id.
func prepareAuthzResources(t *testing.T, h *Handler) {
	t.Helper()
	if h.lookup(authzTopic) == nil {
		h.adminMu.Lock()
		_, err := h.createTopicLocked(authzTopic, 1, nil)
		h.adminMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	commit := authzCases[8].request().(*kmsg.OffsetCommitRequest)
	commit.SetVersion(8)
	// UNKNOWN_MEMBER_ID: a consumer (KIP-848) group by now, which exists.
	if codes := responseErrorCodes(serveAs(t, h, adminPrincipal, 8, commit)); len(codes) > 0 && !codes[kerr.UnknownMemberID.Code] {
		t.Fatalf("preparing the group: %v", codes)
	}
	init := authzCases[22].request().(*kmsg.InitProducerIDRequest)
	init.SetVersion(4)
	if codes := responseErrorCodes(serveAs(t, h, adminPrincipal, 22, init)); len(codes) > 0 && !codes[kerr.ConcurrentTransactions.Code] {
		t.Fatalf("preparing the transactional id: %v", codes)
	}
}

// setACLs replaces every binding with bs, through the catalogue, as
// CreateACLs and DeleteACLs do.
func setACLs(t *testing.T, h *Handler, bs []acl.Binding) {
	t.Helper()
	h.aclMu.Lock()
	defer h.aclMu.Unlock()
	if _, err := h.cfg.Catalog.DeleteACLs([]acl.Filter{{ResourceType: acl.AnyResource, PatternType: acl.AnyPattern, Operation: acl.AnyOperation, Permission: acl.AnyPermission}}); err != nil {
		t.Fatal(err)
	}
	for _, err := range h.cfg.Catalog.CreateACLs(bs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	h.reloadACLsLocked()
}

// serveAs serves body in process through Handle, as the connection of
// principal from 127.0.0.1 would, and returns the decoded answer.
func serveAs(t testing.TB, h *Handler, p server.Principal, key int16, body kmsg.Request) kmsg.Response {
	t.Helper()
	sess := server.NewSession("PLAINTEXT", server.Plaintext, nil)
	sess.SetPrincipal(p)
	req := &server.Request{Key: key, Version: body.GetVersion(), Body: body, Session: sess, ClientID: "authz-test",
		Remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
	resp := h.Handle(context.Background(), req)
	switch {
	case resp.Body != nil:
		return resp.Body
	case resp.Frame != nil:
		raw := materialize(t, resp.Frame)
		if resp.Frame.Release != nil {
			resp.Frame.Release()
		}
		out := body.ResponseKind()
		out.SetVersion(body.GetVersion())
		if err := out.ReadFrom(raw); err != nil {
			t.Fatalf("decoding the %s response: %v", kmsg.NameForKey(key), err)
		}
		return out
	}
	t.Fatalf("%s: no response (%+v)", kmsg.NameForKey(key), resp)
	return nil
}

// responseErrorCodes collects every non-zero error code of a response (every
// int16 field whose name ends in ErrorCode, at any depth).
func responseErrorCodes(r kmsg.Response) map[int16]bool {
	codes := map[int16]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if f.Type.Kind() == reflect.Int16 && strings.HasSuffix(f.Name, "ErrorCode") {
					if c := int16(v.Field(i).Int()); c != 0 {
						codes[c] = true
					}
					continue
				}
				walk(v.Field(i))
			}
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				return
			}
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(r))
	return codes
}

// authzErrors are a response's authorization errors.
func authzErrors(r kmsg.Response) map[int16]bool {
	out := map[int16]bool{}
	for c := range responseErrorCodes(r) {
		if authzCodes[c] {
			out[c] = true
		}
	}
	return out
}

// TestEveryKeyHasItsRule: regKey refuses a key with no authorization rule,
// and every served key has one.
func TestEveryKeyHasItsRule(t *testing.T) {
	for key, k := range apiKeys {
		if k != nil && !k.authz.specified {
			t.Errorf("key %d (%s) is served without an authorization rule", key, kmsg.NameForKey(int16(key)))
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("ruleFor of a key without a rule did not panic")
		}
	}()
	ruleFor(57) // UpdateFeatures: not served, no rule
}
