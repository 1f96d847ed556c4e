package raftnode

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// leadAll makes node id the leader of every group (leadership transfers)
// and waits for it.
func (c *testCluster) leadAll(id uint64, maxTicks int) {
	c.t.Helper()
	leaders, ok := c.leaders()
	if !ok {
		c.t.Fatal("leadAll before every group has a leader")
	}
	for g, l := range leaders {
		if l != id {
			if err := c.node(l).TransferLeadership(g, id); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	c.tickUntil(maxTicks, fmt.Sprintf("node %d leads every group", id), func() bool {
		leaders, ok := c.leaders()
		if !ok {
			return false
		}
		for _, l := range leaders {
			if l != id {
				return false
			}
		}
		return true
	})
}

func (c *testCluster) quiescent() bool {
	for _, n := range c.live() {
		if n.Stats().ActiveGroups != 0 {
			return false
		}
	}
	return true
}

func TestLeaderNodeStops(t *testing.T) {
	for _, quiesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("quiescent=%v", quiesce), func(t *testing.T) {
			c := newCluster(t, clusterOptions{nodes: 3, groups: 30, manual: true})
			c.electAll(60)
			c.leadAll(1, 30)
			for _, g := range c.groups {
				c.propose(1, g, "before")
			}
			if quiesce {
				c.tickUntil(20, "every group quiescent", c.quiescent)
			} else {
				c.tickUntil(5, "everything applied", func() bool { return c.allApplied(c.groups[len(c.groups)-1], 1) })
			}
			c.node(1).Stop()
			election := c.node(2).cfg.ElectionTicks
			// Liveness takes node 1 for down after an election timeout, then
			// the lowest voter up campaigns at once. A replica that has
			// started an election on its own timer meanwhile may split the
			// vote; raft's randomized timeouts settle that (election ..
			// 2×election ticks more).
			electedAt := map[uint64]int{}
			ticks := c.tickUntil(4*election, "a new leader for every group", func() bool {
				leaders, _ := c.agreedLeaders()
				for g := range leaders {
					if _, ok := electedAt[g]; !ok {
						electedAt[g] = c.ticked
					}
				}
				return len(electedAt) == len(c.groups)
			})
			prompt := 0
			for _, at := range electedAt {
				if at <= election+2 {
					prompt++
				}
			}
			t.Logf("new leaders for %d groups within %d ticks of the leader's node stopping, %d of them within %d ticks",
				len(electedAt), ticks, prompt, election+2)
			if prompt < len(c.groups)*8/10 {
				t.Fatalf("%d of %d groups elected within an election timeout and 2 ticks, want 80 %%", prompt, len(c.groups))
			}
			leaders, _ := c.leaders()
			for _, g := range c.groups {
				c.propose(leaders[g], g, "after")
			}
			c.tickUntil(10, "the new leaders commit", c.everyGroupApplied(2))
			for _, g := range c.groups {
				for _, n := range c.live() {
					if got := c.appliedOf(n.ID(), g); !slices.Equal(got, []string{"before", "after"}) {
						t.Fatalf("group %d on node %d applied %v", g, n.ID(), got)
					}
				}
			}
		})
	}
}

// partition cuts node id off from every other node, both ways (or heals it).
func (c *testCluster) partition(id uint64, cut bool) {
	for _, n := range c.nodes {
		if n.ID() == id {
			for _, p := range c.nodes {
				if p.ID() != id {
					n.transport.peer(p.ID()).cut.Store(cut)
				}
			}
			continue
		}
		n.transport.peer(id).cut.Store(cut)
	}
}

func TestPartitionedLeader(t *testing.T) { testPartitionedLeader(t, false) }

func testPartitionedLeader(t *testing.T, onPlog bool) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 10, manual: true, plog: onPlog})
	c.electAll(60)
	c.leadAll(1, 30)
	for _, g := range c.groups {
		c.propose(1, g, "committed")
	}
	c.tickUntil(10, "the first entry applied", c.everyGroupApplied(1))

	c.partition(1, true)
	// The minority leader still takes proposals into its log, but cannot
	// commit them.
	for _, g := range c.groups {
		c.propose(1, g, "lost-1", "lost-2")
	}
	election := c.node(1).cfg.ElectionTicks
	c.tickUntil(8*election, "the majority elects new leaders, the old one steps down", func() bool {
		for _, g := range c.groups {
			l2, _ := c.node(2).Leader(g)
			l3, _ := c.node(3).Leader(g)
			if l2 == 0 || l2 == 1 || l2 != l3 {
				return false
			}
			if l1, _ := c.node(1).Leader(g); l1 == 1 {
				return false // CheckQuorum: a leader without its majority steps down
			}
		}
		return true
	})
	for _, g := range c.groups {
		if got := c.appliedOf(1, g); !slices.Equal(got, []string{"committed"}) {
			t.Fatalf("group %d: the partitioned leader applied %v", g, got)
		}
		leader, _ := c.node(2).Leader(g)
		c.propose(leader, g, "new-1", "new-2")
	}
	c.tickUntil(10, "the majority commits", func() bool {
		for _, g := range c.groups {
			if len(c.appliedOf(2, g)) < 3 || len(c.appliedOf(3, g)) < 3 {
				return false
			}
		}
		return true
	})

	c.partition(1, false)
	c.tickUntil(4*election, "the old leader catches up", func() bool {
		for _, g := range c.groups {
			if len(c.appliedOf(1, g)) < 3 {
				return false
			}
		}
		return true
	})
	for _, g := range c.groups {
		want := []string{"committed", "new-1", "new-2"}
		for _, n := range c.nodes {
			if got := c.appliedOf(n.ID(), g); !slices.Equal(got, want) {
				t.Fatalf("group %d on node %d applied %v, want %v", g, n.ID(), got, want)
			}
		}
		// The uncommitted tail of the old leader is gone from its log.
		st := c.storages[[2]uint64{1, g}]
		first, _ := st.FirstIndex()
		last, _ := st.LastIndex()
		entries, err := st.Entries(first, last+1, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 && strings.HasPrefix(c.value(e.Data), "lost") {
				t.Fatalf("group %d: node 1 still has %q at index %d", g, c.value(e.Data), e.GetIndex())
			}
		}
		if l, _ := c.node(1).Leader(g); l == 1 || l == 0 {
			t.Fatalf("group %d: node 1 sees leader %d after healing", g, l)
		}
	}
}

// TestRemoveVoter: a configuration change committed through raft is applied
// on every replica: with node 3 removed, nodes 1 and 2 commit on their own.
func TestRemoveVoter(t *testing.T) { testRemoveVoter(t, false) }

func testRemoveVoter(t *testing.T, onPlog bool) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 2, manual: true, plog: onPlog})
	c.electAll(60)
	c.leadAll(1, 30)
	for _, g := range c.groups {
		errs := make(chan error, 1)
		c.node(1).ProposeConfChange(g, &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(uint64(3))},
			func(err error) { errs <- err })
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	c.tickUntil(10, "node 3 removed everywhere", func() bool {
		for _, n := range c.nodes[:2] {
			for _, g := range c.groups {
				if got := n.votersOf(g); !slices.Equal(got, []uint64{1, 2}) {
					return false
				}
			}
		}
		return true
	})
	c.node(3).Stop()
	for _, g := range c.groups {
		c.propose(1, g, "two voters")
	}
	c.tickUntil(10, "committed by nodes 1 and 2", c.everyGroupApplied(1))
}

// TestNodeRestart: a node stopped and made again on the same storages (a new
// peer address: its peers redial) resumes its groups and catches up with
// what was committed meanwhile.
func TestNodeRestart(t *testing.T) { testNodeRestart(t, false) }

func testNodeRestart(t *testing.T, onPlog bool) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 5, manual: true, plog: onPlog})
	c.electAll(60)
	c.leadAll(1, 30)
	for _, g := range c.groups {
		c.propose(1, g, "before")
	}
	c.tickUntil(10, "applied everywhere", c.everyGroupApplied(1))
	old := c.node(3)
	old.Stop()
	for _, g := range c.groups {
		c.propose(1, g, "while down")
	}
	c.tickUntil(10, "committed by nodes 1 and 2", func() bool {
		for _, g := range c.groups {
			if len(c.appliedOf(1, g)) < 2 || len(c.appliedOf(2, g)) < 2 {
				return false
			}
		}
		return true
	})

	restarted := make(chan string, 16)
	c.restartNode(3, func(entries []*pb.Entry) {
		for _, e := range entries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
				restarted <- c.value(e.Data)
			}
		}
	})
	var got []string
	c.tickUntil(30, "the restarted node catches up", func() bool {
		for {
			select {
			case v := <-restarted:
				got = append(got, v)
				continue
			default:
			}
			return len(got) == len(c.groups)
		}
	})
	for _, v := range got {
		if v != "while down" {
			t.Fatalf("the restarted node applied %q again or out of order", v)
		}
	}
}

// restartNode makes node id again (it must be stopped) on the same
// storages, reopened from their files, each group restarted with Applied =
// its storage's applied index, and a new peer address its peers redial.
func (c *testCluster) restartNode(id uint64, apply func([]*pb.Entry)) *Node {
	t := c.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.node(id).cfg
	cfg.Listener = ln
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range c.groups {
		st := c.restartStorage(id, g)
		applied := appliedIndexForTest(t, st)
		if err := n.AddGroup(GroupConfig{ID: g, Storage: st, Applied: applied, Apply: apply}); err != nil {
			t.Fatal(err)
		}
	}
	// Cleanups run last first: the node stops before its storages, which
	// restartStorage registered to close, are closed.
	t.Cleanup(n.Stop)
	for _, p := range c.nodes {
		if p.ID() == id || p.stopped.Load() {
			continue // a stopped peer is added when it is restarted
		}
		if err := n.AddPeer(p.ID(), p.Addr()); err != nil {
			t.Fatal(err)
		}
		if err := p.AddPeer(id, n.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	n.Start()
	c.nodes[id-1] = n
	return n
}

// TestConfStateAfterRestart (docs/replication.md §3e): a configuration
// change committed after the last snapshot survives a restart of every
// node with Applied = the commit index: node 3 removed, then a learner 4
// added (a second change), every node restarted; the restarted nodes have
// voters 1 and 2 and learner 4 and commit without node 3. Fails when the
// storage does not record the applied ConfState (raft-conf): the restart
// begins with the bootstrap snapshot's voters 1, 2, 3.
func TestConfStateAfterRestart(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 2, manual: true, plog: true})
	c.electAll(60)
	c.leadAll(1, 30)
	for _, g := range c.groups {
		for _, cc := range []*pb.ConfChange{
			{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(uint64(3))},
			{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(4))},
		} {
			errs := make(chan error, 1)
			c.node(1).ProposeConfChange(g, cc, func(err error) { errs <- err })
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			// raft takes one change at a time (a second proposed before
			// the first is applied becomes an empty entry).
			c.tickUntil(20, "the change applied on node 1", func() bool {
				return slices.Equal(c.node(1).votersOf(g), []uint64{1, 2})
			})
		}
		c.propose(1, g, "after the changes")
	}
	c.node(3).Stop()
	c.tickUntil(20, "the changes applied on nodes 1 and 2", c.everyGroupApplied(1))
	for _, id := range []uint64{1, 2} {
		c.node(id).Stop()
	}
	for _, id := range []uint64{1, 2} {
		c.restartNode(id, nil)
	}
	for _, id := range []uint64{1, 2} {
		for _, g := range c.groups {
			if got := c.node(id).votersOf(g); !slices.Equal(got, []uint64{1, 2}) {
				t.Fatalf("node %d group %d: voters %v after the restart, want [1 2]", id, g, got)
			}
			cs := initialConfForTest(t, c.storages[[2]uint64{id, g}])
			if !slices.Equal(cs.GetLearners(), []uint64{4}) {
				t.Fatalf("node %d group %d: learners %v after the restart, want [4]", id, g, cs.GetLearners())
			}
		}
	}
	c.awaitLiveness()
	leaders, _ := c.electAll(120)
	done := make(chan struct{})
	for _, g := range c.groups {
		c.node(leaders[g]).Propose(g, c.payload("two voters"), func(err error) {
			if err != nil {
				t.Error(err)
			}
			done <- struct{}{}
		})
	}
	for range c.groups {
		<-done
	}
}

func initialConfForTest(t *testing.T, s Storage) *pb.ConfState {
	t.Helper()
	_, cs, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
