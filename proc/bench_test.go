package proc

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// Benchmarks of the scenarios. They run only with -bench; the
// recorded figures (slope method, interleaved with Erlang and Proto.Actor)
// come from bench/procpeers, which uses the same scenario functions through
// the public API.

// BenchmarkPingPong: one delivery per op between two processes on one
// scheduler thread.
func BenchmarkPingPong(b *testing.B) { benchPingPong(b, 0) }

// BenchmarkPingPongAmongIdle: the pair is spawned last, after n idle
// processes; delivery cost must not depend on n.
func BenchmarkPingPongAmongIdle(b *testing.B) {
	for _, n := range []int{2, 1000, 100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchPingPong(b, n) })
	}
}

func benchPingPong(b *testing.B, idleProcesses int) {
	rt := mustNew(b, Options{})
	idle := BehaviourFunc(func(*Context, any) error { return nil })
	for i := 0; i < idleProcesses; i++ {
		mustSpawn(b, rt, "idle-"+strconv.Itoa(i), idle, SpawnOptions{})
	}
	pl := &player{limit: b.N}
	ping := mustSpawn(b, rt, "ping", pl, SpawnOptions{})
	pong := mustSpawn(b, rt, "pong", pl, SpawnOptions{})
	_ = rt.shards[0].deliver(ping, pong, kindMessage, &ball{}, 0)
	b.ReportAllocs()
	b.ResetTimer()
	if err := rt.RunUntilIdle(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSpawn: anonymous spawns from outside, one per op.
func BenchmarkSpawn(b *testing.B) {
	rt := mustNew(b, Options{})
	idle := BehaviourFunc(func(*Context, any) error { return nil })
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := rt.Spawn("", idle, SpawnOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// selfSender resends its message to itself until left runs out: always
// ready.
type selfSender struct{ left int }

func (s *selfSender) Receive(ctx *Context, m any) error {
	s.left--
	if s.left > 0 {
		return ctx.Send(ctx.Self(), m)
	}
	return nil
}

// BenchmarkSwitchReady: one op is one switch (one message per turn) with n
// processes ready all the time; the cost must not grow with n (the seed's
// sorted ready array cost 0.17 ns per ready process per switch).
func BenchmarkSwitchReady(b *testing.B) {
	for _, n := range []int{2, 1000, 100_000, 1_000_000} {
		for _, det := range []bool{false, true} {
			name := strconv.Itoa(n)
			if det {
				name += "/deterministic"
			}
			b.Run(name, func(b *testing.B) {
				rt := mustNew(b, Options{MessagesPerTurn: 1, Deterministic: det, Seed: 1})
				perProcess := b.N/n + 1
				msg := &ball{}
				for i := 0; i < n; i++ {
					pid := mustSpawn(b, rt, "", &selfSender{left: perProcess}, SpawnOptions{})
					_ = rt.Send(pid, msg)
				}
				b.ReportAllocs()
				b.ResetTimer()
				s := rt.shards[0]
				for i := 0; i < b.N; i++ {
					s.runTurn()
				}
			})
		}
	}
}

// crashOnStart announces itself to the driver, which makes it crash.
type crashOnStart struct{}

func (crashOnStart) Init(ctx *Context) error { return ctx.SendName("driver", "started") }
func (crashOnStart) Receive(*Context, any) error {
	return errBenchCrash
}

var errBenchCrash = errors.New("crash")

// BenchmarkSupervisedRestart: one op is one crash and restart of a child
// under a one_for_one supervisor.
func BenchmarkSupervisedRestart(b *testing.B) {
	rt := mustNew(b, Options{})
	count := 0
	mustSpawn(b, rt, "driver", BehaviourFunc(func(ctx *Context, m any) error {
		count++
		if count <= b.N {
			return ctx.Reply("crash")
		}
		return nil
	}), SpawnOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	mustSpawn(b, rt, "sup", NewSupervisor(SupervisorSpec{Strategy: OneForOne, Intensity: 1 << 30, Period: time.Hour,
		Children: []ChildSpec{{ID: "w", Restart: Permanent, Start: func(any) Behaviour { return crashOnStart{} }}}}), SpawnOptions{})
	if err := rt.RunUntilIdle(); err != nil {
		b.Fatal(err)
	}
	if count != b.N+1 {
		b.Fatalf("%d starts, want %d", count, b.N+1)
	}
}
