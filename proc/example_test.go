package proc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sushka-io/sushka/proc"
)

// A counter is a process whose state is its behaviour's fields.
type counter struct{ n int }

func (c *counter) Receive(ctx *proc.Context, m any) error {
	switch m {
	case "inc":
		c.n++
	case "get":
		return ctx.Reply(c.n)
	}
	return nil
}

// Spawn processes, send by PID and by name, and reply to the sender.
func Example() {
	rt, _ := proc.New(proc.Options{})
	c := &counter{}
	pid, _ := rt.Spawn("counter", c, proc.SpawnOptions{})
	_ = rt.Send(pid, "inc")
	_ = rt.SendName("counter", "inc")
	// A client asks from inside the runtime, so the answer has a sender to
	// go to.
	client, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		if m == "ask" {
			return ctx.SendName("counter", "get")
		}
		fmt.Println("counter says", m)
		return nil
	}), proc.SpawnOptions{})
	_ = rt.Send(client, "ask")
	_ = rt.RunUntilIdle()
	// Output: counter says 2
}

// A stale PID is refused, even after its slot is reused.
func ExamplePID() {
	rt, _ := proc.New(proc.Options{})
	old, _ := rt.Spawn("", &counter{}, proc.SpawnOptions{})
	rt.Kill(old, nil)
	reused, _ := rt.Spawn("", &counter{}, proc.SpawnOptions{})
	fmt.Println(old, reused, errors.Is(rt.Send(old, "inc"), proc.ErrNoProcess))
	// Output: <0.1> <0.2> true
}

// Timers: SendAfter and a receive timeout, here on virtual time.
func ExampleContext_SendAfter() {
	rt, _ := proc.New(proc.Options{Deterministic: true})
	start := rt.Now()
	pid, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		fmt.Println(ctx.Now().Sub(start), m)
		switch m.(type) {
		case string:
			if m == "start" {
				ctx.SendAfter(ctx.Self(), "reminder", time.Minute)
				ctx.SetReceiveTimeout(time.Hour)
			}
		case proc.Timeout:
			ctx.Stop()
		}
		return nil
	}), proc.SpawnOptions{})
	_ = rt.Send(pid, "start")
	_ = rt.RunUntilIdle()
	// Output:
	// 0s start
	// 1m0s reminder
	// 1h1m0s Timeout{}
}

// Deterministic mode: the seed alone decides the schedule, and the journal
// shows it; the same seed gives the same bytes.
func ExampleOptions_deterministic() {
	run := func(seed uint64) string {
		var journal bytes.Buffer
		rt, _ := proc.New(proc.Options{Deterministic: true, Seed: seed, Journal: &journal, JournalDeliveries: true})
		var order []string
		for _, name := range []string{"a", "b", "c"} {
			pid, _ := rt.Spawn(name, proc.BehaviourFunc(func(*proc.Context, any) error {
				order = append(order, name)
				return nil
			}), proc.SpawnOptions{})
			_ = rt.Send(pid, "hi")
		}
		_ = rt.RunUntilIdle()
		return strings.Join(order, "") + " " + fmt.Sprint(journal.Len())
	}
	//lint:ignore SA4000 each call runs the seed anew: equal runs are what is shown
	fmt.Println(run(1) == run(1), run(2) == run(2))
	// Output: true true
}

// A supervisor restarts a failing child; the journal records the failure
// and the decision.
func ExampleNewSupervisor() {
	var journal bytes.Buffer
	rt, _ := proc.New(proc.Options{Deterministic: true, Journal: &journal})
	_, _ = rt.Spawn("sup", proc.NewSupervisor(proc.SupervisorSpec{
		Strategy:  proc.OneForOne,
		Intensity: 3,
		Period:    time.Minute,
		Children: []proc.ChildSpec{{
			ID: "worker", Name: "worker", Restart: proc.Permanent,
			Start: func(any) proc.Behaviour {
				return proc.BehaviourFunc(func(ctx *proc.Context, m any) error { return errors.New("bad input") })
			},
		}},
	}), proc.SpawnOptions{})
	first, _ := rt.Lookup("worker")
	_ = rt.SendName("worker", "x")
	_ = rt.RunUntilIdle()
	second, _ := rt.Lookup("worker")
	fmt.Println(first != second)
	for _, line := range strings.Split(journal.String(), "\n") {
		if strings.Contains(line, "exited") || strings.Contains(line, "decision") {
			fmt.Println(line)
		}
	}
	// Output:
	// true
	// 0 sup <0.1> child=worker <1.1> exited reason=bad input
	// 0 sup <0.1> decision=restart child=worker
}

// Links: a process trapping exits learns that a linked process failed.
func ExampleContext_Link() {
	rt, _ := proc.New(proc.Options{})
	failing, _ := rt.Spawn("", proc.BehaviourFunc(func(*proc.Context, any) error { return errors.New("disk full") }), proc.SpawnOptions{})
	watcher, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		switch m := m.(type) {
		case string:
			ctx.Link(failing)
			return ctx.Send(failing, "work")
		case proc.Exit:
			fmt.Println("linked process exited:", m.Reason)
		}
		return nil
	}), proc.SpawnOptions{TrapExit: true})
	_ = rt.Send(watcher, "start")
	_ = rt.RunUntilIdle()
	// Output: linked process exited: disk full
}

// Limits answer with named errors.
func ExampleOptions_limits() {
	rt, _ := proc.New(proc.Options{MaxProcesses: 1})
	idle := proc.BehaviourFunc(func(*proc.Context, any) error { return nil })
	_, _ = rt.Spawn("", idle, proc.SpawnOptions{})
	_, err := rt.Spawn("", idle, proc.SpawnOptions{})
	fmt.Println(err)
	bounded, _ := proc.New(proc.Options{})
	pid, _ := bounded.Spawn("", idle, proc.SpawnOptions{MailboxLimit: 1, MailboxFull: proc.MailboxError})
	_ = bounded.Send(pid, 1)
	fmt.Println(bounded.Send(pid, 2))
	// Output:
	// proc: process limit reached (Options.MaxProcesses); spawn refused
	// proc: mailbox full (SpawnOptions.MailboxLimit)
}

// Multi-core mode: several scheduler threads; Run serves until cancelled.
func ExampleOptions_multiCore() {
	rt, _ := proc.New(proc.Options{Schedulers: 2})
	results := make(chan int, 4)
	for i := 0; i < 4; i++ {
		pid, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
			results <- m.(int) * m.(int)
			return nil
		}), proc.SpawnOptions{})
		_ = rt.Send(pid, i+1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = rt.Run(ctx) }()
	sum := 0
	for i := 0; i < 4; i++ {
		sum += <-results
	}
	cancel()
	fmt.Println(sum)
	// Output: 30
}

// Monitors: a watcher learns that a process it monitors exited, without
// being linked to it.
func ExampleContext_Monitor() {
	rt, _ := proc.New(proc.Options{})
	worker, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		ctx.Stop()
		return nil
	}), proc.SpawnOptions{})
	watcher, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		switch m := m.(type) {
		case string:
			ctx.Monitor(worker)
			return ctx.Send(worker, "finish")
		case proc.Down:
			fmt.Println("worker down, reason:", m.Reason)
		}
		return nil
	}), proc.SpawnOptions{})
	_ = rt.Send(watcher, "watch")
	_ = rt.RunUntilIdle()
	// Output: worker down, reason: <nil>
}

// Bounded mailboxes with MailboxBlock: a producer that fills its
// consumer's mailbox gets no turn until there is room again.
func ExampleMailboxBlock() {
	rt, _ := proc.New(proc.Options{})
	received := 0
	consumer, _ := rt.Spawn("", proc.BehaviourFunc(func(*proc.Context, any) error {
		received++
		return nil
	}), proc.SpawnOptions{MailboxLimit: 8, MailboxFull: proc.MailboxBlock})
	producer, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		for i := 0; i < 100; i++ { // more than the mailbox holds: kept, and the producer waits
			if err := ctx.Send(consumer, i); err != nil {
				return err
			}
		}
		return nil
	}), proc.SpawnOptions{})
	_ = rt.Send(producer, "go")
	_ = rt.RunUntilIdle()
	fmt.Println(received, rt.Stats().SenderWaits)
	// Output: 100 1
}

// visits is a per-key entity: it counts the messages of its key.
type visits struct{ n int }

func (v *visits) Receive(*proc.Context, any) error { v.n++; return nil }
func (v *visits) State() any                       { return v.n }

// Per-key entities: one process per key, spawned on the key's first
// message with its last handed-over state, passivated when idle.
func ExampleNewEntities() {
	rt, _ := proc.New(proc.Options{Deterministic: true})
	router, _ := rt.Spawn("", proc.NewEntities(proc.EntityOptions{
		IdleTimeout: time.Minute,
		New: func(key string, state any) proc.Entity {
			n, _ := state.(int)
			return &visits{n: n}
		},
	}), proc.SpawnOptions{})
	for _, page := range []string{"home", "cart", "home"} {
		_ = rt.Send(router, proc.Routed{Key: page, Message: "visit"})
	}
	_ = rt.RunUntilIdle() // a virtual minute later both entities have passivated
	_ = rt.Send(router, proc.Routed{Key: "home", Message: "visit"})
	_ = rt.Send(router, proc.PassivateAll{Done: func(states map[string]any) { fmt.Println(states) }})
	_ = rt.RunUntilIdle()
	// Output: map[cart:1 home:3]
}
