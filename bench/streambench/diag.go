package streambench

import (
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"syscall"
	"time"
)

// Diagnostics is what a consumer loop's window cost the process beyond
// its CPU time: the split of that time into user and system, the garbage
// collector's cycles, the bytes allocated, the scheduler's events (a
// goroutine made to run: each wake-up of a waiting goroutine is one; the
// runtime samples one in eight into /sched/latencies, and that sample's
// count is what SchedEvents holds) and
// the context switches of the process's threads (voluntary ones are
// mostly futex sleeps of idle threads). They explain a CPU figure; they
// are printed per round, not kept in the document.
type Diagnostics struct {
	User, System           time.Duration
	GCCycles               uint64
	AllocBytes             uint64
	SchedEvents            uint64
	VoluntarySwitches      int64
	InvoluntarySwitches    int64
	Goroutines, LiveHeapMB float64 // at the window's close
}

var diagMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/sched/latencies:seconds",
	"/sched/goroutines:goroutines",
	"/gc/heap/live:bytes",
}

// diagReading is one reading of the counters Diagnostics subtracts.
type diagReading struct {
	ok      bool
	rusage  syscall.Rusage
	samples []metrics.Sample
}

func readDiag() diagReading {
	r := diagReading{samples: make([]metrics.Sample, len(diagMetrics))}
	for i, name := range diagMetrics {
		r.samples[i].Name = name
	}
	metrics.Read(r.samples)
	r.ok = syscall.Getrusage(syscall.RUSAGE_SELF, &r.rusage) == nil
	return r
}

func (r diagReading) uint(i int) uint64 {
	if r.samples[i].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return r.samples[i].Value.Uint64()
}

// schedEvents is the count of the scheduling-latency histogram: one per
// sampled goroutine that went from runnable to running.
func (r diagReading) schedEvents() uint64 {
	v := r.samples[2].Value
	if v.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range v.Float64Histogram().Counts {
		n += c
	}
	return n
}

// since is the window's Diagnostics from start to r.
func (r diagReading) since(start diagReading) Diagnostics {
	d := Diagnostics{
		GCCycles:    r.uint(0) - start.uint(0),
		AllocBytes:  r.uint(1) - start.uint(1),
		SchedEvents: r.schedEvents() - start.schedEvents(),
		Goroutines:  float64(r.uint(3)),
		LiveHeapMB:  float64(r.uint(4)) / (1 << 20),
	}
	if r.ok && start.ok {
		d.User = time.Duration(syscall.TimevalToNsec(r.rusage.Utime) - syscall.TimevalToNsec(start.rusage.Utime))
		d.System = time.Duration(syscall.TimevalToNsec(r.rusage.Stime) - syscall.TimevalToNsec(start.rusage.Stime))
		d.VoluntarySwitches = r.rusage.Nvcsw - start.rusage.Nvcsw
		d.InvoluntarySwitches = r.rusage.Nivcsw - start.rusage.Nivcsw
	}
	return d
}

// String is the round's diagnostics per message of n.
func (d Diagnostics) String(n int) string {
	if n <= 0 {
		return "no messages"
	}
	per := func(v float64) float64 { return v / float64(n) }
	return fmt.Sprintf("user %.2f sys %.2f µs/msg, %d GC cycles (%.1f per 100k msg), %.0f B/msg allocated, %.3f sampled sched events/msg, "+
		"%.3f voluntary and %.3f involuntary switches/msg, %.0f goroutines and %.1f MiB live heap at the close",
		per(float64(d.User.Microseconds())), per(float64(d.System.Microseconds())), d.GCCycles, 1e5*per(float64(d.GCCycles)),
		per(float64(d.AllocBytes)), per(float64(d.SchedEvents)), per(float64(d.VoluntarySwitches)), per(float64(d.InvoluntarySwitches)),
		d.Goroutines, d.LiveHeapMB)
}

// startCPUProfile profiles the process into path until the returned
// function is called; path "" profiles nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
