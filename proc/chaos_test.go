package proc

import (
	"fmt"
	"testing"
)

// chaosMsg carries the PID it was sent to, so a receiver can prove that no
// message ever reached a process other than the one its PID named (a stale
// PID delivered to a reused slot would show a different generation).
type chaosMsg struct {
	to   PID
	hops int
}

// chaosProc acts on its own seeded PRNG (the program's randomness, itself
// deterministic): it sends to known PIDs (some stale), spawns, links,
// monitors, kills, traps exits, fails, stops.
type chaosProc struct {
	rng   *splitmix64
	known *[]PID
	t     *testing.T
}

func (c *chaosProc) Receive(ctx *Context, m any) error {
	if msg, ok := m.(chaosMsg); ok {
		if msg.to != ctx.Self() {
			c.t.Errorf("message for %v delivered to %v", msg.to, ctx.Self())
		}
		if msg.hops <= 0 {
			return nil
		}
		known := *c.known
		pick := func() PID { return known[c.rng.below(len(known))] }
		switch c.rng.below(14) {
		case 0, 9, 10:
			if len(known) < 300 {
				child, err := ctx.Spawn("", &chaosProc{rng: c.rng, known: c.known, t: c.t}, SpawnOptions{Link: c.rng.below(2) == 0, TrapExit: c.rng.below(3) == 0})
				if err == nil {
					*c.known = append(*c.known, child)
					_ = ctx.Send(child, chaosMsg{to: child, hops: msg.hops - 1})
				}
			}
		case 1:
			ctx.Link(pick())
		case 2:
			ctx.Unlink(pick())
		case 3:
			ctx.Monitor(pick())
		case 4:
			if c.rng.below(4) == 0 {
				ctx.Kill(pick(), nil)
			}
		case 5:
			ctx.Exit(pick(), ErrShutdown)
		case 6:
			if c.rng.below(10) == 0 {
				return fmt.Errorf("chaos failure")
			}
		case 7:
			if c.rng.below(10) == 0 {
				ctx.Stop()
			}
		case 8:
			ctx.TrapExit(c.rng.below(2) == 0)
		default:
			for i := 0; i < 3; i++ {
				to := pick()
				_ = ctx.Send(to, chaosMsg{to: to, hops: msg.hops - 1})
			}
		}
		to := pick()
		_ = ctx.Send(to, chaosMsg{to: to, hops: msg.hops - 1})
	}
	return nil
}

// checkBookkeeping asserts the runtime's invariants on an idle shard.
func checkBookkeeping(t *testing.T, seed uint64, rt *Runtime) {
	t.Helper()
	s := rt.shards[0]
	if s.ready.count != 0 {
		t.Fatalf("seed %d: %d entries in the ready ring at idle", seed, s.ready.count)
	}
	live, want := 0, int64(0)
	freeSet := map[uint32]bool{}
	for _, f := range s.freeSlots {
		if freeSet[f] {
			t.Fatalf("seed %d: slot %d free twice", seed, f)
		}
		freeSet[f] = true
	}
	for local := uint32(0); local < s.slots; local++ {
		p := s.slot(local)
		pid := PID{Index: s.global(local), Generation: p.generation}
		if p.flags&flagAlive == 0 {
			if !freeSet[local] {
				t.Fatalf("seed %d: dead slot %d not on the free list", seed, local)
			}
			if p.behaviour != nil || p.tail != nil || p.extra != nil {
				t.Fatalf("seed %d: dead slot %d holds memory", seed, local)
			}
			continue
		}
		live++
		if freeSet[local] {
			t.Fatalf("seed %d: live slot %d on the free list", seed, local)
		}
		if p.tail != nil || p.mailboxLen != 0 || p.flags&(flagQueued|flagRunning|flagBlocked) != 0 {
			t.Fatalf("seed %d: idle process %v has mailbox %d, flags %b", seed, pid, p.mailboxLen, p.flags)
		}
		want += processBytes
		if p.name != "" {
			want += int64(len(p.name)) + nameEntryBytes
			if got, _ := rt.Lookup(p.name); got != pid {
				t.Fatalf("seed %d: name %q -> %v, want %v", seed, p.name, got, pid)
			}
		}
		if p.extra != nil {
			for _, l := range p.extra.links {
				other := s.lookup(l)
				if other == nil {
					t.Fatalf("seed %d: %v keeps a link to dead %v at idle", seed, pid, l)
				}
				back := false
				for _, b := range other.extra.links {
					back = back || b == pid
				}
				if !back {
					t.Fatalf("seed %d: link %v -> %v is not symmetric", seed, pid, l)
				}
			}
		}
	}
	if live != s.live || int64(live) != rt.live.Load() {
		t.Fatalf("seed %d: %d live slots, shard says %d, runtime %d", seed, live, s.live, rt.live.Load())
	}
	if s.usedBytes != want {
		t.Fatalf("seed %d: usedBytes %d, want %d", seed, s.usedBytes, want)
	}
	if len(rt.names) > live {
		t.Fatalf("seed %d: %d names for %d live processes", seed, len(rt.names), live)
	}
}

// TestChaosBookkeeping runs random programs of spawns, sends to live and
// stale PIDs, links, monitors, kills, exits and failures over many seeds,
// and checks the runtime's bookkeeping when each goes idle.
func TestChaosBookkeeping(t *testing.T) {
	var turns uint64
	spawned := 0
	for seed := uint64(1); seed <= 150; seed++ {
		rt := mustNew(t, Options{Deterministic: true, Seed: seed, MaxTurns: 200_000})
		rng := &splitmix64{state: seed * 7919}
		var known []PID
		for i := 0; i < 20; i++ {
			name := ""
			if i%2 == 0 {
				name = fmt.Sprintf("root%d", i)
			}
			pid := mustSpawn(t, rt, name, &chaosProc{rng: rng, known: &known, t: t}, SpawnOptions{TrapExit: i == 0})
			known = append(known, pid)
		}
		for _, pid := range known {
			_ = rt.Send(pid, chaosMsg{to: pid, hops: 40})
		}
		if err := rt.RunUntilIdle(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkBookkeeping(t, seed, rt)
		st := rt.Stats()
		turns += st.Turns
		spawned += len(known)
	}
	if turns < 100_000 || spawned < 10_000 {
		t.Fatalf("the programs were too small to test anything: %d turns, %d processes", turns, spawned)
	}
}
