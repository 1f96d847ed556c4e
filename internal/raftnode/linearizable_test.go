package raftnode

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// appendOp is one proposal of a client: its group and value; the output is
// the value's position in the group's final log.
type appendOp struct {
	group uint64
	value string
}

// logModel is a partition's log (Kafka's model of it: an append-only list):
// the state is its length, and an append returns the position it landed at,
// which must be the length when it takes effect. Linearizable: an append
// acknowledged before another began sits at a lower position.
var logModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byGroup := map[uint64][]porcupine.Operation{}
		var groups []uint64
		for _, op := range history {
			g := op.Input.(appendOp).group
			if byGroup[g] == nil {
				groups = append(groups, g)
			}
			byGroup[g] = append(byGroup[g], op)
		}
		slices.Sort(groups)
		out := make([][]porcupine.Operation, 0, len(groups))
		for _, g := range groups {
			out = append(out, byGroup[g])
		}
		return out
	},
	Init: func() any { return 0 },
	Step: func(state, _, output any) (bool, any) {
		n := state.(int)
		return output.(int) == n, n + 1
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("append %s → %d", input.(appendOp).value, output.(int))
	},
}

// TestLinearizableAppends: concurrent clients append through each group's
// leader while the leaders' nodes are cut off and healed and leadership
// moves; afterwards every node holds the same log, no acknowledged append is
// missing from it, and porcupine finds the history linearizable. A failing
// history is written to the test's artifacts (porcupine's visualization).
func TestLinearizableAppends(t *testing.T) { testLinearizableAppends(t, false) }

func testLinearizableAppends(t *testing.T, onPlog bool) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 3, manual: true, plog: onPlog})
	c.electAll(60)

	stopTicks := make(chan struct{})
	var tickWG sync.WaitGroup
	tickWG.Add(1)
	go func() { // real time, fast ticks: elections in ~100 ms
		defer tickWG.Done()
		for {
			select {
			case <-stopTicks:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, n := range c.live() {
				n.Tick()
			}
		}
	}()
	defer func() { close(stopTicks); tickWG.Wait() }()

	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		acked   = map[string]bool{}
	)
	leaderOf := func(g uint64) uint64 {
		for _, n := range c.nodes {
			if l, _ := n.Leader(g); l != 0 {
				return l
			}
		}
		return 0
	}
	const clientsPerGroup, opsPerClient = 3, 40
	var clients sync.WaitGroup
	for _, g := range c.groups {
		for cl := range clientsPerGroup {
			clients.Add(1)
			go func() {
				defer clients.Done()
				for i := 0; i < opsPerClient; {
					value := fmt.Sprintf("g%d-c%d-%d", g, cl, i)
					leader := leaderOf(g)
					if leader == 0 {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					applied := c.whenApplied(leader, value)
					errs := make(chan error, 1)
					call := time.Since(start).Nanoseconds()
					c.node(leader).Propose(g, c.payload(value), func(err error) { errs <- err })
					if err := <-errs; err != nil {
						time.Sleep(5 * time.Millisecond) // not the leader (any more): not in any log
						continue
					}
					ret := int64(math.MaxInt64) // taken, never acknowledged: may or may not commit
					select {
					case <-applied:
						ret = time.Since(start).Nanoseconds()
					case <-time.After(time.Second):
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: int(g)*clientsPerGroup + cl,
						Input: appendOp{group: g, value: value}, Call: call, Return: ret})
					acked[value] = ret != math.MaxInt64
					mu.Unlock()
					i++
					time.Sleep(time.Duration(10+len(value)%20) * time.Millisecond) // think time: the run spans the chaos
				}
			}()
		}
	}
	// Chaos: cut the node leading group 1 off for 300 ms, heal, move a
	// leadership, again.
	done := make(chan struct{})
	go func() { clients.Wait(); close(done) }()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; ; round++ {
		select {
		case <-done:
		case <-time.After(150 * time.Millisecond):
			if l := leaderOf(c.groups[0]); l != 0 && round%2 == 0 {
				c.partition(l, true)
				time.Sleep(300 * time.Millisecond)
				c.partition(l, false)
			} else if l := leaderOf(c.groups[1]); l != 0 {
				_ = c.node(l).TransferLeadership(c.groups[1], uint64(rng.IntN(3)+1))
			}
			continue
		}
		break
	}

	// Every node ends with the same log.
	deadline := time.Now().Add(10 * time.Second)
	for {
		same := true
		for _, g := range c.groups {
			for _, n := range c.nodes[1:] {
				if !slices.Equal(c.appliedOf(n.ID(), g), c.appliedOf(1, g)) {
					same = false
				}
			}
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the nodes' logs differ 10 s after the last append")
		}
		time.Sleep(20 * time.Millisecond)
	}
	positions := map[string]int{}
	for _, g := range c.groups {
		for i, v := range c.appliedOf(1, g) {
			if _, dup := positions[v]; dup {
				t.Fatalf("group %d: %s applied twice", g, v)
			}
			positions[v] = i
		}
	}
	var checked []porcupine.Operation
	ackedCount := 0
	for _, op := range history {
		v := op.Input.(appendOp).value
		pos, ok := positions[v]
		switch {
		case !ok && acked[v]:
			t.Fatalf("%s was acknowledged but is in no log", v)
		case !ok:
			continue // taken by a leader that lost it before committing: never happened
		}
		if acked[v] {
			ackedCount++
		}
		op.Output = pos
		checked = append(checked, op)
	}
	t.Logf("%d appends in the logs (%d acknowledged) of %d taken", len(checked), ackedCount, len(history))
	res, info := porcupine.CheckOperationsVerbose(logModel, checked, 30*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if dir := os.Getenv("SUSHKA_TEST_ARTIFACTS"); dir != "" {
			path = filepath.Join(dir, "raftnode-linearizable.html")
		}
		if err := porcupine.VisualizePath(logModel, info, path); err == nil {
			t.Logf("history written to %s", path)
		}
		t.Fatalf("history not linearizable: %v", res)
	}
}

// TestLogModelCatchesReordering: the checker is not vacuous: an append
// acknowledged before another began but placed after it is illegal.
func TestLogModelCatchesReordering(t *testing.T) {
	h := []porcupine.Operation{
		{Input: appendOp{1, "a"}, Call: 0, Return: 10, Output: 1},
		{Input: appendOp{1, "b"}, Call: 20, Return: 30, Output: 0},
	}
	if res := porcupine.CheckOperationsTimeout(logModel, h, time.Second); res != porcupine.Illegal {
		t.Fatalf("reordered history: %v, want Illegal", res)
	}
	h[0].Output, h[1].Output = 0, 1
	if res := porcupine.CheckOperationsTimeout(logModel, h, time.Second); res != porcupine.Ok {
		t.Fatalf("ordered history: %v, want Ok", res)
	}
}
