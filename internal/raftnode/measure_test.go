package raftnode

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// The measurements of docs/benchmarks.md ("Raft groups on three in-process
// nodes"), behind a flag: go test -run TestMeasure -raftnode.measure -v
// ./internal/raftnode. Same-process probes: the proposers share the CPU with
// the three nodes; memory storage, no fsync.
var measure = flag.Bool("raftnode.measure", false, "run the raftnode measurements (docs/benchmarks.md)")

// slot is one closed-loop proposer: it proposes its sequence number through
// one node and waits for that node to apply it.
type slot struct {
	node    uint64
	applied chan struct{}
}

type measureRun struct {
	proposals   int
	seconds     float64
	latencies   []time.Duration
	framesSent  uint64 // all nodes
	bytesSent   uint64
	messages    uint64
	cpuSeconds  float64
	groups      int
	coalescing  bool
	tls         bool
	proposers   int
	payloadSize int
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// measureCluster starts 3 nodes × groups with the real 100 ms ticker, spreads
// the leaders, and returns the cluster and the proposers' slots.
func measureCluster(t *testing.T, groups, perGroup int, coalescing, tlsOn bool) (*testCluster, []*slot, map[uint64]uint64) {
	var slots []*slot
	var slotsMu sync.RWMutex
	c := newCluster(t, clusterOptions{nodes: 3, groups: groups, manual: true, tls: tlsOn,
		tweak: func(cfg *Config) {
			if !coalescing {
				cfg.MaxMessagesPerFrame = 1
			}
		},
		apply: func(node, _ uint64, entries []*pb.Entry) {
			slotsMu.RLock()
			defer slotsMu.RUnlock()
			for _, e := range entries {
				if e.GetType() != pb.EntryType_EntryNormal || len(e.Data) < 8 {
					continue
				}
				if s := slots[binary.BigEndian.Uint64(e.Data)]; s.node == node {
					s.applied <- struct{}{}
				}
			}
		}})
	leaders := c.spreadLeaders(200)
	slotsMu.Lock()
	for _, g := range c.groups {
		for range perGroup {
			slots = append(slots, &slot{node: leaders[g], applied: make(chan struct{}, 1)})
		}
	}
	slotsMu.Unlock()
	return c, slots, leaders
}

func (c *testCluster) realTicker(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				for _, n := range c.live() {
					n.Tick()
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func runProposers(t *testing.T, c *testCluster, slots []*slot, leaders map[uint64]uint64, perGroup int, d time.Duration, payload int) measureRun {
	var (
		count atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		wg    sync.WaitGroup
	)
	stats0 := make([]TransportStats, len(c.nodes))
	for i, n := range c.nodes {
		stats0[i] = n.Stats().Transport
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	end := start.Add(d)
	for i, s := range slots {
		g := c.groups[i/perGroup]
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := make([]byte, payload)
			binary.BigEndian.PutUint64(data, uint64(i))
			var mine []time.Duration
			errs := make(chan error, 1)
			for time.Now().Before(end) {
				t0 := time.Now()
				c.node(s.node).Propose(g, slices.Clone(data), func(err error) { errs <- err })
				if err := <-errs; err != nil {
					t.Errorf("group %d: %v", g, err)
					return
				}
				select {
				case <-s.applied:
				case <-time.After(5 * time.Second):
					t.Errorf("group %d: not applied after 5 s", g)
					return
				}
				mine = append(mine, time.Since(t0))
				count.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	r := measureRun{proposals: int(count.Load()), seconds: elapsed.Seconds(), latencies: lat,
		cpuSeconds: cpuSeconds() - cpu0, groups: len(c.groups), proposers: len(slots), payloadSize: payload}
	for i, n := range c.nodes {
		st := n.Stats().Transport
		r.framesSent += st.FramesSent - stats0[i].FramesSent
		r.bytesSent += st.BytesSent - stats0[i].BytesSent
		r.messages += st.MessagesSent - stats0[i].MessagesSent
	}
	return r
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func (r measureRun) String() string {
	slices.Sort(r.latencies)
	pairs := 6.0 // ordered pairs of 3 nodes
	return fmt.Sprintf("groups %5d coalescing %-5v tls %-5v proposers %4d: %8.0f proposals/s  p50 %7s  p99 %7s  per pair %7.0f frames/s %8.0f KiB/s %6.1f msgs/frame  CPU %.2f cores, %5.1f µs a proposal",
		r.groups, r.coalescing, r.tls, r.proposers, float64(r.proposals)/r.seconds,
		percentile(r.latencies, 0.50).Round(10*time.Microsecond), percentile(r.latencies, 0.99).Round(10*time.Microsecond),
		float64(r.framesSent)/r.seconds/pairs, float64(r.bytesSent)/r.seconds/pairs/1024,
		float64(r.messages)/float64(max(r.framesSent, 1)), r.cpuSeconds/r.seconds, 1e6*r.cpuSeconds/float64(max(r.proposals, 1)))
}

func TestMeasure(t *testing.T) {
	if !*measure {
		t.Skip("measurements run with -raftnode.measure")
	}
	configs := []measureConfig{{1, 64, true, false}, {1, 64, false, false}, {1000, 1, true, false}, {1000, 1, false, false}}
	runMeasure(t, configs, 3)
}

// TestMeasureTLS: 1,000 groups over plaintext and over mutual TLS, with
// and without coalescing (many small frames: TLS's cost per record shows),
// interleaved (docs/benchmarks.md, "The raft peer link over TLS").
func TestMeasureTLS(t *testing.T) {
	if !*measure {
		t.Skip("measurements run with -raftnode.measure")
	}
	runMeasure(t, []measureConfig{{1000, 1, true, false}, {1000, 1, true, true}, {1000, 1, false, false}, {1000, 1, false, true}}, 5)
}

type measureConfig struct {
	groups, perGroup int
	coalescing, tls  bool
}

// runMeasure runs each configuration for rounds rounds of 3 s, interleaved
// (A B C A B C …), and logs each round and each one's worst, median and
// best by proposals a second.
func runMeasure(t *testing.T, configs []measureConfig, rounds int) {
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("GOMAXPROCS %d, %s, load %s", runtime.GOMAXPROCS(0), runtime.Version(), load)
	const payload = 256
	round := 3 * time.Second
	type setup struct {
		c       *testCluster
		slots   []*slot
		leaders map[uint64]uint64
		stop    func()
	}
	setups := make([]setup, len(configs))
	for i, cf := range configs {
		c, slots, leaders := measureCluster(t, cf.groups, cf.perGroup, cf.coalescing, cf.tls)
		setups[i] = setup{c: c, slots: slots, leaders: leaders}
	}
	results := make([][]measureRun, len(configs))
	for r := range rounds {
		for i, cf := range configs { // interleaved: A B C D A B C D …
			s := setups[i]
			stop := s.c.realTicker(100 * time.Millisecond)
			if r == 0 {
				runProposers(t, s.c, s.slots, s.leaders, cf.perGroup, time.Second, payload) // warm-up, not kept
			}
			res := runProposers(t, s.c, s.slots, s.leaders, cf.perGroup, round, payload)
			stop()
			res.coalescing, res.tls = cf.coalescing, cf.tls
			results[i] = append(results[i], res)
			t.Logf("round %d %v", r+1, res)
		}
	}
	for i := range configs {
		rs := slices.Clone(results[i])
		slices.SortFunc(rs, func(a, b measureRun) int {
			return int(float64(a.proposals)/a.seconds - float64(b.proposals)/b.seconds)
		})
		t.Logf("worst  %v", rs[0])
		t.Logf("median %v", rs[len(rs)/2])
		t.Logf("best   %v", rs[len(rs)-1])
		cpu, frames := make([]float64, len(rs)), make([]float64, len(rs))
		for j, r := range rs {
			cpu[j] = 1e6 * r.cpuSeconds / float64(max(r.proposals, 1))
			frames[j] = float64(r.framesSent) / r.seconds / 6
		}
		slices.Sort(cpu)
		slices.Sort(frames)
		t.Logf("groups %d coalescing %v tls %v: CPU a proposal best/median/worst %.1f/%.1f/%.1f µs; frames/s per pair best/median/worst %.0f/%.0f/%.0f",
			configs[i].groups, configs[i].coalescing, configs[i].tls, cpu[0], cpu[len(cpu)/2], cpu[len(cpu)-1],
			frames[len(frames)-1], frames[len(frames)/2], frames[0])
	}
	load, _ = os.ReadFile("/proc/loadavg")
	t.Logf("load after %s", load)
}

// TestMeasureIdle: the CPU of 3 nodes × 10,000 quiescent groups on the real
// 100 ms ticker, against 3 nodes × 10 groups, each over 10 s, interleaved.
func TestMeasureIdle(t *testing.T) {
	if !*measure {
		t.Skip("measurements run with -raftnode.measure")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("GOMAXPROCS %d, %s, load %s", runtime.GOMAXPROCS(0), runtime.Version(), load)
	var clusters []*testCluster
	for _, groups := range []int{10, 10000} {
		c := newCluster(t, clusterOptions{nodes: 3, groups: groups, manual: true})
		leaders := c.spreadLeaders(200)
		c.proposeEach(leaders, "one", 1)
		c.tickUntil(20, "quiescent", c.quiescent)
		clusters = append(clusters, c)
	}
	runtime.GC()
	for r := range 3 {
		for _, c := range clusters {
			stop := c.realTicker(100 * time.Millisecond)
			cpu0, t0 := cpuSeconds(), time.Now()
			st0 := c.nodes[0].Stats()
			time.Sleep(10 * time.Second)
			cpu, el := cpuSeconds()-cpu0, time.Since(t0).Seconds()
			st := c.nodes[0].Stats()
			stop()
			t.Logf("round %d: 3 nodes × %5d quiescent groups: %.3f%% of a core per node (%.1f ms CPU per node-second), node 1: %d ticks, %d group ticks, %d Readys, %d frames sent",
				r+1, len(c.groups), 100*cpu/el/3, 1000*cpu/el/3, st.Ticks-st0.Ticks, st.GroupTicks-st0.GroupTicks, st.Readies-st0.Readies,
				st.Transport.FramesSent-st0.Transport.FramesSent)
		}
	}
}
