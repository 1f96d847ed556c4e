package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/raftnode"
)

// testCluster is N in-process nodes on 127.0.0.1 with manual raft ticks and
// a manual clock: nodes 0..voters-1 are the controller's voters, the rest
// its learners. Each node's controller records every change it applies.
type testCluster struct {
	t       testing.TB
	clock   *clock.Manual
	nodes   []*testNode
	voters  []int32
	learner []int32
	seed    uint64
}

type testNode struct {
	id          int32
	storage     *raftnode.MemStorage
	incarnation string
	// run is the node's current process: replaced whole by a restart
	// while clients look at it.
	run atomic.Pointer[nodeRun]

	mu      sync.Mutex
	changes []Change // every change applied since the node (re)started
}

type nodeRun struct {
	raft    *raftnode.Node
	ctl     *Controller
	stopped bool
}

func (n *testNode) raft() *raftnode.Node {
	if r := n.run.Load(); r != nil {
		return r.raft
	}
	return nil
}
func (n *testNode) ctl() *Controller { return n.run.Load().ctl }
func (n *testNode) stopped() bool    { return n.run.Load().stopped }

func (n *testNode) record(ch Change) {
	n.mu.Lock()
	n.changes = append(n.changes, ch)
	n.mu.Unlock()
}

func (n *testNode) applied() []Change {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.changes)
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTestCluster(t testing.TB, nodes, voters int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, clock: clock.NewManual(time.Unix(1_700_000_000, 0)), seed: 14}
	for i := range nodes {
		if i < voters {
			c.voters = append(c.voters, int32(i))
		} else {
			c.learner = append(c.learner, int32(i))
		}
	}
	for i := range nodes {
		n := &testNode{id: int32(i), storage: raftnode.NewMemStorage(), incarnation: NewIncarnation()}
		c.nodes = append(c.nodes, n)
		c.startNode(n)
	}
	for _, n := range c.nodes {
		n.raft().Start()
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if !n.stopped() {
				n.raft().Stop()
			}
		}
	})
	return c
}

// newRegisteredCluster is newTestCluster with a controller elected and
// every node's broker registered and unfenced.
func newRegisteredCluster(t testing.TB, nodes, voters int) *testCluster {
	t.Helper()
	c := newTestCluster(t, nodes, voters)
	c.waitActive(60)
	c.registerAll(nil)
	return c
}

// startNode makes n's raft node (on a new listener) and controller over its
// storage, and names it and its peers to each other; the caller starts it.
func (c *testCluster) startNode(n *testNode) {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	rn, err := raftnode.New(raftnode.Config{ID: RaftID(n.id), Cluster: 14, Listener: ln, ManualTicks: true, Logger: quietLogger})
	if err != nil {
		c.t.Fatal(err)
	}
	n.mu.Lock()
	n.changes = nil
	n.mu.Unlock()
	ctl, err := New(Config{Node: n.id, Voters: c.voters, Learners: c.learner, Raft: rn, Storage: n.storage,
		Clock: c.clock, Listeners: []Listener{n.record}, Seed: c.seed + uint64(n.id), Logger: quietLogger})
	if err != nil {
		c.t.Fatal(err)
	}
	n.run.Store(&nodeRun{raft: rn, ctl: ctl})
	for _, p := range c.nodes {
		if p == n || p.raft() == nil {
			continue
		}
		if err := rn.AddPeer(RaftID(p.id), p.raft().Addr()); err != nil {
			c.t.Fatal(err)
		}
		if err := p.raft().AddPeer(RaftID(n.id), rn.Addr()); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *testCluster) stop(n *testNode) {
	r := *n.run.Load()
	r.raft.Stop()
	r.stopped = true
	n.run.Store(&r)
}

// restart starts a stopped node again on its storage (a new process on the
// same disk). Not on an empty one: raft takes a replica whose log lost
// entries it had acknowledged for corruption (its group fails at the
// leader's first heartbeat), and a node that lost its disk must rejoin
// through a configuration change (docs/replication.md section 4a).
func (c *testCluster) restart(n *testNode) {
	c.startNode(n)
	n.raft().Start()
}

func (c *testCluster) live() []*testNode {
	var out []*testNode
	for _, n := range c.nodes {
		if !n.stopped() {
			out = append(out, n)
		}
	}
	return out
}

// tick ticks every live node's raft and controller once, then gives the
// messages a moment on loopback.
func (c *testCluster) tick() {
	for _, n := range c.live() {
		n.raft().Tick()
		n.ctl().Tick(context.Background())
	}
	time.Sleep(3 * time.Millisecond)
}

// tickUntil ticks until cond holds (checked every millisecond between
// ticks) and returns the ticks it took; it fails after maxTicks.
func (c *testCluster) tickUntil(maxTicks int, what string, cond func() bool) int {
	c.t.Helper()
	for i := 0; ; i++ {
		for deadline := time.Now().Add(10 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if cond() {
				return i
			}
		}
		if i == maxTicks {
			c.t.Fatalf("%s: not after %d ticks", what, maxTicks)
		}
		c.tick()
	}
}

// active returns the live active controller, if there is one.
func (c *testCluster) active() *testNode {
	for _, n := range c.live() {
		if n.ctl().Active() {
			return n
		}
	}
	return nil
}

func (c *testCluster) waitActive(maxTicks int) *testNode {
	c.t.Helper()
	var a *testNode
	c.tickUntil(maxTicks, "an active controller", func() bool { a = c.active(); return a != nil })
	return a
}

// ticking ticks the cluster in a goroutine until the returned stop is
// called (for tests whose clients wait on the controller).
func (c *testCluster) ticking() (stop func()) { return c.tickingEvery(5 * time.Millisecond) }

// tickingEvery is ticking with a pause of interval after each tick.
func (c *testCluster) tickingEvery(interval time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			default:
				c.tick()
				time.Sleep(interval)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// call runs f against the active controller as a client would: on
// NOT_CONTROLLER or a timed-out attempt it looks for the controller again
// and retries, up to a deadline. Ticking must be going on meanwhile.
func (c *testCluster) call(f func(ctx context.Context, ctl *Controller) error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := c.active()
		if a == nil {
			if time.Now().After(deadline) {
				return errors.New("no active controller")
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := f(ctx, a.ctl())
		cancel()
		if (errors.Is(err, meta.ErrNotController) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, raftnode.ErrStopped)) &&
			time.Now().Before(deadline) {
			continue
		}
		return err
	}
}

// registerAll registers every live node's broker (rack by rackOf, if
// given) and heartbeats until none is fenced.
func (c *testCluster) registerAll(rackOf func(id int32) string) {
	c.t.Helper()
	stop := c.ticking()
	defer stop()
	for _, n := range c.live() {
		reg := Registration{ID: n.id, Incarnation: n.incarnation,
			Listeners: []meta.BrokerEndpoint{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 9092 + n.id, SecurityProtocol: "PLAINTEXT"}}}
		if rackOf != nil {
			reg.Rack = rackOf(n.id)
		}
		if err := c.call(func(ctx context.Context, ctl *Controller) error { return ctl.RegisterBroker(ctx, reg) }); err != nil {
			c.t.Fatalf("registering broker %d: %v", n.id, err)
		}
	}
	// A broker is unfenced by a heartbeat once it has applied its own
	// registration.
	for _, n := range c.live() {
		for try := 0; c.heartbeat(n); try++ {
			if try == 100 {
				c.t.Fatalf("broker %d still fenced after %d heartbeats", n.id, try)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// heartbeat sends node n's broker heartbeat to the active controller.
func (c *testCluster) heartbeat(n *testNode) (fenced bool) {
	c.t.Helper()
	err := c.call(func(ctx context.Context, ctl *Controller) error {
		var err error
		fenced, err = ctl.Heartbeat(ctx, n.id, n.incarnation, n.ctl().Applied())
		return err
	})
	if err != nil {
		c.t.Fatalf("heartbeat of broker %d: %v", n.id, err)
	}
	return fenced
}

// createTopic creates a topic through the active controller, following
// NOT_CONTROLLER; a retry that finds the topic created by an earlier
// attempt counts as created.
func (c *testCluster) createTopic(name string, partitions int32, rf int16) error {
	first := true
	return c.call(func(ctx context.Context, ctl *Controller) error {
		_, _, err := ctl.CreateTopic(ctx, name, partitions, rf, nil)
		if errors.Is(err, meta.ErrTopicExists) && !first {
			return nil
		}
		first = false
		return err
	})
}

// checkSameOrder: every live node applied the same changes in the same
// order (each a prefix of the longest), at strictly increasing indexes.
func (c *testCluster) checkSameOrder(nodes []*testNode) []Change {
	c.t.Helper()
	var longest []Change
	for _, n := range nodes {
		if a := n.applied(); len(a) > len(longest) {
			longest = a
		}
	}
	for i := 1; i < len(longest); i++ {
		if longest[i].Index < longest[i-1].Index {
			c.t.Fatalf("change %d at index %d after index %d", i, longest[i].Index, longest[i-1].Index)
		}
	}
	for _, n := range nodes {
		a := n.applied()
		for i := range a {
			if a[i].Index != longest[i].Index || fmt.Sprint(a[i].Record) != fmt.Sprint(longest[i].Record) {
				c.t.Fatalf("node %d change %d: %d %+v, another node: %d %+v", n.id, i, a[i].Index, a[i].Record,
					longest[i].Index, longest[i].Record)
			}
		}
	}
	return longest
}

// caughtUp: every live node applied as far as the active controller.
func (c *testCluster) caughtUp() bool {
	a := c.active()
	if a == nil {
		return false
	}
	for _, n := range c.live() {
		if n.ctl().Applied() < a.ctl().Applied() {
			return false
		}
	}
	return true
}
