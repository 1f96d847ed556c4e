package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramQuantilesAgainstSorted(t *testing.T) {
	var h Histogram
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := 0; i < 100_000; i++ {
		// Log-uniform from 1µs to 10s.
		d := time.Duration(math.Exp(r.Float64()*math.Log(1e7)) * 1e3)
		all = append(all, d)
		h.Record(d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/100 {
			t.Errorf("q%.3f = %v, exact %v (must be ≥ and within 1%%)", q, got, want)
		}
	}
	if h.Max() != all[len(all)-1] || h.Min() != all[0] || h.Count() != uint64(len(all)) {
		t.Errorf("max %v min %v count %d; want %v %v %d", h.Max(), h.Min(), h.Count(), all[len(all)-1], all[0], len(all))
	}
}

func TestHistogramSmallExact(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i))
	}
	if got := h.Quantile(0.5); got != 50 {
		t.Errorf("p50 of 1..100 ns = %v, want 50ns", got)
	}
	if got := h.Quantile(0.99); got != 99 {
		t.Errorf("p99 of 1..100 ns = %v, want 99ns", got)
	}
	h.Record(-5)
	if h.Negative() != 1 || h.Min() != 0 {
		t.Errorf("a negative sample must be counted and clamped: negative %d min %v", h.Negative(), h.Min())
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.Count() != 2*h.Count() || m.Quantile(0.5) != h.Quantile(0.5) || m.Negative() != 2 {
		t.Errorf("merge: count %d p50 %v negative %d", m.Count(), m.Quantile(0.5), m.Negative())
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram must report zeros")
	}
}

func TestBucketsMonotonic(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<20; v += 7 {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucketOf(%d) = %d < %d", v, b, prev)
		}
		if upperOf(b) < v {
			t.Fatalf("upperOf(bucketOf(%d)) = %d < v", v, upperOf(b))
		}
		prev = b
	}
}

func TestSummarize(t *testing.T) {
	r := Summarize([]float64{100, 300, 200}, Higher)
	if r.Best != 300 || r.Median != 200 || r.Worst != 100 || r.Spread() != 200 {
		t.Errorf("higher: %+v", r)
	}
	r = Summarize([]float64{5, 1, 3}, Lower)
	if r.Best != 1 || r.Median != 3 || r.Worst != 5 {
		t.Errorf("lower: %+v", r)
	}
	if r.Values[0] != 5 {
		t.Error("Values must keep the round order")
	}
	r = Summarize([]float64{4, 1, 3, 2}, Higher) // even: lower middle in order of better
	if r.Median != 3 {
		t.Errorf("even median %v, want 3", r.Median)
	}
	if r := Summarize(nil, Higher); r.Best != 0 || r.Values != nil {
		t.Error("no rounds must give zero")
	}
}

func TestCompare(t *testing.T) {
	a := Summarize([]float64{200, 190, 180}, Higher)
	b := Summarize([]float64{100, 95, 90}, Higher)
	c := Compare(a, b)
	if c.Verdict != Measured || math.Abs(c.Ratio-2) > 1e-9 || math.Abs(c.DiffPercent-100) > 1e-9 {
		t.Errorf("clear gap: %+v", c)
	}
	if c.String() != "2.00× (+100%)" {
		t.Errorf("String %q", c.String())
	}
	// Gap 5 below A's spread 30: indistinguishable.
	a = Summarize([]float64{105, 90, 75}, Higher)
	b = Summarize([]float64{100, 99, 98}, Higher)
	if c := Compare(a, b); c.Verdict != Indistinguishable || c.String() != Indistinguishable {
		t.Errorf("gap below spread: %+v", c)
	}
	// Equal best rounds, no spread: indistinguishable, not 0%.
	a = Summarize([]float64{1, 1, 1}, Higher)
	if c := Compare(a, a); c.Verdict != Indistinguishable {
		t.Errorf("identical: %+v", c)
	}
	// Lower-is-better metrics compare best rounds the same way.
	a = Summarize([]float64{2, 2.1, 2.2}, Lower)
	b = Summarize([]float64{4, 4.1, 4.3}, Lower)
	if c := Compare(a, b); c.Verdict != Measured || c.Ratio != 0.5 {
		t.Errorf("latency: %+v", c)
	}
}

func TestFindKnee(t *testing.T) {
	steps := []SweepStep{
		{Fraction: 0.1, Offered: 100, Achieved: 100, P99: 1},
		{Fraction: 0.5, Offered: 500, Achieved: 499, P99: 2},
		{Fraction: 0.9, Offered: 900, Achieved: 880, P99: 9},
		{Fraction: 1.0, Offered: 1000, Achieved: 800, P99: 900},
		{Fraction: 1.2, Offered: 1200, Achieved: 1190, P99: 5}, // after a broken rung: not the knee
	}
	k := FindKnee("x", 1000, steps)
	if k.Knee != 900 || k.P99AtHalf != 2 || k.Steps[3].Kept {
		t.Errorf("knee %+v", k)
	}
	// A p99 blow-up alone breaks the ladder too.
	steps = []SweepStep{
		{Fraction: 0.1, Offered: 100, Achieved: 100, P99: 2},
		{Fraction: 0.5, Offered: 500, Achieved: 500, P99: 50},
	}
	if k := FindKnee("x", 1000, steps); k.Knee != 100 {
		t.Errorf("p99 blow-up: knee %v", k.Knee)
	}
}

func TestCommandline(t *testing.T) {
	got := Commandline([]string{"sushka", "bench", "--vs-exec", "peer --x 'y'"})
	want := `sushka bench --vs-exec 'peer --x '\''y'\'''`
	if got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}
