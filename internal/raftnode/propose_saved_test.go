package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestProposeSaved: 60 values proposed concurrently with ProposeSaved and
// Propose mixed on the leader are each answered with the index and term of
// the entry that holds them (every replica applies that value at that
// index), after that entry is in the leader's storage; a follower answers
// ErrProposalDropped, a stopped node ErrStopped.
func TestProposeSaved(t *testing.T) {
	type at struct{ index, term uint64 }
	var mu sync.Mutex
	appliedAt := map[[2]uint64]map[uint64]string{} // (node, group) → index → value
	var c *testCluster
	c = newCluster(t, clusterOptions{nodes: 3, groups: 1, manual: true, apply: func(node, g uint64, entries []*pb.Entry) {
		mu.Lock()
		defer mu.Unlock()
		key := [2]uint64{node, g}
		if appliedAt[key] == nil {
			appliedAt[key] = map[uint64]string{}
		}
		for _, e := range entries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
				appliedAt[key][e.GetIndex()] = string(e.Data)
			}
		}
	}})
	leaders, _ := c.electAll(60)
	leader := leaders[1]
	saved := map[string]at{}
	var wg sync.WaitGroup
	for i := range 60 {
		v := fmt.Sprint("v", i)
		wg.Add(1)
		if i%4 == 3 { // Propose among them: the index matching must skip it
			c.node(leader).Propose(1, []byte(v), func(err error) {
				if err != nil {
					t.Errorf("propose %s: %v", v, err)
				}
				wg.Done()
			})
			continue
		}
		c.node(leader).ProposeSaved(1, []byte(v), func(index, term uint64, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("propose %s: %v", v, err)
				return
			}
			// Called after the Save: the storage holds the entry.
			st := c.storages[[2]uint64{leader, 1}]
			if es, err := st.Entries(index, index+1, 1<<20); err != nil || len(es) != 1 || string(es[0].Data) != v || es[0].GetTerm() != term {
				t.Errorf("%s answered at %d/%d; the storage holds %v (%v)", v, index, term, es, err)
			}
			mu.Lock()
			saved[v] = at{index, term}
			mu.Unlock()
		})
	}
	wg.Wait()
	c.tickUntil(50, "every value applied everywhere", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range c.nodes {
			if len(appliedAt[[2]uint64{n.ID(), 1}]) < 60 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for v, a := range saved {
		for _, n := range c.nodes {
			if got := appliedAt[[2]uint64{n.ID(), 1}][a.index]; got != v {
				t.Fatalf("%s answered at index %d; node %d applied %q there", v, a.index, n.ID(), got)
			}
		}
	}
	mu.Unlock()
	if len(saved) != 45 {
		t.Fatalf("%d ProposeSaved answers, want 45", len(saved))
	}
	follower := leader%3 + 1
	errs := make(chan error, 2)
	c.node(follower).ProposeSaved(1, []byte("x"), func(_, _ uint64, err error) { errs <- err })
	if err := <-errs; !errors.Is(err, ErrProposalDropped) {
		t.Fatalf("ProposeSaved on a follower: %v, want ErrProposalDropped", err)
	}
	c.node(follower).Stop()
	c.node(follower).ProposeSaved(1, []byte("x"), func(_, _ uint64, err error) { errs <- err })
	if err := <-errs; !errors.Is(err, ErrStopped) {
		t.Fatalf("ProposeSaved on a stopped node: %v, want ErrStopped", err)
	}
}

// TestOnLeader: every replica's OnLeader is told the leader and its term
// when a group elects, a new leader and term after a transfer, and leader 0
// when its node stops.
func TestOnLeader(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 1, manual: true})
	type call struct{ leader, term uint64 }
	var mu sync.Mutex
	calls := map[uint64][]call{}
	for _, n := range c.nodes {
		g := n.group(1)
		done := make(chan struct{})
		g.inboxMu.Lock()
		g.inspect = append(g.inspect, func() {
			g.onLeader = func(leader, term uint64) {
				mu.Lock()
				calls[n.ID()] = append(calls[n.ID()], call{leader, term})
				mu.Unlock()
			}
			close(done)
		})
		g.inboxMu.Unlock()
		n.sched.enqueue(g)
		<-done
	}
	last := func(id uint64) call {
		mu.Lock()
		defer mu.Unlock()
		if cs := calls[id]; len(cs) > 0 {
			return cs[len(cs)-1]
		}
		return call{}
	}
	leaders, _ := c.electAll(60)
	first := leaders[1]
	c.tickUntil(20, "every node told of the leader", func() bool {
		for _, n := range c.nodes {
			if l := last(n.ID()); l.leader != first || l.term == 0 {
				return false
			}
		}
		return true
	})
	term := last(first).term
	to := first%3 + 1
	if err := c.node(first).TransferLeadership(1, to); err != nil {
		t.Fatal(err)
	}
	c.tickUntil(60, "every node told of the new leader", func() bool {
		for _, n := range c.nodes {
			if l := last(n.ID()); l.leader != to || l.term <= term {
				return false
			}
		}
		return true
	})
	c.node(to).Stop()
	if l := last(to); l.leader != 0 {
		t.Fatalf("the stopped node's OnLeader last told %+v, want leader 0", l)
	}
}
