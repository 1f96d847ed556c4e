package raftnode

import (
	"slices"
	"testing"
)

// TestLearners: a group's learners (the metadata quorum's brokers that are
// not controllers) apply every entry in the voters' order, never lead (a
// campaign of theirs does nothing), and quiesce with the group: the
// leader's quiesce heartbeat reaches them too, so an idle node that only
// learns does no per-group work per tick.
func TestLearners(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 4, groups: 3, learners: 2, manual: true})
	leaders, _ := c.electAll(60)
	for g, l := range leaders {
		if l > 2 {
			t.Fatalf("group %d led by learner %d", g, l)
		}
	}
	for _, g := range c.groups {
		c.propose(leaders[g], g, values("v", 20)...)
	}
	c.tickUntil(30, "applied everywhere", c.everyGroupApplied(20))
	for _, g := range c.groups {
		for _, id := range []uint64{3, 4} {
			if got, want := c.appliedOf(id, g), c.appliedOf(leaders[g], g); !slices.Equal(got, want) {
				t.Fatalf("group %d: learner %d applied %v, leader %v", g, id, got, want)
			}
		}
	}
	if err := c.node(3).Campaign(c.groups[0]); err != nil {
		t.Fatal(err)
	}
	c.tickUntil(30, "every group quiescent, learners included", c.quiescent)
	for g, l := range leaders {
		if now, _ := c.node(1).Leader(g); now != l {
			t.Fatalf("group %d: leader %d after a learner's campaign, was %d", g, now, l)
		}
	}
}
