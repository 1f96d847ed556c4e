package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	pb "go.etcd.io/raft/v3/raftpb"
)

// removable is a group added to every node of a test cluster whose
// callbacks on each node are watched: after RemoveGroup returned on a node,
// none may run there.
type removable struct {
	id       uint64
	mu       sync.Mutex
	leaders  map[uint64][]uint64 // node → OnLeader's leaders
	removed  map[uint64]*atomic.Bool
	lateRuns atomic.Int64 // callbacks run after RemoveGroup returned
}

func addRemovable(t *testing.T, c *testCluster, id uint64) *removable {
	t.Helper()
	r := &removable{id: id, leaders: map[uint64][]uint64{}, removed: map[uint64]*atomic.Bool{}}
	for _, n := range c.nodes {
		node := n.ID()
		gone := new(atomic.Bool)
		r.removed[node] = gone
		err := n.AddGroup(GroupConfig{ID: id, Voters: []uint64{1, 2, 3}, Storage: NewMemStorage(),
			Apply: func([]*pb.Entry) {
				if gone.Load() {
					r.lateRuns.Add(1)
				}
			},
			OnLeader: func(leader, _ uint64) {
				if gone.Load() {
					r.lateRuns.Add(1)
				}
				r.mu.Lock()
				r.leaders[node] = append(r.leaders[node], leader)
				r.mu.Unlock()
			},
			OnProgress: func() {
				if gone.Load() {
					r.lateRuns.Add(1)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *removable) lastLeader(node uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := r.leaders[node]
	if len(ls) == 0 {
		return 0, false
	}
	return ls[len(ls)-1], true
}

// TestRemoveGroupUnderLoad: a group is removed from each of three nodes (its
// leader first) while four goroutines propose to it (ProposeSaved and
// Propose) and the nodes tick and exchange its messages: every proposal is
// answered (nil, ErrGroupRemoved, ErrUnknownGroup, or a follower's
// ErrProposalDropped), OnLeader's last word on each node is 0, no callback of
// the group runs on a node after its RemoveGroup returned, the other groups
// keep committing, and the peers' later messages for it are counted as
// UnknownGroup. Fails when RemoveGroup returns before the group's running
// run ends (callbacks after it), or when the proposals in its inbox are
// dropped unanswered (the proposers hang).
func TestRemoveGroupUnderLoad(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 2, manual: true})
	r := addRemovable(t, c, 99)
	c.groups = append(c.groups, r.id)
	leaders, _ := c.electAll(100)
	c.groups = c.groups[:2]
	leader := leaders[r.id]

	stopTicks := make(chan struct{})
	var ticking sync.WaitGroup
	ticking.Add(1)
	go func() {
		defer ticking.Done()
		for {
			select {
			case <-stopTicks:
				return
			case <-time.After(2 * time.Millisecond):
				for _, n := range c.nodes {
					n.Tick()
				}
			}
		}
	}()

	var answered, removedErrs atomic.Int64
	var proposers sync.WaitGroup
	stopProposing := make(chan struct{})
	for p := range 4 {
		proposers.Add(1)
		go func() {
			defer proposers.Done()
			for i := 0; ; i++ {
				select {
				case <-stopProposing:
					return
				default:
				}
				done := make(chan error, 1)
				data := []byte(fmt.Sprintf("p%d-%d", p, i))
				if i%2 == 0 {
					c.node(leader).ProposeSaved(r.id, data, func(_, _ uint64, err error) { done <- err })
				} else {
					c.node(leader).Propose(r.id, data, func(err error) { done <- err })
				}
				select {
				case err := <-done:
					answered.Add(1)
					switch {
					case err == nil, errors.Is(err, ErrProposalDropped):
					case errors.Is(err, ErrGroupRemoved), errors.Is(err, ErrUnknownGroup):
						removedErrs.Add(1)
					default:
						t.Errorf("proposal answered %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("proposal %d of proposer %d not answered in 5 s", i, p)
					return
				}
			}
		}()
	}
	// Removed while proposals flow, on the leader first (its followers
	// keep sending it the group's messages), then on the others.
	for answered.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	order := []uint64{leader}
	for _, n := range c.nodes {
		if n.ID() != leader {
			order = append(order, n.ID())
		}
	}
	before := c.node(leader).Stats().Transport.UnknownGroup
	for k, id := range order {
		if err := c.node(id).RemoveGroup(r.id); err != nil {
			t.Fatal(err)
		}
		r.removed[id].Store(true)
		if l, ok := r.lastLeader(id); !ok || l != 0 {
			t.Fatalf("node %d: OnLeader's last leader %d (told: %v) after RemoveGroup, want 0", id, l, ok)
		}
		if err := c.node(id).RemoveGroup(r.id); !errors.Is(err, ErrUnknownGroup) {
			t.Fatalf("second RemoveGroup: %v, want ErrUnknownGroup", err)
		}
		if k == 0 {
			for deadline := time.Now().Add(5 * time.Second); c.node(leader).Stats().Transport.UnknownGroup == before; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no message of the removed group counted as UnknownGroup on its old leader")
				}
			}
		}
	}
	time.Sleep(20 * time.Millisecond) // a late callback would run now
	close(stopProposing)
	proposers.Wait()
	close(stopTicks)
	ticking.Wait()
	if n := r.lateRuns.Load(); n != 0 {
		t.Fatalf("%d callbacks of the group ran after RemoveGroup returned", n)
	}
	if removedErrs.Load() == 0 {
		t.Fatal("no proposal was answered ErrGroupRemoved or ErrUnknownGroup: the removal raced nothing")
	}
	for _, n := range c.nodes {
		if s := n.Stats(); s.Groups != 2 {
			t.Fatalf("node %d has %d groups after the removal, want 2", n.ID(), s.Groups)
		}
	}
	// The other groups still commit.
	leaders, _ = c.electAll(100)
	for _, g := range c.groups {
		c.propose(leaders[g], g, fmt.Sprintf("after-%d", g))
	}
	c.tickUntil(50, "the other groups commit after the removal", c.everyGroupApplied(1))
}

// TestRemoveGroupReleasesMemory: 200 groups added to a running node (its
// peers do not have them: their elections' messages count as UnknownGroup
// there), woken and ticked, then removed: none is reachable afterwards
// (weak pointers cleared by the collector: nothing in the node's tables,
// the scheduler's queue or the ticker's buffer holds one) and the node runs
// no more goroutines than before they were added. Fails when a removed
// group woken through a stale pointer (peerDown's list) is put back among
// the ticked ones (wakeLocked without the removed check).
func TestRemoveGroupReleasesMemory(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 1, manual: true})
	c.electAll(100)
	n := c.node(1)
	goroutines := runtime.NumGoroutine()
	const count = 200
	var ptrs []weak.Pointer[group]
	for i := range count {
		id := uint64(1000 + i)
		if err := n.AddGroup(GroupConfig{ID: id, Voters: []uint64{1, 2, 3}, Storage: NewMemStorage()}); err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, weak.Make(n.group(id)))
	}
	for range 15 { // past an election timeout: every group campaigns
		n.Tick()
		c.settle()
	}
	var removers sync.WaitGroup
	for i := range count {
		removers.Add(1)
		go func() {
			defer removers.Done()
			g := n.group(uint64(1000 + i))
			if err := n.RemoveGroup(uint64(1000 + i)); err != nil {
				t.Error(err)
			}
			// Woken through a pointer taken before the removal, as
			// peerDown's list of the groups would.
			g.inboxMu.Lock()
			g.wakeLocked()
			g.inboxMu.Unlock()
		}()
	}
	removers.Wait()
	for range 3 {
		n.Tick()
		c.settle()
	}
	if s := n.Stats(); s.Groups != 1 || s.ActiveGroups > 1 {
		t.Fatalf("after the removals: %d groups, %d active, want 1 and at most 1", s.Groups, s.ActiveGroups)
	}
	var kept int
	for try := 0; try < 10; try++ {
		runtime.GC()
		kept = 0
		for _, p := range ptrs {
			if p.Value() != nil {
				kept++
			}
		}
		if kept == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if kept != 0 {
		t.Fatalf("%d of %d removed groups still reachable", kept, count)
	}
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the removals, %d before the groups were added", runtime.NumGoroutine(), goroutines)
		}
	}
}

// TestRemoveGroupWithoutWorkers: a group is removed from a node not yet
// started and from a stopped node: RemoveGroup returns (no worker to wait
// for), answers the proposals its inbox held and tells OnLeader 0 once.
func TestRemoveGroupWithoutWorkers(t *testing.T) {
	for _, started := range []bool{false, true} {
		t.Run(fmt.Sprintf("started=%v", started), func(t *testing.T) {
			var n *Node
			if started {
				c := newCluster(t, clusterOptions{nodes: 1, groups: 1, manual: true})
				c.electAll(50)
				n = c.node(1)
				n.Stop()
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if n, err = New(Config{ID: 1, Listener: ln, ManualTicks: true, Logger: slog.New(slog.DiscardHandler)}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(n.Stop)
			}
			var leaders []uint64
			if err := n.AddGroup(GroupConfig{ID: 7, Voters: []uint64{1}, Storage: NewMemStorage(),
				OnLeader: func(leader, _ uint64) { leaders = append(leaders, leader) }}); err != nil {
				t.Fatal(err)
			}
			g := n.group(7)
			answers := make(chan error, 1)
			g.inboxMu.Lock()
			g.proposals = append(g.proposals, proposal{data: []byte("x"), done: func(err error) { answers <- err }})
			g.inboxMu.Unlock()
			done := make(chan error, 1)
			go func() { done <- n.RemoveGroup(7) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("RemoveGroup did not return")
			}
			select {
			case err := <-answers:
				if !errors.Is(err, ErrGroupRemoved) {
					t.Fatalf("the inbox's proposal answered %v, want ErrGroupRemoved", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the inbox's proposal not answered")
			}
			if n.group(7) != nil {
				t.Fatal("the group is still on the node")
			}
			// Never told of a leader, so nothing to take back.
			if len(leaders) != 0 {
				t.Fatalf("OnLeader told %v, want nothing", leaders)
			}
		})
	}
}
