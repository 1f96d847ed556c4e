package proc

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestDeliveryAllocatesNothing is the allocation floor of the hot path: a
// preallocated message (a pointer) goes from one process to another, is
// queued, scheduled and handed to Receive with 0 allocations, once the node
// free list and the ready ring have warmed up.
func TestDeliveryAllocatesNothing(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"fifo", Options{}}, {"deterministic", Options{Deterministic: true, Seed: 7}}} {
		t.Run(mode.name, func(t *testing.T) {
			rt := mustNew(t, mode.opts)
			pl := &player{limit: 1 << 62}
			ping := mustSpawn(t, rt, "ping", pl, SpawnOptions{})
			pong := mustSpawn(t, rt, "pong", pl, SpawnOptions{})
			s := rt.shards[0]
			b := &ball{}
			if err := s.deliver(ping, pong, kindMessage, b, 0); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 1000; i++ { // warm up
				s.runTurn()
			}
			const deliveries = 1000
			allocs := testing.AllocsPerRun(10, func() {
				for i := 0; i < deliveries; i++ {
					s.runTurn()
				}
			})
			if perDelivery := allocs / deliveries; perDelivery > 0 {
				t.Fatalf("%.4f allocations per delivery, floor is 0", perDelivery)
			}
		})
	}
}

// TestSendFromOutsideWhileRunning: Runtime methods from other goroutines are
// handed to the scheduler thread while it runs.
func TestSendFromOutsideWhileRunning(t *testing.T) {
	rt := mustNew(t, Options{})
	got := make(chan int, 100)
	pid := mustSpawn(t, rt, "sink", BehaviourFunc(func(ctx *Context, m any) error {
		got <- m.(int)
		return nil
	}), SpawnOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = rt.Run(ctx) }()
	for i := 0; i < 50; i++ {
		if err := rt.Send(pid, i); err != nil {
			t.Fatal(err)
		}
	}
	spawned, err := rt.Spawn("late", BehaviourFunc(func(ctx *Context, m any) error { got <- 1000; return nil }), SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.SendName("late", "x"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	seen := map[int]bool{}
	for len(seen) < 51 {
		select {
		case v := <-got:
			seen[v] = true
		case <-deadline:
			t.Fatalf("only %d of 51 messages arrived", len(seen))
		}
	}
	cancel()
	wg.Wait()
	if !rt.Alive(spawned) {
		t.Fatal("process spawned while running is not alive")
	}
}
