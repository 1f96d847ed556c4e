package proc

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// tally is a test entity: it sums ints and fails on a negative one.
type tally struct {
	key   string
	total int
	seen  int
}

func (t *tally) Receive(ctx *Context, m any) error {
	n := m.(int)
	if n < 0 {
		return errors.New("negative for " + t.key)
	}
	t.total += n
	t.seen++
	return nil
}

func (t *tally) State() any { return [2]int{t.total, t.seen} }

func newTally(key string, state any) Entity {
	t := &tally{key: key}
	if s, ok := state.([2]int); ok {
		t.total, t.seen = s[0], s[1]
	}
	return t
}

func TestEntities(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true, Seed: 2})
	spawns := 0
	router := mustSpawn(t, rt, "router", NewEntities(EntityOptions{
		IdleTimeout: time.Second,
		NamePrefix:  "tally/",
		New: func(key string, state any) Entity {
			spawns++
			return newTally(key, state)
		},
	}), SpawnOptions{})
	route := func(key string, n int) { _ = rt.Send(router, Routed{Key: key, Message: n}) }
	run := func() {
		t.Helper()
		if err := rt.RunUntilIdle(); err != nil {
			t.Fatal(err)
		}
	}
	route("a", 1)
	route("b", 10)
	route("a", 2)
	run() // virtual time runs on: both passivate after a second
	if _, ok := rt.Lookup("tally/a"); ok {
		t.Fatal("a did not passivate when idle")
	}
	route("a", 4)  // a respawns with total 3
	route("b", -1) // b fails, with nothing handed over since its respawn
	run()
	route("b", 5) // b respawns from its hand-over (10)
	var states map[string]any
	_ = rt.Send(router, PassivateAll{Done: func(s map[string]any) { states = s }})
	run()
	if got := fmt.Sprint(states); got != "map[a:[7 3] b:[15 2]]" {
		t.Fatalf("states %s", got)
	}
	if spawns != 5 || rt.Stats().Live != 1 {
		t.Fatalf("%d spawns, %d live; want 5 spawns and only the router", spawns, rt.Stats().Live)
	}
}

// TestEntitiesMessageRacingPassivation: a message sent to an entity that
// has just passivated (its state still on the way) waits for the state and
// reaches the next incarnation.
func TestEntitiesMessageRacingPassivation(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	var states map[string]any
	router := mustSpawn(t, rt, "", NewEntities(EntityOptions{New: newTally}), SpawnOptions{})
	_ = rt.Send(router, Routed{Key: "k", Message: 1})
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	// The entity passivates (PassivateAll) and, before the router reads
	// its state, a message for k arrives: queue both in the router's
	// mailbox in that order, after the entity already stopped.
	r := rt.shards[0].lookup(router).behaviour.(*entityRouter)
	entity := r.live["k"]
	_ = rt.Send(router, PassivateAll{Done: func(s map[string]any) { states = s }})
	_ = rt.Send(router, Routed{Key: "k", Message: 2})
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if rt.Alive(entity) {
		t.Fatal("the first incarnation is still alive")
	}
	// The second message respawned k with state [1 1], so PassivateAll
	// reported once k was idle again, with both messages counted.
	if got := fmt.Sprint(states); got != "map[k:[3 2]]" {
		t.Fatalf("states %s", got)
	}
}

func TestEntitiesNeedNew(t *testing.T) {
	rt := mustNew(t, Options{})
	if _, err := rt.Spawn("", NewEntities(EntityOptions{}), SpawnOptions{}); err == nil {
		t.Fatal("a router without New started")
	}
}

// TestEntitiesLoseNothing: over many seeds, messages routed around the
// idle timeout (before, at, just after) all end up in some incarnation's
// state: passivation loses no message.
func TestEntitiesLoseNothing(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rt := mustNew(t, Options{Deterministic: true, Seed: seed})
		router := mustSpawn(t, rt, "", NewEntities(EntityOptions{New: newTally, IdleTimeout: 10 * time.Millisecond}), SpawnOptions{})
		rng := splitmix64{state: seed}
		want := 0
		driver := mustSpawn(t, rt, "", BehaviourFunc(func(ctx *Context, m any) error {
			for i := 0; i < 200; i++ {
				key := string(rune('a' + rng.below(5)))
				n := 1 + rng.below(9)
				want += n
				at := time.Duration(rng.below(60)) * time.Millisecond // around several idle timeouts
				ctx.SendAfter(router, Routed{Key: key, Message: n}, at)
			}
			return nil
		}), SpawnOptions{})
		_ = rt.Send(driver, "go")
		if err := rt.RunUntilIdle(); err != nil {
			t.Fatal(err)
		}
		var states map[string]any
		_ = rt.Send(router, PassivateAll{Done: func(s map[string]any) { states = s }})
		if err := rt.RunUntilIdle(); err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, s := range states {
			got += s.([2]int)[0]
		}
		if got != want {
			t.Fatalf("seed %d: states sum to %d, %d was routed", seed, got, want)
		}
	}
}
