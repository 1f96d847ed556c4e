package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/sasl"
)

// TestChangesAppliedEverywhere: every decision of changes.go, taken on the
// active controller of three nodes, is in every node's machine; invalid
// ones are answered the single node's errors and change nothing. Fails
// when a decision is applied on the controller only (a plan applied to its
// machine instead of proposed), or when CreatePartitions commits the count
// without the new partitions' assignments.
func TestChangesAppliedEverywhere(t *testing.T) {
	c := newRegisteredCluster(t, 3, 3)
	stop := c.ticking()
	defer stop()
	if err := c.createTopic("grown", 3, 1); err != nil {
		t.Fatal(err)
	}
	binding := acl.Binding{ResourceType: acl.Topic, ResourceName: "grown", PatternType: acl.Literal,
		Principal: "User:alice", Host: "*", Operation: acl.Read, Permission: acl.Allow}
	cred, err := sasl.NewCredential(sasl.ScramSHA256, "secret", 4096)
	if err != nil {
		t.Fatal(err)
	}
	user := "alice"
	rate := 1024.0
	steps := []struct {
		name string
		do   func(ctx context.Context, ctl *Controller) error
	}{
		{"partitions", func(ctx context.Context, ctl *Controller) error { return ctl.CreatePartitions(ctx, "grown", 6) }},
		{"configs", func(ctx context.Context, ctl *Controller) error {
			return ctl.SetTopicConfigs(ctx, "grown", map[string]string{"retention.ms": "60000"})
		}},
		{"acl", func(ctx context.Context, ctl *Controller) error {
			return ctl.CreateACLs(ctx, []acl.Binding{binding, binding})
		}},
		{"scram", func(ctx context.Context, ctl *Controller) error {
			return ctl.AlterScramCredentials(ctx, []meta.ScramChange{{User: user, Mechanism: sasl.ScramSHA256, Credential: &cred}})
		}},
		{"quota", func(ctx context.Context, ctl *Controller) error {
			return errors.Join(ctl.AlterClientQuotas(ctx, []meta.QuotaAlteration{{
				Entity: []meta.QuotaEntityPart{{Type: "user", Name: &user}},
				Ops:    []meta.QuotaOp{{Key: "producer_byte_rate", Value: &rate}}}})...)
		}},
	}
	for _, s := range steps {
		if err := c.call(s.do); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	c.tickUntil(100, "caught up", c.caughtUp)
	for _, n := range c.live() {
		m := n.ctl().Machine()
		tp, ok := m.Topic("grown")
		rs := m.Replicas(tp.ID)
		if !ok || tp.Partitions != 6 || len(rs) != 6 || tp.Configs["retention.ms"] != "60000" {
			t.Fatalf("node %d: topic %+v, replicas %v", n.id, tp, rs)
		}
		for p, r := range rs {
			if len(r) != 1 {
				t.Fatalf("node %d: partition %d has replicas %v", n.id, p, r)
			}
		}
		if acls := m.ACLs(); len(acls) != 1 || acls[0] != binding {
			t.Fatalf("node %d: ACLs %v", n.id, acls)
		}
		if got, ok := m.ScramCredential(user, sasl.ScramSHA256); !ok || string(got.StoredKey) != string(cred.StoredKey) {
			t.Fatalf("node %d: no SCRAM credential", n.id)
		}
		if q := m.ClientQuotas(); len(q) != 1 || q[0].Values["producer_byte_rate"] != rate {
			t.Fatalf("node %d: quotas %+v", n.id, q)
		}
	}

	// Invalid input: the single node's errors, nothing changed.
	invalid := []struct {
		name string
		want error
		do   func(ctx context.Context, ctl *Controller) error
	}{
		{"shrink", meta.ErrBadPartitions, func(ctx context.Context, ctl *Controller) error { return ctl.CreatePartitions(ctx, "grown", 4) }},
		{"grow unknown", meta.ErrUnknownTopic, func(ctx context.Context, ctl *Controller) error { return ctl.CreatePartitions(ctx, "nope", 4) }},
		{"bad config", nil, // ValidateConfig's own error (INVALID_CONFIG in the api)
			func(ctx context.Context, ctl *Controller) error {
				return ctl.SetTopicConfigs(ctx, "grown", map[string]string{"retention.ms": "soon"})
			}},
		{"delete unknown", meta.ErrUnknownTopic, func(ctx context.Context, ctl *Controller) error { return ctl.DeleteTopic(ctx, "nope") }},
		{"delete missing credential", meta.ErrNoScramCredential, func(ctx context.Context, ctl *Controller) error {
			return ctl.AlterScramCredentials(ctx, []meta.ScramChange{{User: "bob", Mechanism: sasl.ScramSHA256}})
		}},
		{"quota", meta.ErrInvalidQuota, func(ctx context.Context, ctl *Controller) error {
			bad := -1.0
			return errors.Join(ctl.AlterClientQuotas(ctx, []meta.QuotaAlteration{{
				Entity: []meta.QuotaEntityPart{{Type: "user", Name: &user}},
				Ops:    []meta.QuotaOp{{Key: "producer_byte_rate", Value: &bad}}}})...)
		}},
	}
	for _, s := range invalid {
		if err := c.call(s.do); err == nil || s.want != nil && !errors.Is(err, s.want) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
	}

	// Deleted on every node, the name free again.
	if err := c.call(func(ctx context.Context, ctl *Controller) error {
		deleted, err := ctl.DeleteACLs(ctx, []acl.Filter{{ResourceType: acl.AnyResource, PatternType: acl.AnyPattern, Operation: acl.AnyOperation, Permission: acl.AnyPermission}})
		if err == nil && fmt.Sprint(deleted) != fmt.Sprint([][]acl.Binding{{binding}}) {
			err = fmt.Errorf("deleted %v", deleted)
		}
		if err == nil {
			err = ctl.DeleteTopic(ctx, "grown")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.tickUntil(100, "caught up", c.caughtUp)
	for _, n := range c.live() {
		if _, ok := n.ctl().Machine().Topic("grown"); ok || len(n.ctl().Machine().ACLs()) != 0 {
			t.Fatalf("node %d still has the topic or its ACL", n.id)
		}
	}
	if err := c.createTopic("grown", 2, 1); err != nil {
		t.Fatal(err)
	}
}
