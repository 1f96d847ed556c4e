package proc

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

var replaySeed = flag.Uint64("proc.seed", 0, "replay only this seed in the deterministic tests, printing its journal")

// swarm is a program whose process table grows while it runs: every worker
// spawns two children until depth runs out, gossips to the workers it knows
// by name, and sets a timer. Which messages arrive in which order is the
// scheduler's choice, so the journal is a fingerprint of those choices.
type swarmWorker struct {
	depth int
	id    string
	seen  int
}

func (w *swarmWorker) Receive(ctx *Context, m any) error {
	w.seen++
	switch m := m.(type) {
	case string:
		if m == "go" && w.depth > 0 {
			for _, side := range []string{"l", "r"} {
				child := &swarmWorker{depth: w.depth - 1, id: w.id + side}
				pid, err := ctx.Spawn(child.id, child, SpawnOptions{Link: true})
				if err != nil {
					return err
				}
				_ = ctx.Send(pid, "go")
			}
			ctx.SendAfter(ctx.Self(), "tick", time.Duration(len(w.id))*time.Millisecond)
		}
		if m == "tick" {
			// Gossip to the parent and the sibling, by name.
			if len(w.id) > 1 {
				_ = ctx.SendName(w.id[:len(w.id)-1], w.seen)
				sibling := w.id[:len(w.id)-1] + map[byte]string{'l': "r", 'r': "l"}[w.id[len(w.id)-1]]
				_ = ctx.SendName(sibling, w.seen)
			}
		}
	case int:
		if m > 3 && w.depth == 0 {
			ctx.Stop() // leaves exit normally after enough gossip; links do not propagate a normal exit
		}
	}
	return nil
}

func runSwarm(t testing.TB, seed uint64) []byte {
	t.Helper()
	var journal bytes.Buffer
	rt := mustNew(t, Options{Deterministic: true, Seed: seed, Journal: &journal, JournalDeliveries: true, MaxTurns: 100_000})
	root := &swarmWorker{depth: 5, id: "w"}
	pid := mustSpawn(t, rt, root.id, root, SpawnOptions{})
	_ = rt.Send(pid, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	return journal.Bytes()
}

// TestDeterministicJournalIsSeedFunction: over many seeds, the same seed
// gives a byte-identical journal for a program whose process table grows by
// spawning; different seeds give different schedules.
func TestDeterministicJournalIsSeedFunction(t *testing.T) {
	seeds := 50
	if *replaySeed != 0 {
		j := runSwarm(t, *replaySeed)
		t.Logf("seed %d journal:\n%s", *replaySeed, j)
		return
	}
	distinct := map[string]bool{}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		first := runSwarm(t, seed)
		second := runSwarm(t, seed)
		if !bytes.Equal(first, second) {
			t.Fatalf("seed %d: two runs gave different journals (%d vs %d bytes); replay with -proc.seed=%d", seed, len(first), len(second), seed)
		}
		if !bytes.Contains(first, []byte("spawn")) || bytes.Count(first, []byte("\n")) < 100 {
			t.Fatalf("seed %d: journal too small to mean anything:\n%s", seed, first)
		}
		distinct[string(first)] = true
	}
	if len(distinct) < seeds/2 {
		t.Fatalf("only %d distinct schedules over %d seeds: the seed does not drive the choice", len(distinct), seeds)
	}
}

// register is a process holding one value; a racy program has two writers
// set it, and believes the first writer is always last.
type register struct{ value string }

func (r *register) Receive(ctx *Context, m any) error {
	r.value = m.(string)
	return nil
}

type writer struct {
	target PID
	value  string
	hops   int
}

func (w *writer) Receive(ctx *Context, m any) error {
	if w.hops > 0 { // a few self-sends, so the writers interleave differently per seed
		w.hops--
		return ctx.Send(ctx.Self(), m)
	}
	ctx.Stop()
	return ctx.Send(w.target, w.value)
}

// runRace runs the racy program and reports its journal and whether the
// program's belief held.
func runRace(t *testing.T, seed uint64) ([]byte, bool) {
	var journal bytes.Buffer
	rt := mustNew(t, Options{Deterministic: true, Seed: seed, Journal: &journal, JournalDeliveries: true})
	reg := &register{}
	target := mustSpawn(t, rt, "register", reg, SpawnOptions{})
	a := mustSpawn(t, rt, "a", &writer{target: target, value: "a", hops: 3}, SpawnOptions{})
	b := mustSpawn(t, rt, "b", &writer{target: target, value: "b", hops: 2}, SpawnOptions{})
	_ = rt.Send(b, "go")
	_ = rt.Send(a, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	return journal.Bytes(), reg.value == "a"
}

// TestReplayFailingRunFromSeed: a search over seeds finds a schedule that
// breaks the program's belief, and that seed alone replays the same failing
// run, journal byte for byte.
func TestReplayFailingRunFromSeed(t *testing.T) {
	var failing uint64
	var failingJournal []byte
	passed := 0
	for seed := uint64(1); seed <= 200; seed++ {
		j, ok := runRace(t, seed)
		if ok {
			passed++
			continue
		}
		if failing == 0 {
			failing, failingJournal = seed, j
		}
	}
	if failing == 0 || passed == 0 {
		t.Fatalf("%d of 200 seeds passed: the program should pass under some schedules and fail under others", passed)
	}
	for i := 0; i < 3; i++ {
		j, ok := runRace(t, failing)
		if ok {
			t.Fatalf("seed %d failed once and passed on replay", failing)
		}
		if !bytes.Equal(j, failingJournal) {
			t.Fatalf("seed %d replayed with a different journal:\n%s\nvs\n%s", failing, j, failingJournal)
		}
	}
	t.Logf("seed %d breaks the belief; replayed 3 times identically (%d of 200 seeds pass)", failing, passed)
}

// TestVirtualTimeJumpsToTimers: in deterministic mode an hour of timers
// takes no wall time, and the order of equal deadlines is the order they
// were set.
func TestVirtualTimeJumpsToTimers(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true, Seed: 1})
	var got []string
	pid := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		if m == "start" {
			for i := 0; i < 5; i++ {
				ctx.SendAfter(ctx.Self(), "t"+strconv.Itoa(i), time.Hour)
			}
			return nil
		}
		got = append(got, fmt.Sprint(m, "@", ctx.Now().Sub(defaultVirtualStart)))
		return nil
	}), SpawnOptions{})
	_ = rt.Send(pid, "start")
	began := time.Now()
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if time.Since(began) > time.Second {
		t.Fatal("virtual time waited on the wall clock")
	}
	if want := "[t0@1h0m0s t1@1h0m0s t2@1h0m0s t3@1h0m0s t4@1h0m0s]"; fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// TestChoiceWindow: the window changes the schedules a seed gives, each
// window is deterministic, and a window of 1 is FIFO.
func TestChoiceWindow(t *testing.T) {
	order := func(window int, seed uint64) string {
		rt := mustNew(t, Options{Deterministic: true, Seed: seed, ChoiceWindow: window})
		var got []byte
		for i := 0; i < 20; i++ {
			i := i
			pid := mustSpawn(t, rt, "", BehaviourFunc(func(*Context, any) error { got = append(got, byte('a'+i)); return nil }), SpawnOptions{})
			_ = rt.Send(pid, 0)
		}
		if err := rt.RunUntilIdle(); err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	if got := order(1, 5); got != "abcdefghijklmnopqrst" {
		t.Fatalf("window 1 gave %s, want FIFO", got)
	}
	//lint:ignore SA4000 each call runs the schedule anew: equal runs are what is checked
	if order(4, 5) != order(4, 5) || order(1<<30, 5) != order(1<<30, 5) {
		t.Fatal("a window is not deterministic")
	}
	if order(4, 5) == order(1<<30, 5) {
		t.Fatal("window 4 and an unbounded window gave the same schedule of 20 processes")
	}
	// The first choice is among the first 4 queued.
	for seed := uint64(1); seed < 50; seed++ {
		if first := order(4, seed)[0]; first > 'd' {
			t.Fatalf("seed %d: window 4 chose %c first", seed, first)
		}
	}
}

// TestDeterministicGoldenJournal pins one seed's journal to a file: a seed
// must replay the same schedule on every machine and every later version
// (a change that alters it must say so by rewriting the file: -rewrite).
func TestDeterministicGoldenJournal(t *testing.T) {
	var journal bytes.Buffer
	rt := mustNew(t, Options{Deterministic: true, Seed: 7, Journal: &journal, JournalDeliveries: true})
	root := &swarmWorker{depth: 2, id: "w"}
	pid := mustSpawn(t, rt, root.id, root, SpawnOptions{})
	_ = rt.Send(pid, "go")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	path := "testdata/deterministic/swarm-depth2-seed7.txt"
	if *rewrite {
		if err := os.WriteFile(path, journal.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if !bytes.Equal(journal.Bytes(), want) {
		t.Fatalf("seed 7 no longer replays the recorded schedule (%s; -rewrite if the change is meant)\n--- got\n%s", path, journal.Bytes())
	}
}
