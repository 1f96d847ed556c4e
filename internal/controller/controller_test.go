package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/raftnode"
)

// topicCreations counts the TopicRecords and assignments by topic name in
// a node's applied changes.
func topicCreations(changes []Change) (topics map[string]int, assigned map[string]int) {
	topics, assigned = map[string]int{}, map[string]int{}
	names := map[[16]byte]string{}
	for _, ch := range changes {
		switch r := ch.Record.(type) {
		case *meta.TopicRecord:
			topics[r.Name]++
			names[r.ID] = r.Name
		case *meta.PartitionAssignmentRecord:
			assigned[names[r.TopicID]]++
		}
	}
	return topics, assigned
}

// TestCreateAppliedInOrderEverywhere: topics created concurrently through
// whichever node is the controller (clients follow NOT_CONTROLLER from any
// node) are applied in the same order by every node, voters and learners,
// each with all of its partitions assigned.
func TestCreateAppliedInOrderEverywhere(t *testing.T) {
	for _, shape := range []struct{ nodes, voters int }{{3, 3}, {5, 3}, {5, 5}} {
		t.Run(fmt.Sprintf("nodes=%d,voters=%d", shape.nodes, shape.voters), func(t *testing.T) {
			c := newTestCluster(t, shape.nodes, shape.voters)
			c.waitActive(60)
			c.registerAll(nil)
			// A create sent to a node that is not the controller is
			// refused with the controller's id.
			for _, n := range c.live() {
				if !n.ctl().Active() {
					_, _, err := n.ctl().CreateTopic(context.Background(), "x", 1, 1, nil)
					if !errors.Is(err, meta.ErrNotController) {
						t.Fatalf("create on node %d (not the controller): %v, want NOT_CONTROLLER", n.id, err)
					}
				}
			}
			stop := c.ticking()
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- c.createTopic(fmt.Sprintf("t%02d", i), int32(1+i%4), int16(1+i%3))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			c.tickUntil(100, "every node caught up", c.caughtUp)
			stop()
			all := c.checkSameOrder(c.live())
			for _, n := range c.live() {
				if got := len(n.applied()); got != len(all) {
					t.Fatalf("node %d applied %d changes, node with most %d", n.id, got, len(all))
				}
				if got := len(n.ctl().Machine().Topics()); got != 40 {
					t.Fatalf("node %d has %d topics, want 40", n.id, got)
				}
			}
			topics, assigned := topicCreations(all)
			for i := range 40 {
				name := fmt.Sprintf("t%02d", i)
				if topics[name] != 1 || assigned[name] != 1+i%4 {
					t.Fatalf("topic %s: %d creations, %d assignments", name, topics[name], assigned[name])
				}
			}
			// A duplicate name is refused with TOPIC_ALREADY_EXISTS.
			stop = c.ticking()
			defer stop()
			err := c.call(func(ctx context.Context, ctl *Controller) error {
				_, _, err := ctl.CreateTopic(ctx, "t00", 1, 1, nil)
				return err
			})
			if !errors.Is(err, meta.ErrTopicExists) {
				t.Fatalf("creating t00 again: %v, want TOPIC_ALREADY_EXISTS", err)
			}
		})
	}
}

// TestControllerKilledMidCreation: clients create topics while the active
// controller's node is stopped, again and again; clients retry on the next
// controller. Every topic ends up created exactly once, with every
// partition assigned, the same on every live node: never twice, never a
// topic without its assignments.
func TestControllerKilledMidCreation(t *testing.T) {
	c := newRegisteredCluster(t, 5, 3)
	stop := c.ticking()
	const topics = 60
	var wg sync.WaitGroup
	errs := make(chan error, topics)
	for i := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			errs <- c.createTopic(fmt.Sprintf("k%02d", i), 3, 2)
		}()
	}
	// Stop the controller's node twice while creations are under way (a
	// voter each time: two of the three stay, a quorum), restarting the
	// first before the second stop.
	var killed []*testNode
	for round := range 2 {
		time.Sleep(60 * time.Millisecond)
		var a *testNode
		for a == nil {
			a = c.active()
			time.Sleep(time.Millisecond)
		}
		stop()
		c.stop(a)
		killed = append(killed, a)
		t.Logf("round %d: stopped the controller, node %d, at its index %d", round, a.id, a.ctl().Applied())
		stop = c.ticking()
		time.Sleep(100 * time.Millisecond)
		if round == 0 {
			stop()
			c.restart(a)
			stop = c.ticking()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	stop()
	c.tickUntil(200, "every live node caught up", c.caughtUp)
	all := c.checkSameOrder(c.live())
	created, assigned := topicCreations(all)
	for i := range topics {
		name := fmt.Sprintf("k%02d", i)
		if created[name] != 1 || assigned[name] != 3 {
			t.Fatalf("topic %s: created %d times, %d partitions assigned, want once and 3", name, created[name], assigned[name])
		}
	}
	for _, n := range c.live() {
		for _, tp := range n.ctl().Machine().Topics() {
			for p, r := range n.ctl().Machine().Replicas(tp.ID) {
				if len(r) != 2 {
					t.Fatalf("node %d: %s/%d has replicas %v", n.id, tp.Name, p, r)
				}
			}
		}
	}
	t.Logf("%d changes applied, controllers stopped: %d", len(all), len(killed))
}

// TestFencedAfterSessionTimeout: a broker that stops heartbeating is fenced
// once broker.session.timeout.ms has passed without one, on every node; its
// next heartbeat with the same incarnation unfences it; a heartbeat of an
// old incarnation is STALE_BROKER_EPOCH; a fenced broker gets no replicas.
func TestFencedAfterSessionTimeout(t *testing.T) {
	c := newRegisteredCluster(t, 3, 3)
	quiet := c.nodes[2]
	fencedEverywhere := func(want bool) func() bool {
		return func() bool {
			for _, n := range c.live() {
				if b, _ := n.ctl().Machine().Broker(quiet.id); b.Fenced != want {
					return false
				}
			}
			return true
		}
	}
	// 8.5 s of heartbeats from the others only: nobody is fenced yet.
	for range 17 {
		c.clock.Advance(500 * time.Millisecond)
		for _, n := range c.nodes[:2] {
			c.heartbeat(n)
		}
		c.tick()
	}
	if !fencedEverywhere(false)() {
		t.Fatalf("broker %d fenced before its session timed out", quiet.id)
	}
	for _, n := range c.nodes[:2] {
		if b, _ := n.ctl().Machine().Broker(n.id); b.Fenced {
			t.Fatalf("heartbeating broker %d fenced", n.id)
		}
	}
	c.clock.Advance(500 * time.Millisecond) // 9 s
	for _, n := range c.nodes[:2] {
		c.heartbeat(n)
	}
	c.tickUntil(20, "the quiet broker fenced on every node", fencedEverywhere(true))
	for _, n := range c.nodes[:2] {
		if b, _ := n.ctl().Machine().Broker(n.id); b.Fenced {
			t.Fatalf("heartbeating broker %d fenced", n.id)
		}
	}
	// Fenced: no replicas on it; rf 3 over two live brokers is refused.
	stop := c.ticking()
	err := c.call(func(ctx context.Context, ctl *Controller) error {
		_, _, err := ctl.CreateTopic(ctx, "rf3", 1, 3, nil)
		return err
	})
	if !errors.Is(err, meta.ErrInvalidReplicationFactor) {
		t.Fatalf("rf 3 with a broker fenced: %v, want INVALID_REPLICATION_FACTOR", err)
	}
	var replicas [][]int32
	err = c.call(func(ctx context.Context, ctl *Controller) (err error) {
		_, replicas, err = ctl.CreateTopic(ctx, "rf2", 8, 2, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range replicas {
		if slices.Contains(r, quiet.id) {
			t.Fatalf("partition %d placed on the fenced broker: %v", p, r)
		}
	}
	// An old incarnation's heartbeat is stale; the current one unfences.
	err = c.call(func(ctx context.Context, ctl *Controller) error {
		_, err := ctl.Heartbeat(ctx, quiet.id, NewIncarnation(), quiet.ctl().Applied())
		return err
	})
	if !errors.Is(err, meta.ErrStaleBrokerEpoch) {
		t.Fatalf("heartbeat of another incarnation: %v, want STALE_BROKER_EPOCH", err)
	}
	stop()
	if fenced := c.heartbeat(quiet); fenced {
		t.Fatal("the quiet broker's heartbeat left it fenced")
	}
	c.tickUntil(20, "the quiet broker unfenced on every node", fencedEverywhere(false))
	c.checkSameOrder(c.live())
}

// TestLearnerCatchesUpAfterRestart: a learner stopped while topics are
// created catches up when it starts again on its storage: it replays its
// log into a new state machine, then takes the leader's new entries, and
// applies exactly what the others applied, in order.
func TestLearnerCatchesUpAfterRestart(t *testing.T) {
	c := newRegisteredCluster(t, 5, 3)
	learner := c.nodes[4]
	stop := c.ticking()
	for i := range 5 {
		if err := c.createTopic(fmt.Sprintf("before%d", i), 2, 3); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	c.tickUntil(50, "caught up", c.caughtUp)
	c.stop(learner)
	stop = c.ticking()
	for i := range 10 {
		if err := c.createTopic(fmt.Sprintf("while-down%d", i), 2, 3); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if n := len(learner.ctl().Machine().Topics()); n != 5 {
		t.Fatalf("the stopped learner has %d topics, want 5", n)
	}
	c.restart(learner)
	c.tickUntil(100, "the learner caught up", c.caughtUp)
	all := c.checkSameOrder(c.live())
	if got := learner.applied(); len(got) != len(all) {
		t.Fatalf("the learner applied %d changes after its restart, the others %d", len(got), len(all))
	}
	if n := len(learner.ctl().Machine().Topics()); n != 15 {
		t.Fatalf("the learner has %d topics, want 15", n)
	}
}

// TestCreateHistoryOrder is the order check of concurrent creations with
// overlapping names while leadership moves: for each name, exactly one
// client hears "created" and its TopicRecord is the only one applied; a
// client that hears TOPIC_ALREADY_EXISTS asked after that record was
// applied on the controller that answered (never before the creation it
// was refused for).
func TestCreateHistoryOrder(t *testing.T) {
	c := newRegisteredCluster(t, 3, 3)
	stop := c.ticking()
	defer stop()
	type answer struct {
		name    string
		created bool
		applied uint64 // the answering controller's applied index after the answer
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for client := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				name := fmt.Sprintf("h%02d", (i+client)%20)
				var a answer
				err := c.call(func(ctx context.Context, ctl *Controller) error {
					_, _, err := ctl.CreateTopic(ctx, name, 1, 1, nil)
					a = answer{name: name, created: err == nil, applied: ctl.Applied()}
					return err
				})
				if err != nil && !errors.Is(err, meta.ErrTopicExists) {
					t.Error(err)
					return
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
		if client == 2 {
			// Move the controller once mid-way.
			time.Sleep(30 * time.Millisecond)
			if a := c.active(); a != nil {
				for _, n := range c.live() {
					if n != a {
						_ = a.raft().TransferLeadership(MetadataGroup, RaftID(n.id))
						break
					}
				}
			}
		}
	}
	wg.Wait()
	c.tickUntil(100, "caught up", c.caughtUp)
	all := c.checkSameOrder(c.live())
	createdAt := map[string]uint64{}
	for _, ch := range all {
		if r, ok := ch.Record.(*meta.TopicRecord); ok {
			if _, dup := createdAt[r.Name]; dup {
				t.Fatalf("topic %s created twice", r.Name)
			}
			createdAt[r.Name] = ch.Index
		}
	}
	winners := map[string]int{}
	for _, a := range answers {
		if a.created {
			winners[a.name]++
			continue
		}
		if a.applied < createdAt[a.name] {
			t.Fatalf("%s refused as existing by a controller at index %d, created at %d", a.name, a.applied, createdAt[a.name])
		}
	}
	for name := range createdAt {
		if winners[name] > 1 {
			t.Fatalf("%d clients told %s was created by them", winners[name], name)
		}
	}
	t.Logf("%d answers, %d topics", len(answers), len(createdAt))
}

// TestCreatePlacesByRack: brokers registered with racks get each
// partition's replicas on distinct racks, and every node applies the same
// assignment.
func TestCreatePlacesByRack(t *testing.T) {
	c := newTestCluster(t, 5, 3)
	c.waitActive(60)
	racks := []string{"a", "a", "b", "b", "c"}
	c.registerAll(func(id int32) string { return racks[id] })
	stop := c.ticking()
	defer stop()
	var replicas [][]int32
	err := c.call(func(ctx context.Context, ctl *Controller) (err error) {
		_, replicas, err = ctl.CreateTopic(ctx, "racked", 10, 3, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range replicas {
		if n := racksUsed(r, func(b int32) string { return racks[b] }); len(r) != 3 || n != 3 {
			t.Fatalf("partition %d on %v: %d racks", p, r, n)
		}
	}
	c.tickUntil(50, "caught up", c.caughtUp)
	for _, n := range c.live() {
		tp, ok := n.ctl().Machine().Topic("racked")
		if !ok || fmt.Sprint(n.ctl().Machine().Replicas(tp.ID)) != fmt.Sprint(replicas) {
			t.Fatalf("node %d: replicas %v, the controller answered %v", n.id, n.ctl().Machine().Replicas(tp.ID), replicas)
		}
		if b, _ := n.ctl().Machine().Broker(4); b.Rack != "c" || len(b.Listeners) != 1 {
			t.Fatalf("node %d: broker 4 registered as %+v", n.id, b)
		}
	}
}

// TestRunFencesOnTheRealClock: nodes on raft's own ticker and the real
// clock, each controller ticked by Run: a broker that registered and never
// heartbeats again is fenced once a (short) session timeout has passed.
func TestRunFencesOnTheRealClock(t *testing.T) {
	const nodes = 3
	var ctls []*Controller
	var rns []*raftnode.Node
	for id := range int32(nodes) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rn, err := raftnode.New(raftnode.Config{ID: RaftID(id), Cluster: 14, Listener: ln,
			TickInterval: 20 * time.Millisecond, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		ctl, err := New(Config{Node: id, Voters: []int32{0, 1, 2}, Raft: rn, Storage: raftnode.NewMemStorage(),
			SessionTimeout: 300 * time.Millisecond, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		rns, ctls = append(rns, rn), append(ctls, ctl)
	}
	for i, rn := range rns {
		for j, p := range rns {
			if i != j {
				if err := rn.AddPeer(p.ID(), p.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, rn := range rns {
		rn.Start()
		wg.Add(1)
		go func() { defer wg.Done(); ctls[i].Run(ctx, 20*time.Millisecond) }()
	}
	defer func() {
		cancel()
		wg.Wait()
		for _, rn := range rns {
			rn.Stop()
		}
	}()
	active := func() *Controller {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			for _, c := range ctls {
				if c.Active() {
					return c
				}
			}
		}
		t.Fatal("no active controller within 10 s")
		return nil
	}
	inc := NewIncarnation()
	var err error
	for try := 0; try == 0 || errors.Is(err, meta.ErrNotController); try++ {
		err = active().RegisterBroker(ctx, Registration{ID: 7, Incarnation: inc})
	}
	if err != nil {
		t.Fatal(err)
	}
	// The heartbeat answers once the unfence is applied on the controller
	// that took it: watch that one's state.
	a := active()
	fenced, err := a.Heartbeat(ctx, 7, inc, a.Applied()+100)
	if err != nil || fenced {
		t.Fatalf("heartbeat: fenced %v, %v", fenced, err)
	}
	unfencedAt := time.Now()
	if b, _ := a.Machine().Broker(7); b.Fenced {
		t.Fatal("fenced right after a heartbeat answered unfenced")
	}
	for {
		if b, _ := a.Machine().Broker(7); b.Fenced {
			break
		}
		if time.Since(unfencedAt) > 10*time.Second {
			t.Fatal("not fenced 10 s after its last heartbeat")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(unfencedAt); took < 300*time.Millisecond {
		t.Fatalf("fenced %v after its last heartbeat, before the 300 ms session timeout", took)
	}
}
