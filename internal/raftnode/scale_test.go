package raftnode

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// spreadLeaders has each group's leadership moved to node (g mod nodes)+1,
// so that every node leads a share (and proposals load every pair).
func (c *testCluster) spreadLeaders(maxTicks int) map[uint64]uint64 {
	c.t.Helper()
	leaders, _ := c.electAll(maxTicks)
	n := uint64(len(c.nodes))
	for g, l := range leaders {
		if want := g%n + 1; l != want {
			_ = c.node(l).TransferLeadership(g, want)
		}
	}
	c.tickUntil(maxTicks, "leaders spread", func() bool {
		var ok bool
		leaders, ok = c.leaders()
		if !ok {
			return false
		}
		spread := true
		for g, l := range leaders {
			if want := g%n + 1; l != want {
				spread = false
				if c.ticked > 0 && c.ticked%c.nodes[0].cfg.ElectionTicks == 0 {
					_ = c.node(l).TransferLeadership(g, want) // raft aborts a transfer after an election timeout
				}
			}
		}
		return spread
	})
	return leaders
}

// proposeEach proposes one entry to every group through its leader and
// waits until every node applied it.
func (c *testCluster) proposeEach(leaders map[uint64]uint64, value string, applied int) {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(c.groups))
	for _, g := range c.groups {
		wg.Add(1)
		c.node(leaders[g]).Propose(g, []byte(value), func(err error) {
			if err != nil {
				errs <- fmt.Errorf("group %d: %w", g, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	c.tickUntil(20, "one entry per group applied everywhere", c.everyGroupApplied(applied))
}

// goroutinesAtMost fails unless the process runs at most want goroutines
// more than base (waiting a little for goroutines that are ending).
func goroutinesAtMost(t *testing.T, base, want int, what string) int {
	t.Helper()
	var n int
	for deadline := time.Now().Add(2 * time.Second); ; {
		n = runtime.NumGoroutine() - base
		if n <= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n > want {
		t.Fatalf("%s: %d goroutines, want at most %d", what, n, want)
	}
	return n
}

// perNodeGoroutines is what a node may run whatever its number of groups:
// the accept loop, the workers, one writer per peer and one reader per
// accepted connection.
func perNodeGoroutines(workers, peers int) int { return 1 + workers + 2*peers }

func TestThousandGroupsOneConnectionPerPair(t *testing.T) {
	base := runtime.NumGoroutine()
	const groups = 1000
	c := newCluster(t, clusterOptions{nodes: 3, groups: groups, manual: true})
	leaders := c.spreadLeaders(80)
	c.proposeEach(leaders, "one", 1)

	workers := c.nodes[0].cfg.Workers
	got := goroutinesAtMost(t, base, 3*perNodeGoroutines(workers, 2), "3 nodes × 1,000 groups")
	t.Logf("3 nodes × %d groups: %d goroutines (%d workers a node)", groups, got, workers)
	var dials, accepts uint64
	for _, n := range c.nodes {
		st := n.Stats().Transport
		// One connection dialled to each peer and one accepted from each.
		if st.OpenConns != 4 {
			t.Fatalf("node %d has %d open connections, want 4 (one per ordered pair, each end)", n.ID(), st.OpenConns)
		}
		dials += st.Dials
		accepts += st.Accepts
		t.Logf("node %d: %d frames carried %d messages (%.1f a frame), %d bytes",
			n.ID(), st.FramesSent, st.MessagesSent, float64(st.MessagesSent)/float64(st.FramesSent), st.BytesSent)
	}
	if dials != 6 || accepts != 6 {
		t.Fatalf("%d dials and %d accepts, want 6 each: one connection per ordered pair, never redialled", dials, accepts)
	}
}

func TestQuiescence(t *testing.T) {
	groups := 10000
	if testing.Short() || raceEnabled {
		groups = 1000
	}
	base := runtime.NumGoroutine()
	start := time.Now()
	c := newCluster(t, clusterOptions{nodes: 3, groups: groups, manual: true, campaign: true})
	t.Logf("cluster made in %v", time.Since(start))
	leaders, electTicks := c.electAll(100)
	t.Logf("elected in %d ticks, %v", electTicks, time.Since(start))
	c.proposeEach(leaders, "one", 1)
	t.Logf("written in %v", time.Since(start))
	ticks := c.tickUntil(20, "every group quiescent", c.quiescent)
	t.Logf("%d groups quiescent %d ticks after the last write", groups, ticks)

	workers := c.nodes[0].cfg.Workers
	got := goroutinesAtMost(t, base, 3*perNodeGoroutines(workers, 2), fmt.Sprintf("3 nodes × %d quiescent groups", groups))
	t.Logf("3 nodes × %d quiescent groups: %d goroutines", groups, got)

	// The answers to the quiesce heartbeats may still be arriving: they are
	// stepped once, by no tick. The baseline is taken once runs stop.
	runs := func() (sum uint64) {
		for _, n := range c.nodes {
			sum += n.Stats().GroupRuns
		}
		return sum
	}
	for last, deadline := runs(), time.Now().Add(5*time.Second); ; {
		c.settle()
		time.Sleep(50 * time.Millisecond)
		now := runs()
		if now == last || time.Now().After(deadline) {
			break
		}
		last = now
	}
	before := make([]Stats, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.Stats()
	}
	const idleTicks = 50
	for range idleTicks {
		for _, n := range c.nodes {
			n.Tick()
		}
		c.settle()
		c.awaitLiveness()
	}
	for i, n := range c.nodes {
		st, was := n.Stats(), before[i]
		if st.Ticks-was.Ticks != idleTicks {
			t.Fatalf("node %d: %d ticks, want %d", n.ID(), st.Ticks-was.Ticks, idleTicks)
		}
		// No tick reaches a group and no Ready is made. A group may still
		// run once to step a late answer to its quiesce heartbeat (on a
		// loaded machine), never once per tick: at most one run a group.
		if st.GroupTicks != was.GroupTicks || st.Readies != was.Readies || st.GroupRuns-was.GroupRuns > uint64(groups) {
			t.Fatalf("node %d did per-group work while quiescent: %d group ticks, %d runs, %d Readys",
				n.ID(), st.GroupTicks-was.GroupTicks, st.GroupRuns-was.GroupRuns, st.Readies-was.Readies)
		}
		if st.Transport.MessagesSent != was.Transport.MessagesSent {
			t.Fatalf("node %d sent %d raft messages while quiescent", n.ID(), st.Transport.MessagesSent-was.Transport.MessagesSent)
		}
		// Liveness: one empty frame per peer per tick (two ticks may share one).
		if frames := st.Transport.FramesSent - was.Transport.FramesSent; frames == 0 || frames > 2*idleTicks {
			t.Fatalf("node %d sent %d frames in %d idle ticks, want 1..%d (liveness heartbeats)", n.ID(), frames, idleTicks, 2*idleTicks)
		}
	}

	// A write wakes its group alone; it commits and quiesces again.
	g := c.groups[0]
	c.propose(leaders[g], g, "two")
	c.tickUntil(20, "the write applied", func() bool { return c.allApplied(g, 2) })
	for _, n := range c.nodes {
		if active := n.Stats().ActiveGroups; active > 1 {
			t.Fatalf("node %d: %d groups awake after a write to one", n.ID(), active)
		}
	}
	c.tickUntil(20, "quiescent again", c.quiescent)
}
