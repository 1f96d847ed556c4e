// Package bench is Sushka's measuring instrument (MEASURING.md): an
// open-loop load generator for Kafka-protocol brokers, the statistics of
// rounds (best / median / worst, the "indistinguishable" verdict), the host
// and broker passport, CPU accounting of the generator and of the broker,
// and the text and JSON reports. cmd/sushka's `bench` subcommands bind
// flags to it.
package bench

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Histogram records latencies in nanoseconds with a relative error below
// 1/128 (log-linear buckets: 128 linear sub-buckets per power of two), plus
// the exact count, sum, min and max. The zero value is ready to use; it is
// not safe for concurrent use.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      float64
	min, max int64
	negative uint64 // samples below zero, clamped to 0: they mean a broken clock
}

const subBits = 7 // 128 sub-buckets

func bucketOf(v int64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits - 1 // v >> e is in [128, 256)
	return (e+1)<<subBits + int(uint64(v)>>uint(e)) - 1<<subBits
}

// upperOf is the largest value that falls into bucket i.
func upperOf(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	e := i>>subBits - 1
	m := int64(i&(1<<subBits-1)) + 1<<subBits
	return (m+1)<<uint(e) - 1
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		h.negative++
		v = 0
	}
	b := bucketOf(v)
	if b >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, b+1-len(h.counts))...)
	}
	h.counts[b]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds the samples of o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
	h.negative += o.negative
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Negative is the number of samples that were below zero (clamped to 0).
func (h *Histogram) Negative() uint64 { return h.negative }

// Max is the largest sample, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest sample, exactly.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) by the nearest-rank rule:
// the smallest recorded value v such that at least ⌈q·n⌉ samples are ≤ v,
// reported as its bucket's upper bound (never above Max).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(upperOf(i), h.max))
		}
	}
	return time.Duration(h.max)
}

// Latency is the summary of a histogram that reports print.
type Latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
	// Negative counts samples that were below zero: a broken clock.
	Negative uint64 `json:"negative,omitempty"`
}

// Summary returns the percentiles in milliseconds.
func (h *Histogram) Summary() Latency {
	return Latency{
		Count: h.n, P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: ms(h.Mean()), Negative: h.negative,
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// String prints "p50 0.41ms p90 … max …".
func (l Latency) String() string {
	return fmt.Sprintf("p50 %s p90 %s p99 %s p99.9 %s max %s", fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max))
}

func fmtMs(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}

// Better says which direction of a metric is better.
type Better int

const (
	// Higher is better (throughput).
	Higher Better = iota
	// Lower is better (latency, CPU per byte).
	Lower
)

// Rounds is best / median / worst of one metric over the rounds of one
// system. Noise only slows a run, so the best round is the closest to the
// cost without interference, the median is the typical round, and the worst
// shows how far the machine was from rest.
type Rounds struct {
	Best   float64   `json:"best"`
	Median float64   `json:"median"`
	Worst  float64   `json:"worst"`
	Values []float64 `json:"rounds"`
}

// Summarize orders the values of rounds by better. With an even count the
// median is the lower middle in the order of better (a measured round, not
// an average of two).
func Summarize(values []float64, better Better) Rounds {
	if len(values) == 0 {
		return Rounds{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if better == Higher {
		slices.Reverse(s)
	}
	return Rounds{Best: s[0], Median: s[(len(s)-1)/2], Worst: s[len(s)-1], Values: slices.Clone(values)}
}

// Spread is the distance from the best round to the worst.
func (r Rounds) Spread() float64 { return math.Abs(r.Best - r.Worst) }

// Verdict names of a comparison.
const (
	Measured          = "measured"
	Indistinguishable = "indistinguishable"
)

// Comparison is the verdict on system A against system B for one metric.
type Comparison struct {
	// Verdict is "measured" or "indistinguishable": the gap between the
	// best rounds is below the larger spread (best to worst) of the two.
	Verdict string `json:"verdict"`
	// Ratio is A's best over B's best (for Lower metrics as well: read it
	// with the metric's direction). Always recorded; printed only when
	// measured.
	Ratio float64 `json:"ratio"`
	// DiffPercent is (A−B)/B of the compared rounds (best, or median for
	// CompareMedians), in percent.
	DiffPercent float64 `json:"diff_percent"`
	Gap         float64 `json:"gap"`
	Spread      float64 `json:"spread"`
}

// Compare applies MEASURING.md rule 6 to the best rounds of A and B.
func Compare(a, b Rounds) Comparison { return compareAt(a, b, a.Best, b.Best) }

// CompareMedians applies MEASURING.md rule 6 to the median rounds of A and
// B (the typical round; the stream benchmark's overhead, seeds/004): the
// gap between the medians against the larger best-to-worst spread.
func CompareMedians(a, b Rounds) Comparison { return compareAt(a, b, a.Median, b.Median) }

// compareAt compares the values va of a and vb of b against the larger
// spread of the two.
func compareAt(a, b Rounds, va, vb float64) Comparison {
	c := Comparison{Gap: math.Abs(va - vb), Spread: max(a.Spread(), b.Spread())}
	if vb != 0 {
		c.Ratio = va / vb
		c.DiffPercent = 100 * (va - vb) / vb
	}
	c.Verdict = Measured
	if c.Gap < c.Spread || c.Gap == 0 {
		c.Verdict = Indistinguishable
	}
	return c
}

// String prints the verdict: "2.31× (+131%)" or "indistinguishable".
func (c Comparison) String() string {
	if c.Verdict == Indistinguishable {
		return Indistinguishable
	}
	return fmt.Sprintf("%.2f× (%+.0f%%)", c.Ratio, c.DiffPercent)
}
