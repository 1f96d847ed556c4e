package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/test/testbroker"
)

// secureNode is a node with a second listener, SASL_PLAINTEXT, for the
// users; its first (PLAINTEXT) is the nodes' own, whose principal
// (User:ANONYMOUS) is the super user the nodes need (docs/replication.md
// section 4e).
type secureNode struct {
	*node
	sasl string
}

func startSecureCluster(t *testing.T, bin string) []*secureNode {
	t.Helper()
	var nodes []*secureNode
	var voters []string
	for i := range 3 {
		n := &secureNode{node: &node{id: int32(i), kafka: "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t)),
			peer: "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t)), dataDir: t.TempDir()},
			sasl: "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))}
		voters = append(voters, fmt.Sprintf("%d@%s", i, n.peer))
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.voters = strings.Join(voters, ",")
		n.log, n.done = &testbroker.SyncBuffer{}, make(chan struct{})
		n.cmd = exec.Command(bin, "serve", "--node-id", strconv.Itoa(int(n.id)),
			"--listeners", "PLAINTEXT://"+n.kafka+",SASL_PLAINTEXT://"+n.sasl, "--peer-listen", n.peer,
			"--controller-voters", n.voters, "--data-dir", n.dataDir, "--admin-listen", "",
			"--broker-session-timeout", sessionTimeout.String(), "--broker-heartbeat-interval", "500ms",
			"--authorizer", "--super-users", "User:ANONYMOUS")
		n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = n.cmd.Wait(); close(n.done) }()
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(t)
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %d's log:\n%s", n.id, n.log.String())
			}
		}
	})
	return nodes
}

// asUser is a client of alice on node n's SASL_PLAINTEXT listener only.
func asUser(t *testing.T, n *secureNode, user, password string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.sasl), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()),
		kgo.DialTimeout(time.Second), kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceAs produces one record to partition 0 of topic as cl.
func produceAs(ctx context.Context, cl *kgo.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
}

func aclRequest(create bool, principal, topic string, permission kmsg.ACLPermissionType) kmsg.Request {
	if create {
		req := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, topic, kmsg.ACLResourcePatternTypeLiteral
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", kmsg.ACLOperationAll, permission
		req.Creations = append(req.Creations, c)
		return req
	}
	req := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, &topic, kmsg.ACLResourcePatternTypeLiteral
	f.Principal, f.Host, f.Operation, f.PermissionType = &principal, kmsg.StringPtr("*"), kmsg.ACLOperationAll, permission
	req.Filters = append(req.Filters, f)
	return req
}

// TestSecurityThroughQuorum (docs/replication.md section 4e): three nodes
// with --authorizer; a SCRAM user created through one node logs in on the
// other two; an ALLOW ACL created through one node lets the user produce
// through another, a DENY created through a third refuses it there and
// everywhere, and deleting both through a fourth request returns to
// refusal by default; DescribeAcls and DescribeUserScramCredentials answer
// the same on every node; a deletion of a credential that does not exist
// is RESOURCE_NOT_FOUND as on a single node.
//
// Fails when: the credentials are each node's own (the pre-4e Catalog
// path: the login on the other nodes fails); the authorizer is not
// reloaded on apply (SecurityApplied: the ACL created elsewhere does not
// let the user in, the DENY does not keep it out).
func TestSecurityThroughQuorum(t *testing.T) {
	bin := testbroker.Binary(t)
	nodes := startSecureCluster(t, bin)
	plain := []*node{nodes[0].node, nodes[1].node, nodes[2].node}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eventually(t, 20*time.Second, "a controller", func() error {
		_, err := clusterView(ctx, t, plain[0], []int32{0, 1, 2})
		return err
	})
	eventually(t, 20*time.Second, "topic created", func() error { return createTopic(ctx, t, plain[1], "secured", 1, 1) })

	// SCRAM through node 1, logins on 0 and 2.
	salt := []byte("0123456789abcdef")
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt = "alice", 1, 4096, salt
	up.SaltedPassword = sasl.SaltedPassword(sasl.ScramSHA256, "wonderland", salt, 4096)
	sreq := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	sreq.Upsertions = append(sreq.Upsertions, up)
	if r := request(ctx, t, plain[1], sreq).(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0]; r.ErrorCode != 0 {
		t.Fatalf("AlterUserScramCredentials through node 1: error %d", r.ErrorCode)
	}
	del := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
	del.Name, del.Mechanism = "bob", 1
	dreq := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	dreq.Deletions = append(dreq.Deletions, del)
	if r := request(ctx, t, plain[2], dreq).(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0]; r.ErrorCode != kerr.ResourceNotFound.Code {
		t.Fatalf("deleting a missing credential: error %d, want RESOURCE_NOT_FOUND", r.ErrorCode)
	}
	for _, n := range []*secureNode{nodes[0], nodes[2]} {
		eventually(t, 5*time.Second, fmt.Sprintf("alice logs in on node %d", n.id), func() error {
			return asUser(t, n, "alice", "wonderland").Ping(ctx)
		})
		if err := asUser(t, n, "alice", "wrong").Ping(ctx); err == nil {
			t.Fatalf("node %d let alice in with a wrong password", n.id)
		}
		dr := request(ctx, t, n.node, kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()).(*kmsg.DescribeUserSCRAMCredentialsResponse)
		if len(dr.Results) != 1 || dr.Results[0].User != "alice" {
			t.Fatalf("node %d describes %+v", n.id, dr.Results)
		}
	}

	alice := asUser(t, nodes[2], "alice", "wonderland")
	if err := produceAs(ctx, alice, "secured"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice without an ACL: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// ALLOW through node 0: alice produces through node 2.
	if r := request(ctx, t, plain[0], aclRequest(true, "User:alice", "secured", kmsg.ACLPermissionTypeAllow)).(*kmsg.CreateACLsResponse).Results[0]; r.ErrorCode != 0 {
		t.Fatalf("CreateAcls: error %d", r.ErrorCode)
	}
	eventually(t, 5*time.Second, "alice allowed on node 2", func() error {
		return produceAs(ctx, asUser(t, nodes[2], "alice", "wonderland"), "secured")
	})
	// DENY through node 1: refused on node 2 (DENY wins).
	if r := request(ctx, t, plain[1], aclRequest(true, "User:alice", "secured", kmsg.ACLPermissionTypeDeny)).(*kmsg.CreateACLsResponse).Results[0]; r.ErrorCode != 0 {
		t.Fatalf("CreateAcls DENY: error %d", r.ErrorCode)
	}
	eventually(t, 5*time.Second, "alice denied on node 2", func() error {
		if err := produceAs(ctx, asUser(t, nodes[2], "alice", "wonderland"), "secured"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			return fmt.Errorf("produce: %v", err)
		}
		return nil
	})
	for _, n := range plain {
		dr := request(ctx, t, n, func() kmsg.Request {
			r := kmsg.NewPtrDescribeACLsRequest()
			r.ResourceType, r.ResourcePatternType, r.Operation, r.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			return r
		}()).(*kmsg.DescribeACLsResponse)
		if len(dr.Resources) != 1 || len(dr.Resources[0].ACLs) != 2 {
			t.Fatalf("node %d describes %+v", n.id, dr.Resources)
		}
	}
	// Both deleted through node 2: refused by default again.
	for _, perm := range []kmsg.ACLPermissionType{kmsg.ACLPermissionTypeDeny, kmsg.ACLPermissionTypeAllow} {
		r := request(ctx, t, plain[2], aclRequest(false, "User:alice", "secured", perm)).(*kmsg.DeleteACLsResponse).Results[0]
		if r.ErrorCode != 0 || len(r.MatchingACLs) != 1 {
			t.Fatalf("DeleteAcls %v: error %d, %d deleted", perm, r.ErrorCode, len(r.MatchingACLs))
		}
	}
	for _, n := range plain {
		eventually(t, 5*time.Second, fmt.Sprintf("node %d has no ACL", n.id), func() error {
			r := kmsg.NewPtrDescribeACLsRequest()
			r.ResourceType, r.ResourcePatternType, r.Operation, r.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			if dr := request(ctx, t, n, r).(*kmsg.DescribeACLsResponse); len(dr.Resources) != 0 {
				return fmt.Errorf("%+v", dr.Resources)
			}
			return nil
		})
	}
}
