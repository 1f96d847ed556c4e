package replica

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sushka-io/sushka/internal/plog"
)

// produceOp is one acks=all produce of a value; its output is the value's
// position among the data batches of the final log.
type produceOp struct{ value string }

// partitionModel is Kafka's model of a partition, an append-only list: the
// state is its length, and a produce takes effect at the position it is
// found at, which must be the length then. Linearizable: a batch
// acknowledged before another was produced sits before it.
var partitionModel = porcupine.Model{
	Init: func() any { return 0 },
	Step: func(state, _, output any) (bool, any) {
		n := state.(int)
		return output.(int) == n, n + 1
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("produce %s → %d", input.(produceOp).value, output.(int))
	},
}

// TestLinearizableProduce: four producers append acks=all through
// whichever replica leads while the leader is cut off and healed and
// leadership moves; every replica ends with the same log, each
// acknowledged batch at the offset it was answered with, none twice, and
// porcupine finds the history linearizable (a batch answered with an error
// and found in the log took effect at some time after it was produced). A
// failing history is written to $SUSHKA_TEST_ARTIFACTS.
func TestLinearizableProduce(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	stopTicks := c.ticking()
	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		acked   = map[string]int64{}
	)
	const producers, perProducer = 4, 60
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; i < perProducer && time.Now().Before(deadline); i++ {
				leader := c.leader()
				if leader == 0 {
					time.Sleep(5 * time.Millisecond)
					i--
					continue
				}
				v := fmt.Sprintf("p%d-%d", p, i)
				call := time.Since(start).Nanoseconds()
				res, err := appendWithin(c.part(leader).Log(), value(v), plog.AckForced)
				ret := int64(math.MaxInt64) // not acknowledged: may or may not be in the log
				if err == nil {
					ret = time.Since(start).Nanoseconds()
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: p, Input: produceOp{v}, Call: call, Return: ret})
				if err == nil {
					acked[v] = res.BaseOffset
				}
				mu.Unlock()
				time.Sleep(time.Duration(5+i%10) * time.Millisecond) // the run spans the chaos
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	rng := rand.New(rand.NewPCG(14, 5))
	for round := 0; ; round++ {
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			if l := c.leader(); l != 0 && round%2 == 0 {
				c.cut(l, true)
				time.Sleep(300 * time.Millisecond)
				c.cut(l, false)
			} else if l != 0 {
				_ = c.nodes[l-1].TransferLeadership(group, uint64(rng.IntN(3)+1))
			}
			continue
		}
		break
	}
	leader := c.awaitLeaderTicking()
	// A last batch through the final leader commits everything before it.
	res, err := appendWithin(c.part(leader).Log(), value("last"), plog.AckForced)
	stopTicks()
	if err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(res.BaseOffset + 1)
	log := c.sameLogs()
	position, offset := map[string]int{}, map[string]int64{}
	for i, r := range log {
		if _, dup := position[r.value]; dup {
			t.Fatalf("%s is in the log twice", r.value)
		}
		position[r.value], offset[r.value] = i, r.offset
	}
	var checked []porcupine.Operation
	for _, op := range history {
		v := op.Input.(produceOp).value
		pos, ok := position[v]
		want, wasAcked := acked[v]
		switch {
		case wasAcked && !ok:
			t.Fatalf("%s was acknowledged at offset %d but is not in the log", v, want)
		case wasAcked && offset[v] != want:
			t.Fatalf("%s was acknowledged at offset %d, is at %d", v, want, offset[v])
		case !ok:
			continue // never took effect
		}
		op.Output = pos
		checked = append(checked, op)
	}
	t.Logf("%d produces, %d acknowledged, %d in the log", len(history), len(acked), len(checked))
	result, info := porcupine.CheckOperationsVerbose(partitionModel, checked, 30*time.Second)
	if result != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if dir := os.Getenv("SUSHKA_TEST_ARTIFACTS"); dir != "" {
			path = filepath.Join(dir, "replica-linearizable.html")
		}
		if err := porcupine.VisualizePath(partitionModel, info, path); err == nil {
			t.Logf("history written to %s", path)
		}
		t.Fatalf("history not linearizable: %v", result)
	}
}

// TestPartitionModelCatchesReordering: the checker is not vacuous.
func TestPartitionModelCatchesReordering(t *testing.T) {
	h := []porcupine.Operation{
		{Input: produceOp{"a"}, Call: 0, Return: 10, Output: 1},
		{Input: produceOp{"b"}, Call: 20, Return: 30, Output: 0},
	}
	if res := porcupine.CheckOperationsTimeout(partitionModel, h, time.Second); res != porcupine.Illegal {
		t.Fatalf("reordered history: %v, want Illegal", res)
	}
}

// awaitLeaderTicking waits (the background ticker running) for a replica
// that takes appends.
func (c *testCluster) awaitLeaderTicking() uint64 {
	c.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if l := c.leader(); l != 0 {
			return l
		}
	}
	c.t.Fatal("no leader 10 s after the chaos")
	return 0
}
