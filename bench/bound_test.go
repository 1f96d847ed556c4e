package bench

import (
	"testing"
	"time"
)

func TestBound(t *testing.T) {
	// The figures of issue 12's rows: a franz-go generator and the broker
	// on 2 cores, a disk of 1.6 GB/s.
	closed := func(gen, brk, writeMBps float64) BoundFigures {
		return BoundFigures{MachineCores: 2, GeneratorCores: gen, GeneratorLimit: 2, GeneratorKnown: true,
			BrokerCores: brk, BrokerKnown: true, DiskWriteMBps: writeMBps, DiskSeqWriteMBps: 1600}
	}
	open := func(f BoundFigures, offered, achieved float64, lag, window time.Duration) BoundFigures {
		f.OpenLoop, f.Offered, f.Achieved, f.FinalLag, f.Window = true, offered, achieved, lag, window
		return f
	}
	withLimit := func(f BoundFigures, limit float64) BoundFigures { f.GeneratorLimit = limit; return f }
	noBroker := func(f BoundFigures) BoundFigures { f.BrokerKnown, f.BrokerCores = false, 0; return f }
	noDisk := func(f BoundFigures) BoundFigures { f.DiskSeqWriteMBps = 0; return f }
	backpressured := func(f BoundFigures, b time.Duration) BoundFigures { f.Backpressure = b; return f }
	busy := func(f BoundFigures, share float64) BoundFigures {
		f.MachineBusy, f.MachineBusyOK = share, true
		return f
	}
	for _, c := range []struct {
		name string
		f    BoundFigures
		want string
	}{
		{"issue 12: generator 1.07 + broker 0.80 of 2 cores", closed(1.07, 0.80, 590), BoundMachine},
		{"generator 1.0 + broker 0.8 = 90% exactly", closed(1.0, 0.8, 590), BoundMachine},
		{"generator 0.5 + broker 0.6 of 2: cores to spare", closed(0.5, 0.6, 590), BoundBroker},
		{"generator saturates its GOMAXPROCS=1", withLimit(closed(0.95, 0.4, 300), 1), BoundGenerator},
		{"generator at 89% of GOMAXPROCS=1", withLimit(closed(0.89, 0.4, 300), 1), BoundBroker},
		{"generator saturated and the machine full: the machine", closed(1.85, 0.1, 100), BoundMachine},
		{"disk at 87.5% of its bandwidth", closed(0.3, 0.5, 1400), BoundDisk},
		{"disk at 81%", closed(0.3, 0.5, 1300), BoundBroker},
		{"machine full and disk at 90%: the machine first", closed(1.0, 0.9, 1450), BoundMachine},
		{"open loop kept its rate", open(closed(0.2, 0.2, 100), 10000, 9990, time.Millisecond, 10*time.Second), BoundOfferedRate},
		{"open loop kept its rate on a full machine", open(closed(1.1, 0.8, 100), 10000, 9990, time.Millisecond, 10*time.Second), BoundOfferedRate},
		{"open loop behind: last send 2 s late", open(closed(0.6, 0.3, 100), 10000, 8000, 2*time.Second, 10*time.Second), BoundGenerator},
		{"open loop kept 96% but ended 1 s late", open(closed(0.6, 0.3, 100), 10000, 9600, time.Second, 10*time.Second), BoundGenerator},
		{"open loop behind, the broker's in-flight bound full", backpressured(open(closed(0.3, 0.6, 100), 10000, 7000, 2*time.Second, 10*time.Second), 1500*time.Millisecond), BoundBroker},
		{"open loop behind, backpressure explains a third", backpressured(open(closed(0.3, 0.6, 100), 10000, 7000, 3*time.Second, 10*time.Second), time.Second), BoundGenerator},
		{"open loop not kept, schedule on time: the broker", open(closed(0.3, 0.6, 100), 10000, 7000, 10*time.Millisecond, 10*time.Second), BoundBroker},
		{"other processes keep the machine 95% busy", busy(closed(0.2, 0.4, 100), 0.95), BoundMachine},
		{"the machine 85% busy", busy(closed(0.2, 0.4, 100), 0.85), BoundBroker},
		{"no broker pid", noBroker(closed(0.5, 0, 100)), BoundUndetermined},
		{"no broker pid, generator saturated", noBroker(withLimit(closed(0.97, 0, 100), 1)), BoundGenerator},
		{"no disk probe", noDisk(closed(0.5, 0.6, 590)), BoundUndetermined},
		{"no disk probe, machine full", noDisk(closed(1.2, 0.7, 590)), BoundMachine},
	} {
		if got := Bound(c.f); got != c.want {
			t.Errorf("%s: %s, want %s (%s)", c.name, got, c.want, c.f)
		}
	}
}

func TestScheduleBehind(t *testing.T) {
	for _, c := range []struct {
		lag, window time.Duration
		want        bool
	}{
		{49 * time.Millisecond, time.Second, false},
		{50 * time.Millisecond, time.Second, true},
		{400 * time.Millisecond, 10 * time.Second, false},
		{500 * time.Millisecond, 10 * time.Second, true},
	} {
		f := BoundFigures{OpenLoop: true, FinalLag: c.lag, Window: c.window}
		if got := f.ScheduleBehind(); got != c.want {
			t.Errorf("lag %s of %s: behind %v, want %v", c.lag, c.window, got, c.want)
		}
	}
	if (BoundFigures{FinalLag: time.Hour}).ScheduleBehind() {
		t.Error("a closed loop has no schedule to fall behind")
	}
}

// TestScenarioLabelsMachineBound: rounds of issue 12's figures (closed
// loop, generator 1.05 and broker 0.8 of 2 cores) were labelled
// broker-bound before the rule; they are machine-bound.
func TestScenarioLabelsMachineBound(t *testing.T) {
	sc := &Scenario{Name: "t", Primary: "records_per_s"}
	for i := 1; i <= 3; i++ {
		r := RoundResult{System: "sushka", Round: i, Mode: "closed-loop", Throughput: 576000, MBps: 590, Bytes: 5.9e9, ElapsedSec: 10,
			GeneratorCPU: CPUSample{CPU: 10500 * time.Millisecond, Wall: 10 * time.Second, OK: true},
			BrokerCPU:    CPUSample{CPU: 8 * time.Second, Wall: 10 * time.Second, OK: true}}
		boundOf(&r, 2, 2, 1600)
		sc.add(r)
	}
	sc.finish()
	sr := sc.Systems[0]
	if sr.BrokerBound || sr.Bound != BoundMachine || sr.BoundDetail != BoundMachine {
		t.Fatalf("broker_bound %v, bound %q (%q): want machine-bound", sr.BrokerBound, sr.Bound, sr.BoundDetail)
	}
}

func TestSummarizeBound(t *testing.T) {
	rs := []RoundResult{{Bound: BoundBroker}, {Bound: BoundMachine}, {Bound: BoundMachine}}
	if l, d := summarizeBound(rs); l != BoundMachine || d != "machine-bound (2 of 3 rounds; 1 broker-bound)" {
		t.Errorf("%q %q", l, d)
	}
	rs = []RoundResult{{Bound: BoundBroker}, {Bound: BoundDisk}}
	if l, _ := summarizeBound(rs); l != BoundDisk {
		t.Errorf("a tie goes to the label first in precedence: %q", l)
	}
}
