package proc

import (
	"strconv"
	"testing"
)

// Benchmarks of the scenarios. They run only with -bench; the
// recorded figures (slope method, interleaved with Erlang and Proto.Actor)
// come from bench/procpeers, which uses the same scenario functions through
// the public API.

// BenchmarkPingPong: one delivery per op between two processes on one
// scheduler thread.
func BenchmarkPingPong(b *testing.B) {
	rt := mustNew(b, Options{})
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

// BenchmarkPingPongAmongIdle: the pair is spawned last, after n idle
// processes; delivery cost must not depend on n.
func BenchmarkPingPongAmongIdle(b *testing.B) {
	for _, n := range []int{2, 1000, 100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rt := mustNew(b, Options{})
			idle := BehaviourFunc(func(*Context, any) error { return nil })
			for i := 0; i < n; i++ {
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
		})
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
