package main

import (
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The Proto.Actor Go side of the scenarios, written as its documentation
// shows (PropsFromProducer, RootContext.Spawn, Context.Send), with its
// logger silenced so that logging does not count against it.

func newSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

type paState struct {
	count   int
	started *sync.WaitGroup
}

func (s *paState) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		if s.started != nil {
			s.started.Done()
		}
	default:
		s.count++
		if s.started != nil {
			s.started.Done()
		}
	}
}

// paIdle: live bytes per idle actor, once every actor has started.
func paIdle(n int) float64 {
	before := liveHeapBytes()
	system := newSystem()
	var wg sync.WaitGroup
	wg.Add(n)
	props := actor.PropsFromProducer(func() actor.Actor { return &paState{started: &wg} })
	pids := make([]*actor.PID, n)
	for i := range pids {
		pids[i] = system.Root.Spawn(props)
	}
	wg.Wait()
	after := liveHeapBytes()
	keep([]any{system, pids})
	return float64(after-before) / float64(n)
}

// paWorked: live bytes per actor after each handled one message.
func paWorked(n int) float64 {
	before := liveHeapBytes()
	system := newSystem()
	var wg sync.WaitGroup
	wg.Add(2 * n)
	props := actor.PropsFromProducer(func() actor.Actor { return &paState{started: &wg} })
	pids := make([]*actor.PID, n)
	for i := range pids {
		pids[i] = system.Root.Spawn(props)
	}
	for _, pid := range pids {
		system.Root.Send(pid, work)
	}
	wg.Wait()
	after := liveHeapBytes()
	keep([]any{system, pids})
	return float64(after-before) / float64(n)
}

// paSpawn: time to spawn n actors from the root context until all have
// started.
func paSpawn(n int) time.Duration {
	system := newSystem()
	var wg sync.WaitGroup
	wg.Add(n)
	props := actor.PropsFromProducer(func() actor.Actor { return &paState{started: &wg} })
	start := time.Now()
	for i := 0; i < n; i++ {
		system.Root.Spawn(props)
	}
	wg.Wait()
	elapsed := time.Since(start)
	keep(system)
	return elapsed
}

type paBall struct{ hits, limit int }

type paPlayer struct {
	peer *actor.PID
	done chan struct{}
}

func (p *paPlayer) Receive(ctx actor.Context) {
	b, ok := ctx.Message().(*paBall)
	if !ok {
		return
	}
	b.hits++
	if b.hits >= b.limit {
		close(p.done)
		return
	}
	ctx.Send(p.peer, b)
}

// paPingPong: deliveries between two actors spawned after alive idle ones.
func paPingPong(alive, deliveries int) time.Duration {
	system := newSystem()
	idle := actor.PropsFromProducer(func() actor.Actor { return &paState{} })
	for i := 0; i < alive; i++ {
		system.Root.Spawn(idle)
	}
	done := make(chan struct{})
	a, b := &paPlayer{done: done}, &paPlayer{done: done}
	pa := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
	pb := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return b }))
	a.peer, b.peer = pb, pa
	time.Sleep(10 * time.Millisecond) // let Started be handled before the peers are read
	start := time.Now()
	system.Root.Send(pa, &paBall{limit: deliveries})
	<-done
	elapsed := time.Since(start)
	keep(system)
	return elapsed
}

type paSelfSender struct {
	left int
	done *sync.WaitGroup
}

func (s *paSelfSender) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		return
	}
	s.left--
	if s.left > 0 {
		ctx.Send(ctx.Self(), work)
		return
	}
	s.done.Done()
}

// paReady: actors each resending to themselves perProcess times.
func paReady(ready, perProcess int) time.Duration {
	system := newSystem()
	var wg sync.WaitGroup
	wg.Add(ready)
	pids := make([]*actor.PID, ready)
	for i := range pids {
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &paSelfSender{left: perProcess, done: &wg} }))
	}
	return timedKick(system, pids, &wg)
}

type paCrasher struct{}

func (paCrasher) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		ctx.Send(ctx.Parent(), "started")
	case string:
		panic("crash")
	}
}

type paDriver struct {
	restarts, count int
	child           *actor.PID
	done            chan struct{}
}

func (d *paDriver) Receive(ctx actor.Context) {
	switch ctx.Message() {
	case "go":
		d.child = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return paCrasher{} }))
	case "started":
		d.count++
		if d.count <= d.restarts {
			ctx.Send(d.child, "crash")
		} else {
			close(d.done)
		}
	}
}

// paRestart: restarts of a panicking child under a one-for-one strategy.
func paRestart(restarts int) time.Duration {
	system := newSystem()
	d := &paDriver{restarts: restarts, done: make(chan struct{})}
	strategy := actor.NewOneForOneStrategy(1<<30, time.Hour, actor.DefaultDecider)
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return d }, actor.WithSupervisor(strategy)))
	start := time.Now()
	system.Root.Send(pid, "go")
	<-d.done
	return time.Since(start)
}

type paHeavy struct {
	left, iterations int
	sink             uint64
	done             *sync.WaitGroup
}

func (h *paHeavy) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		return
	}
	h.sink += heavyWork(h.iterations)
	h.left--
	if h.left > 0 {
		ctx.Send(ctx.Self(), work)
		return
	}
	h.done.Done()
}

// paMultiCore: actors with heavy handlers; the thread count is GOMAXPROCS,
// set by the driver.
func paMultiCore(processes, messages, iterations int) time.Duration {
	system := newSystem()
	var wg sync.WaitGroup
	wg.Add(processes)
	pids := make([]*actor.PID, processes)
	for i := range pids {
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &paHeavy{left: messages, iterations: iterations, done: &wg}
		}))
	}
	return timedKick(system, pids, &wg)
}

// timedKick sends one message to every pid and returns how long it took
// until wg is done.
func timedKick(system *actor.ActorSystem, pids []*actor.PID, wg *sync.WaitGroup) time.Duration {
	start := time.Now()
	for _, pid := range pids {
		system.Root.Send(pid, work)
	}
	wg.Wait()
	elapsed := time.Since(start)
	keep(system)
	return elapsed
}
