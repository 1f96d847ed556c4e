package controller

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The measurements of docs/benchmarks.md ("The metadata quorum"), behind a
// flag: go test -run TestMeasure -controller.measure -v ./internal/controller.
// Same-process probes: three nodes on MemStorage (no fsync) and the clients
// share the CPU.
var measure = flag.Bool("controller.measure", false, "run the controller measurements (docs/benchmarks.md)")

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// createLoad creates topics (1 partition, rf 3) from workers closed-loop
// clients for dur, and returns creations per second and their latencies.
func createLoad(t *testing.T, c *testCluster, prefix string, workers int, dur time.Duration) (float64, []time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < dur; i++ {
				a := c.active()
				if a == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				began := time.Now()
				_, _, err := a.ctl().CreateTopic(context.Background(), fmt.Sprintf("%s-%d-%d", prefix, w, i), 1, 3, nil)
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				took := time.Since(began)
				n.Add(1)
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), lat
}

func TestMeasure(t *testing.T) {
	if !*measure {
		t.Skip("-controller.measure")
	}
	c := newRegisteredCluster(t, 3, 3)
	stop := c.tickingEvery(100 * time.Millisecond)
	defer stop()
	createLoad(t, c, "warm", 8, time.Second) // warm-up, discarded
	type result struct {
		rate     []float64
		p50, p99 []time.Duration
	}
	results := map[int]*result{1: {}, 32: {}}
	for round := range 3 {
		for _, workers := range []int{1, 32} {
			cpu0, wall0 := cpuSeconds(), time.Now()
			rate, lat := createLoad(t, c, fmt.Sprintf("r%d-w%d", round, workers), workers, 3*time.Second)
			cpu, wall := cpuSeconds()-cpu0, time.Since(wall0).Seconds()
			r := results[workers]
			r.rate = append(r.rate, rate)
			r.p50 = append(r.p50, percentile(lat, 0.50))
			r.p99 = append(r.p99, percentile(lat, 0.99))
			t.Logf("round %d, %2d clients: %6.0f creations/s (%6.0f records/s), latency p50 %v p99 %v (%d creations); process %.2f cores, %.0f µs CPU a creation",
				round, workers, rate, 2*rate, percentile(lat, 0.5), percentile(lat, 0.99), len(lat), cpu/wall, cpu/float64(len(lat))*1e6)
		}
	}
	for _, workers := range []int{1, 32} {
		r := results[workers]
		slices.Sort(r.rate)
		slices.Sort(r.p50)
		slices.Sort(r.p99)
		t.Logf("%2d clients: creations/s best %.0f median %.0f worst %.0f; p50 best %v median %v worst %v; p99 best %v median %v worst %v",
			workers, r.rate[2], r.rate[1], r.rate[0], r.p50[0], r.p50[1], r.p50[2], r.p99[0], r.p99[1], r.p99[2])
	}
}

// TestMeasureFailover: the controller's node stops; ticks (100 ms apart,
// raft's default tick) until another node is the active controller.
func TestMeasureFailover(t *testing.T) {
	if !*measure {
		t.Skip("-controller.measure")
	}
	var ticks []int
	var waits []time.Duration
	for round := range 5 {
		c := newRegisteredCluster(t, 3, 3)
		old := c.active()
		for range 15 { // quiet ticks: the group quiesces, as an idle cluster's does
			c.tick()
			time.Sleep(100 * time.Millisecond)
		}
		stopped := time.Now()
		c.stop(old)
		n := 0
		for c.active() == nil {
			c.tick()
			n++
			if n > 100 {
				t.Fatal("no new controller after 100 ticks")
			}
			for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline) && c.active() == nil; {
				time.Sleep(time.Millisecond)
			}
		}
		ticks = append(ticks, n)
		waits = append(waits, time.Since(stopped))
		t.Logf("round %d: node %d stopped, node %d active after %d ticks, %v", round, old.id, c.active().id, n, time.Since(stopped))
		for _, nd := range c.live() {
			c.stop(nd)
		}
	}
	slices.Sort(ticks)
	slices.Sort(waits)
	t.Logf("failover: ticks best %d median %d worst %d; time best %v median %v worst %v",
		ticks[0], ticks[2], ticks[4], waits[0], waits[2], waits[4])
}
