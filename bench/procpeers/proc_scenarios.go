package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sushka-io/sushka/proc"
)

// The proc side of every scenario. Each function does the scenario's work
// once and returns the measured quantity: elapsed time of the measured part,
// or live bytes.

// procState is the per-process state of the idle and worked scenarios: a
// counter, as the Erlang processes keep one in their loop.
type procState struct{ count int }

func (s *procState) Receive(ctx *proc.Context, m any) error {
	s.count++
	return nil
}

func newProc(opts proc.Options) *proc.Runtime {
	rt, err := proc.New(opts)
	if err != nil {
		panic(err)
	}
	return rt
}

// timedRun runs rt until idle and returns how long that took.
func timedRun(rt *proc.Runtime) time.Duration {
	start := time.Now()
	mustRun(rt)
	elapsed := time.Since(start)
	keep(rt)
	return elapsed
}

func mustRun(rt *proc.Runtime) {
	if err := rt.RunUntilIdle(); err != nil {
		panic(err)
	}
}

// procIdle: live bytes per idle process (anonymous, or named "p<i>").
func procIdle(n int, named bool) (bytesPerProcess float64) {
	before := liveHeapBytes()
	rt := newProc(proc.Options{})
	for i := 0; i < n; i++ {
		name := ""
		if named {
			name = "p" + strconv.Itoa(i)
		}
		if _, err := rt.Spawn(name, &procState{}, proc.SpawnOptions{}); err != nil {
			panic(err)
		}
	}
	after := liveHeapBytes()
	keep(rt)
	return float64(after-before) / float64(n)
}

// procWorked: live bytes per process after every process handled one
// message (all sent first, as the Erlang scenario does).
func procWorked(n int) float64 {
	before := liveHeapBytes()
	rt := newProc(proc.Options{})
	pids := make([]proc.PID, n)
	for i := range pids {
		pids[i], _ = rt.Spawn("", &procState{}, proc.SpawnOptions{})
	}
	for _, pid := range pids {
		_ = rt.Send(pid, work)
	}
	mustRun(rt)
	pids = nil
	after := liveHeapBytes()
	keep(rt)
	return float64(after-before) / float64(n)
}

var work = &struct{ x int }{1}

// procSpawn: time for one process, already running, to spawn n processes.
func procSpawn(n int) time.Duration {
	rt := newProc(proc.Options{})
	var elapsed time.Duration
	spawner, _ := rt.Spawn("", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		start := time.Now()
		for i := 0; i < n; i++ {
			if _, err := ctx.Spawn("", &procState{}, proc.SpawnOptions{}); err != nil {
				return err
			}
		}
		elapsed = time.Since(start)
		return nil
	}), proc.SpawnOptions{})
	_ = rt.Send(spawner, "go")
	mustRun(rt)
	keep(rt)
	return elapsed
}

type procBall struct{ hits, limit int }

type procPlayer struct{ peer proc.PID }

func (p *procPlayer) Receive(ctx *proc.Context, m any) error {
	b := m.(*procBall)
	b.hits++
	if b.hits >= b.limit {
		return nil
	}
	return ctx.Send(p.peer, b)
}

// procPingPong: deliveries between two processes spawned after alive idle
// processes, on one scheduler thread (deterministic: seeded choice).
func procPingPong(alive, deliveries int, deterministic bool) time.Duration {
	rt := newProc(proc.Options{Deterministic: deterministic, Seed: 1})
	for i := 0; i < alive; i++ {
		_, _ = rt.Spawn("", &procState{}, proc.SpawnOptions{})
	}
	a, b := &procPlayer{}, &procPlayer{}
	pa, _ := rt.Spawn("ping", a, proc.SpawnOptions{})
	pb, _ := rt.Spawn("pong", b, proc.SpawnOptions{})
	a.peer, b.peer = pb, pa
	_ = rt.Send(pa, &procBall{limit: deliveries})
	return timedRun(rt)
}

type procSelfSender struct{ left int }

func (s *procSelfSender) Receive(ctx *proc.Context, m any) error {
	s.left--
	if s.left > 0 {
		return ctx.Send(ctx.Self(), m)
	}
	return nil
}

// procReady: ready processes each resending to itself perProcess times,
// one message per turn, so every delivery is a switch with ready
// processes in the queue.
func procReady(ready, perProcess int, deterministic bool) time.Duration {
	rt := newProc(proc.Options{Deterministic: deterministic, Seed: 1, MessagesPerTurn: 1})
	for i := 0; i < ready; i++ {
		pid, _ := rt.Spawn("", &procSelfSender{left: perProcess}, proc.SpawnOptions{})
		_ = rt.Send(pid, work)
	}
	return timedRun(rt)
}

type procCrasher struct{}

func (procCrasher) Init(ctx *proc.Context) error { return ctx.SendName("driver", "started") }
func (procCrasher) Receive(*proc.Context, any) error {
	return errCrash
}

var errCrash = fmt.Errorf("crash")

// procRestart: restarts of a crashing child by a one_for_one supervisor;
// the child announces each start to a driver, which makes it crash again.
func procRestart(restarts int) time.Duration {
	rt := newProc(proc.Options{})
	count := 0
	_, _ = rt.Spawn("driver", proc.BehaviourFunc(func(ctx *proc.Context, m any) error {
		count++
		if count <= restarts {
			return ctx.Reply("crash")
		}
		return nil
	}), proc.SpawnOptions{})
	start := time.Now()
	_, err := rt.Spawn("sup", proc.NewSupervisor(proc.SupervisorSpec{
		Strategy: proc.OneForOne, Intensity: 1 << 30, Period: time.Hour,
		Children: []proc.ChildSpec{{ID: "w", Restart: proc.Permanent, Start: func(any) proc.Behaviour { return procCrasher{} }}},
	}), proc.SpawnOptions{})
	if err != nil {
		panic(err)
	}
	mustRun(rt)
	elapsed := time.Since(start)
	if count != restarts+1 {
		panic(fmt.Sprintf("restart: %d starts, want %d", count, restarts+1))
	}
	return elapsed
}

// heavyWork is a handler heavy enough to pay for a second thread.
func heavyWork(iterations int) uint64 {
	x := uint64(88172645463325252)
	for i := 0; i < iterations; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

type procHeavy struct {
	left, iterations int
	sink             uint64
}

func (h *procHeavy) Receive(ctx *proc.Context, m any) error {
	h.sink += heavyWork(h.iterations)
	h.left--
	if h.left > 0 {
		return ctx.Send(ctx.Self(), m)
	}
	return nil
}

// procMultiCore: processes with heavy handlers on the given number of
// scheduler threads.
func procMultiCore(schedulers, processes, messages, iterations int) time.Duration {
	rt := newProc(proc.Options{Schedulers: schedulers})
	for i := 0; i < processes; i++ {
		pid, _ := rt.Spawn("", &procHeavy{left: messages, iterations: iterations}, proc.SpawnOptions{})
		_ = rt.Send(pid, work)
	}
	return timedRun(rt)
}

var kept []any

// keep holds x until the measurement is read, so the collector cannot free
// what is being measured.
func keep(x any) { kept = append(kept[:0], x) }
