package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MatrixCell is one linger × codec cell of the producer-batching lesson
// (seeds/001): n records queued at once with asynchronous Produce, Flush,
// latency from Produce to its callback (closed-loop by construction: it
// measures the client's buffer, as the lesson explains), and DISK: the
// bytes the topic gained in the partition logs (DescribeAllLogDirs, one
// replica per partition).
func MatrixCell(ctx context.Context, brokers, topic string, w Workload, n int64) (RoundResult, error) {
	if err := CreateTopic(ctx, brokers, topic, w.Partitions); err != nil {
		return RoundResult{}, err
	}
	cl, err := NewClient(brokers, w, kgo.DefaultProduceTopic(topic), kgo.MaxBufferedRecords(int(n)+1))
	if err != nil {
		return RoundResult{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	before, err := topicDiskBytes(ctx, adm, topic)
	if err != nil {
		return RoundResult{}, err
	}
	payloads := Payloads(int(min(n, 100_000)), w.RecordSize)
	var (
		mu    sync.Mutex
		lat   Histogram
		acked int64
		fails int64
		first string
	)
	start := time.Now()
	for i := int64(0); i < n; i++ {
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: payloads[int(i)%len(payloads)]}, func(_ *kgo.Record, err error) {
			took := time.Since(sent)
			mu.Lock()
			lat.Record(took)
			if err != nil {
				fails++
				if first == "" {
					first = err.Error()
				}
			} else {
				acked++
			}
			mu.Unlock()
		})
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_ = cl.Flush(fctx)
	cancel()
	elapsed := time.Since(start)
	after, err := topicDiskBytes(ctx, adm, topic)
	if err != nil {
		return RoundResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	var r RoundResult
	r.FromLoad(LoadResult{Mode: "closed-loop", Issued: n, Acked: acked, Errors: fails, Unfinished: n - acked - fails,
		FirstError: first, Elapsed: elapsed, Latency: &lat}, acked*int64(w.RecordSize))
	r.DiskBytes = after - before
	return r, nil
}

func topicDiskBytes(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	all, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("DescribeAllLogDirs: %w", err)
	}
	var size int64
	seen := map[int32]bool{}
	all.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic != topic || seen[p.Partition] {
				return
			}
			seen[p.Partition] = true
			size += p.Size
		})
	})
	return size, nil
}

// MatrixLingers and MatrixCodecs are the lesson's matrix.
var (
	MatrixLingers = []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}
	MatrixCodecs  = []string{"none", "lz4", "zstd"}
)

// SweepFractions is the rate ladder, as fractions of the closed-loop
// saturation rate.
var SweepFractions = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.2}

// SweepStep is one rung of the ladder for one system (median round).
type SweepStep struct {
	Fraction float64 `json:"fraction"`
	Offered  float64 `json:"offered_per_s"`
	Achieved float64 `json:"achieved_per_s"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Kept     bool    `json:"kept"`
}

// Knee is where a system stops keeping up: the highest rung before the
// first one that achieves less than 95% of the offered rate or whose p99
// is more than 10× the p99 of the lowest rung (and above 10 ms).
type Knee struct {
	System     string      `json:"system"`
	Saturation float64     `json:"saturation_per_s"` // closed-loop calibration
	Knee       float64     `json:"knee_per_s"`       // 0: even the first rung was not kept
	KneeFrac   float64     `json:"knee_fraction"`
	P99AtHalf  float64     `json:"p99_ms_at_50pct"`
	Steps      []SweepStep `json:"steps"`
}

// FindKnee applies the rule of Knee to steps ordered by rate.
func FindKnee(system string, saturation float64, steps []SweepStep) Knee {
	k := Knee{System: system, Saturation: saturation}
	var base float64
	broken := false
	for i := range steps {
		s := &steps[i]
		if i == 0 {
			base = s.P99
		}
		s.Kept = s.Achieved >= 0.95*s.Offered && (s.P99 <= 10*base || s.P99 <= 10)
		if !s.Kept {
			broken = true
		}
		if !broken {
			k.Knee, k.KneeFrac = s.Offered, s.Fraction
		}
		if s.Fraction == 0.5 {
			k.P99AtHalf = s.P99
		}
	}
	k.Steps = steps
	return k
}

// String prints the ladder.
func (k Knee) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: closed-loop saturation %.0f records/s; knee %.0f records/s (%.0f%%); p99 at 50%% of saturation %s\n",
		k.System, k.Saturation, k.Knee, 100*k.KneeFrac, fmtMs(k.P99AtHalf))
	for _, s := range k.Steps {
		mark := "kept"
		if !s.Kept {
			mark = "NOT KEPT"
		}
		fmt.Fprintf(&b, "#   %4.0f%%  offered %8.0f/s  achieved %8.0f/s  p50 %-8s p99 %-8s %s\n",
			100*s.Fraction, s.Offered, s.Achieved, fmtMs(s.P50), fmtMs(s.P99), mark)
	}
	return b.String()
}
