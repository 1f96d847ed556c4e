package raftnode

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// testCluster is N in-process nodes on 127.0.0.1 with the same groups, each
// on a MemStorage (or a plog.RaftStorage: clusterOptions.plog), recording
// what every replica applies.
type testCluster struct {
	t        testing.TB
	nodes    []*Node // nodes[i] has id i+1
	groups   []uint64
	storages map[[2]uint64]Storage // (node, group)
	// plogConfigs are the plog storages' configs, to reopen them; nil on
	// MemStorage.
	plogConfigs map[[2]uint64]plog.Config

	ticked int // rounds of tickUntil so far in the current call

	peerCA *peerCA // the nodes' certificates, over TLS (tls_test.go)

	mu      sync.Mutex
	applied map[[2]uint64][]string   // (node, group) → data of applied normal entries
	waiters map[string]chan struct{} // "node/value" → closed when node applies value
}

type clusterOptions struct {
	nodes, groups int
	// learners: the last this many nodes are every group's learners.
	learners int
	manual   bool
	tweak    func(*Config)
	// campaign: node (g mod nodes)+1 campaigns for group g at start, so
	// that many groups elect without waiting out their timeouts.
	campaign bool
	// apply, if set, replaces the recording of applied values.
	apply func(node, group uint64, entries []*pb.Entry)
	// tls: the nodes talk mutual TLS, each with a certificate of one CA
	// (as is every cluster with -raftnode.tls); tweak may replace one.
	tls bool
	// plog puts every replica on a plog.RaftStorage over one in-memory
	// filesystem (a directory per node and group) instead of a
	// MemStorage; values are then proposed as record batches of one
	// record (payload) and read back from them (value).
	plog bool
	// wrap, if set, replaces each replica's storage with what it returns.
	wrap func(node, group uint64, s Storage) Storage
}

// newStorage is the storage of group g on node id.
func (c *testCluster) newStorage(o clusterOptions, fs vfs.FS, id, g uint64) Storage {
	key := [2]uint64{id, g}
	if !o.plog {
		return NewMemStorage()
	}
	cfg := plog.DefaultConfig(fs, fmt.Sprintf("/node%d/group%d", id, g))
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.SegmentBytes = 4 << 10 // a few entries per segment: rolls and truncations across them
	c.plogConfigs[key] = cfg
	return c.openPlog(key)
}

func (c *testCluster) openPlog(key [2]uint64) Storage {
	rs, err := plog.OpenRaftStorage(c.plogConfigs[key])
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { rs.Close() })
	return rs
}

// restartStorage is the storage of group g on node id as a restart of the
// process finds it: the plog storage closed and opened again from its
// files; the MemStorage itself.
func (c *testCluster) restartStorage(id, g uint64) Storage {
	key := [2]uint64{id, g}
	if c.plogConfigs == nil {
		return c.storages[key]
	}
	if err := c.storages[key].(*plog.RaftStorage).Close(); err != nil {
		c.t.Fatal(err)
	}
	c.storages[key] = c.openPlog(key)
	return c.storages[key]
}

// payload is what the cluster proposes for value v, value what an applied
// entry's data holds.
func (c *testCluster) payload(v string) []byte {
	if c.plogConfigs == nil {
		return []byte(v)
	}
	return batch.BuildRecords([]batch.KeyValue{{Value: []byte(v)}}, 0, 0)
}

func (c *testCluster) value(data []byte) string {
	if c.plogConfigs == nil {
		return string(data)
	}
	var v string
	if err := batch.ForEachKeyValue(data, func(_ int32, _, value []byte) error { v = string(value); return nil }); err != nil {
		c.t.Errorf("applied entry of %d bytes: %v", len(data), err)
	}
	return v
}

func newCluster(t testing.TB, o clusterOptions) *testCluster {
	t.Helper()
	c := &testCluster{t: t, storages: make(map[[2]uint64]Storage), applied: make(map[[2]uint64][]string),
		waiters: make(map[string]chan struct{})}
	fs := vfs.NewMem()
	if o.plog {
		c.plogConfigs = make(map[[2]uint64]plog.Config)
	}
	voters := make([]uint64, o.nodes-o.learners)
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	var learners []uint64
	for i := len(voters); i < o.nodes; i++ {
		learners = append(learners, uint64(i+1))
	}
	for g := 1; g <= o.groups; g++ {
		c.groups = append(c.groups, uint64(g))
	}
	for _, id := range slices.Concat(voters, learners) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{ID: id, Cluster: 7, Listener: ln, ManualTicks: o.manual,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		if o.tls || *everyClusterTLS {
			cfg.TLS = c.nodeTLS(id)
		}
		if o.tweak != nil {
			o.tweak(&cfg)
		}
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, gid := range c.groups {
			st := c.newStorage(o, fs, id, gid)
			if o.wrap != nil {
				st = o.wrap(id, gid, st)
			}
			key := [2]uint64{id, gid}
			c.storages[key] = st
			err := n.AddGroup(GroupConfig{ID: gid, Voters: voters, Learners: learners, Storage: st, Apply: func(entries []*pb.Entry) {
				if o.apply != nil {
					o.apply(id, gid, entries)
					return
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, e := range entries {
					if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
						v := c.value(e.Data)
						c.applied[key] = append(c.applied[key], v)
						if w := c.waiters[fmt.Sprint(id, "/", v)]; w != nil {
							close(w)
							delete(c.waiters, fmt.Sprint(id, "/", v))
						}
					}
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		for _, p := range c.nodes {
			if p != n {
				if err := n.AddPeer(p.ID(), p.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, n := range c.nodes {
		n.Start()
	}
	if o.campaign {
		for _, g := range c.groups {
			if err := c.node(g%uint64(o.nodes) + 1).Campaign(g); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(c.stop)
	return c
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (c *testCluster) stop() {
	for _, n := range c.nodes {
		n.Stop()
	}
}

func (c *testCluster) node(id uint64) *Node { return c.nodes[id-1] }

// live are the nodes not stopped.
func (c *testCluster) live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if !n.stopped.Load() {
			out = append(out, n)
		}
	}
	return out
}

// tickUntil ticks every live node once per round, a few milliseconds apart
// so that messages travel, until cond holds; it fails after maxTicks rounds
// and returns the rounds it took.
func (c *testCluster) tickUntil(maxTicks int, what string, cond func() bool) int {
	c.t.Helper()
	for i := 0; ; i++ {
		c.ticked = i
		if cond() {
			return i
		}
		if i == maxTicks {
			c.t.Fatalf("%s: not after %d ticks", what, maxTicks)
		}
		for _, n := range c.live() {
			n.Tick()
		}
		c.settle()
		c.awaitLiveness()
	}
}

// awaitLiveness waits (up to a second) until every live node has heard this
// tick's liveness frame from every live peer it is not cut off from: test
// ticks come milliseconds apart, and on a loaded machine ten of them could
// otherwise pass before a frame is read, which real 100 ms ticks would not.
func (c *testCluster) awaitLiveness() {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		heard := true
		for _, n := range c.live() {
			now := n.tickNow.Load()
			for _, p := range c.live() {
				if p == n {
					continue
				}
				if peer := n.transport.peer(p.ID()); !peer.cut.Load() && peer.lastHeard.Load() < now-1 {
					heard = false
				}
			}
		}
		if heard {
			return
		}
	}
}

// settle waits until the live nodes' schedulers and peer queues are empty
// for a moment (messages in flight on loopback arrive meanwhile).
func (c *testCluster) settle() {
	idleRounds := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && idleRounds < 3; {
		time.Sleep(time.Millisecond)
		busy := false
		for _, n := range c.live() {
			if n.busy() {
				busy = true
			}
		}
		if busy {
			idleRounds = 0
		} else {
			idleRounds++
		}
	}
}

// leaders returns each group's leader if every live node agrees on it (and
// it is live), else false.
func (c *testCluster) leaders() (map[uint64]uint64, bool) {
	out, all := c.agreedLeaders()
	return out, all
}

// agreedLeaders returns the leaders of the groups whose live nodes agree on
// a live leader, and whether that is every group.
func (c *testCluster) agreedLeaders() (map[uint64]uint64, bool) {
	out := make(map[uint64]uint64, len(c.groups))
	live := c.live()
	all := true
groups:
	for _, g := range c.groups {
		var leader uint64
		for i, n := range live {
			l, _ := n.Leader(g)
			if l == 0 || i > 0 && l != leader {
				all = false
				continue groups
			}
			leader = l
		}
		if c.node(leader).stopped.Load() {
			all = false
			continue
		}
		out[g] = leader
	}
	if !all {
		return out, false
	}
	return out, true
}

func (c *testCluster) electAll(maxTicks int) (map[uint64]uint64, int) {
	c.t.Helper()
	var leaders map[uint64]uint64
	ticks := c.tickUntil(maxTicks, "a leader for every group", func() bool {
		var ok bool
		leaders, ok = c.leaders()
		return ok
	})
	return leaders, ticks
}

// proposeAll proposes each value of values to group g's leader and waits
// for the leader to take them.
func (c *testCluster) propose(leader uint64, g uint64, values ...string) {
	c.t.Helper()
	errs := make(chan error, len(values))
	for _, v := range values {
		c.node(leader).Propose(g, c.payload(v), func(err error) { errs <- err })
	}
	for range values {
		if err := <-errs; err != nil {
			c.t.Fatalf("propose to group %d on node %d: %v", g, leader, err)
		}
	}
}

// whenApplied returns a channel closed when node applies value (values are
// unique in a test).
func (c *testCluster) whenApplied(node uint64, value string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := make(chan struct{})
	c.waiters[fmt.Sprint(node, "/", value)] = w
	return w
}

func (c *testCluster) appliedOf(node, g uint64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.applied[[2]uint64{node, g}])
}

// allApplied: every live node applied want in group g, in this order.
func (c *testCluster) allApplied(g uint64, want int) bool {
	for _, n := range c.live() {
		if len(c.appliedOf(n.ID(), g)) < want {
			return false
		}
	}
	return true
}

// everyGroupApplied is tickUntil's condition: every live node applied at
// least n values in every group.
func (c *testCluster) everyGroupApplied(n int) func() bool {
	return func() bool {
		for _, g := range c.groups {
			if !c.allApplied(g, n) {
				return false
			}
		}
		return true
	}
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestElectAndReplicate(t *testing.T) { testElectAndReplicate(t, false) }

// TestOnPlogStorage runs the three-node cluster tests once with every
// replica on plog's RaftStorage (issue 14 step 2) over an in-memory
// filesystem: replication, a partitioned leader's uncommitted tail
// truncated on its log, a configuration change, a node restarted on its
// storages reopened from their files, porcupine's check of concurrent
// appends under partitions and leadership moves.
func TestOnPlogStorage(t *testing.T) {
	t.Run("ElectAndReplicate", func(t *testing.T) { testElectAndReplicate(t, true) })
	t.Run("PartitionedLeader", func(t *testing.T) { testPartitionedLeader(t, true) })
	t.Run("RemoveVoter", func(t *testing.T) { testRemoveVoter(t, true) })
	t.Run("NodeRestart", func(t *testing.T) { testNodeRestart(t, true) })
	t.Run("LinearizableAppends", func(t *testing.T) { testLinearizableAppends(t, true) })
}

func testElectAndReplicate(t *testing.T, onPlog bool) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 20, manual: true, plog: onPlog})
	leaders, ticks := c.electAll(60)
	t.Logf("every group elected in %d ticks", ticks)
	perNode := map[uint64]int{}
	for _, l := range leaders {
		perNode[l]++
	}
	t.Logf("leaders per node: %v", perNode)

	const proposals = 50
	var wg sync.WaitGroup
	for _, g := range c.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.propose(leaders[g], g, values(fmt.Sprint("g", g), proposals)...)
		}()
	}
	wg.Wait()
	c.tickUntil(30, "every proposal applied on every node", c.everyGroupApplied(proposals))
	for _, g := range c.groups {
		want := c.appliedOf(1, g)
		if len(want) != proposals {
			t.Fatalf("group %d: node 1 applied %d entries, want %d", g, len(want), proposals)
		}
		slices.Sort(want)
		exp := values(fmt.Sprint("g", g), proposals)
		slices.Sort(exp)
		if !slices.Equal(want, exp) {
			t.Fatalf("group %d: applied %v, want %v", g, want, exp)
		}
		for _, n := range c.nodes[1:] {
			if got := c.appliedOf(n.ID(), g); !slices.Equal(got, c.appliedOf(1, g)) {
				t.Fatalf("group %d: node %d applied %v, node 1 %v", g, n.ID(), got, c.appliedOf(1, g))
			}
		}
	}
	// A follower refuses proposals: Kafka's NOT_LEADER_OR_FOLLOWER.
	g := c.groups[0]
	follower := leaders[g]%3 + 1
	errs := make(chan error, 1)
	c.node(follower).Propose(g, c.payload("x"), func(err error) { errs <- err })
	if err := <-errs; err != ErrProposalDropped {
		t.Fatalf("proposal on a follower: %v, want ErrProposalDropped", err)
	}
}
