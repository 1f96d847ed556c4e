package main

import (
	"strings"
	"testing"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/test/testbroker"
)

// TestACLCommands: acl create makes each principal × operation × resource,
// list shows them (all, or filtered), delete removes what its filters
// select and lists it; bad input is refused before any request.
func TestACLCommands(t *testing.T) {
	b := testbroker.StartInProcessWith(t, broker.Config{Authorizer: true, SuperUsers: []string{"User:ANONYMOUS"}})
	out := runGroupCLI(t, b, "", "acl", "create", "--allow-principal", "User:alice", "--operation", "read", "--operation", "describe", "--topic", "orders")
	if strings.Count(out, "User:alice") != 2 {
		t.Fatalf("create printed:\n%s", out)
	}
	runGroupCLI(t, b, "", "acl", "create", "--deny-principal", "User:bob", "--host", "10.0.0.1", "--operation", "all", "--topic", "tenant-", "--resource-pattern-type", "prefixed")
	runGroupCLI(t, b, "", "acl", "create", "--allow-principal", "User:alice", "--operation", "read", "--group", "app")
	runGroupCLI(t, b, "", "acl", "create", "--allow-principal", "User:ops", "--operation", "alter", "--cluster")

	all := runGroupCLI(t, b, "", "acl", "list")
	for _, want := range []string{"User:alice * READ ALLOW TOPIC orders LITERAL", "User:bob 10.0.0.1 ALL DENY TOPIC tenant- PREFIXED",
		"User:ops * ALTER ALLOW CLUSTER kafka-cluster LITERAL", "User:alice * READ ALLOW GROUP app LITERAL"} {
		if !strings.Contains(squeeze(all), want) {
			t.Errorf("acl list lacks %q:\n%s", want, all)
		}
	}
	if rows := strings.Count(all, "\n") - 1; rows != 5 {
		t.Errorf("acl list: %d rows, want 5:\n%s", rows, all)
	}
	alice := runGroupCLI(t, b, "", "acl", "list", "--principal", "User:alice", "--topic", "orders")
	if strings.Count(alice, "User:alice") != 2 || strings.Contains(alice, "GROUP") {
		t.Errorf("acl list --principal User:alice --topic orders:\n%s", alice)
	}
	// MATCH: every ACL that applies to topic tenant-x.
	if m := runGroupCLI(t, b, "", "acl", "list", "--topic", "tenant-x", "--resource-pattern-type", "match"); !strings.Contains(m, "User:bob") || strings.Contains(m, "orders") {
		t.Errorf("acl list --resource-pattern-type match --topic tenant-x:\n%s", m)
	}

	del := runGroupCLI(t, b, "", "acl", "delete", "--principal", "User:alice", "--operation", "describe")
	if strings.Count(del, "User:alice") != 1 || !strings.Contains(del, "DESCRIBE") {
		t.Errorf("acl delete printed:\n%s", del)
	}
	if rows := strings.Count(runGroupCLI(t, b, "", "acl", "list"), "\n") - 1; rows != 4 {
		t.Errorf("after the delete %d rows, want 4", rows)
	}

	for _, bad := range [][]string{
		{"acl", "create", "--operation", "read", "--topic", "t"},                               // no principal
		{"acl", "create", "--allow-principal", "User:a", "--operation", "read"},                // no resource
		{"acl", "create", "--allow-principal", "User:a", "--operation", "fly", "--topic", "t"}, // unknown operation
		{"acl", "create", "--allow-principal", "alice", "--operation", "read", "--topic", "t"}, // not Type:name
		{"acl", "create", "--allow-principal", "User:a", "--operation", "read", "--topic", "t", "--resource-pattern-type", "sideways"},
		{"acl", "delete"}, // no filter
	} {
		if _, _, err := runCLI(t, b, "", bad...); err == nil {
			t.Errorf("sushka %s succeeded", strings.Join(bad, " "))
		}
	}
	if rows := strings.Count(runGroupCLI(t, b, "", "acl", "list"), "\n") - 1; rows != 4 {
		t.Errorf("the refused commands changed the ACLs: %d rows", rows)
	}
	runGroupCLI(t, b, "", "acl", "delete", "--all")
	if rows := strings.Count(runGroupCLI(t, b, "", "acl", "list"), "\n") - 1; rows != 0 {
		t.Errorf("after delete --all: %d rows", rows)
	}
}

// TestACLCommandsEnforced: with the authorizer on, a principal without
// ALTER on the cluster cannot create ACLs, and an ACL the CLI creates is
// enforced at once (a denied produce fails with TOPIC_AUTHORIZATION_FAILED).
func TestACLCommandsEnforced(t *testing.T) {
	locked := testbroker.StartInProcessWith(t, broker.Config{Authorizer: true})
	if _, errOut, err := runCLI(t, locked, "", "acl", "create", "--allow-principal", "User:a", "--operation", "read", "--topic", "t"); err == nil || !strings.Contains(err.Error()+errOut, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("create without ALTER on the cluster: %v %s", err, errOut)
	}

	b := testbroker.StartInProcessWith(t, broker.Config{Authorizer: true, AllowEveryoneIfNoACLFound: true})
	runGroupCLI(t, b, "", "topic", "create", "locked")
	runGroupCLI(t, b, "m1\n", "produce", "locked")
	runGroupCLI(t, b, "", "acl", "create", "--deny-principal", "User:ANONYMOUS", "--operation", "write", "--topic", "locked")
	if _, errOut, err := runCLI(t, b, "m2\n", "produce", "locked"); err == nil || !strings.Contains(err.Error()+errOut, "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("produce after a DENY of WRITE: %v %s", err, errOut)
	}
	// The topic has an ACL now, so allow.everyone.if.no.acl.found no
	// longer applies to it (as in Kafka): reading needs its own ALLOW.
	if _, errOut, err := runCLI(t, b, "", "consume", "locked", "-o", "start", "-n", "1"); err == nil || !strings.Contains(err.Error()+errOut, "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("consume of a topic with ACLs, none allowing: %v %s", err, errOut)
	}
	runGroupCLI(t, b, "", "acl", "create", "--allow-principal", "User:ANONYMOUS", "--operation", "read", "--topic", "locked")
	if out := runGroupCLI(t, b, "", "consume", "locked", "-o", "start", "-n", "1"); out != "m1\n" {
		t.Fatalf("consume read %q", out)
	}
}

// squeeze collapses runs of spaces (a table's alignment) to one.
func squeeze(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}
