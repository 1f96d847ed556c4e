package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/sushka-io/sushka/internal/diskprobe"
)

// Issue 12's item 4 compares the p99 of acks=all produce at half of
// saturation with the disk's fdatasync p99. The disk's fdatasync of a 4 KiB
// append is what one small record costs; at load, a partition's group
// commit flushes what was written while the previous fdatasync ran, much
// more. So the ratio is also given against the probe of the size the
// broker flushed: the flush size is estimated as the partition's byte rate
// in the run × the broker's mean fdatasync (sushka_append_fdatasync_seconds,
// scraped from its admin /metrics before and after the scenario: with one
// fdatasync in flight per partition, each covers what was written during
// the one before), and the probe chosen is the measured size nearest to it
// (by ratio: 4 KiB, 64 KiB, 256 KiB, 1 MiB).

// FsyncHistogram is a scrape of sushka_append_fdatasync_seconds: the
// cumulative bucket counts by upper bound (seconds, ascending; the last
// +Inf), the sum and the count.
type FsyncHistogram struct {
	Upper  []float64
	Counts []float64
	Sum    float64
	Count  float64
}

const fsyncMetric = "sushka_append_fdatasync_seconds"

// ScrapeFsync reads the broker's fdatasync histogram from its admin
// listener's /metrics.
func ScrapeFsync(ctx context.Context, admin string) (FsyncHistogram, error) {
	b, err := adminGet(ctx, admin, "/metrics", 16<<20)
	if err != nil {
		return FsyncHistogram{}, err
	}
	return parseFsync(bytes.NewReader(b))
}

// parseFsync reads the histogram from Prometheus' text format.
func parseFsync(r io.Reader) (FsyncHistogram, error) {
	var h FsyncHistogram
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, fsyncMetric) {
			continue
		}
		rest := line[len(fsyncMetric):]
		sp := strings.LastIndexByte(rest, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(rest[sp+1:], 64)
		if err != nil {
			return h, fmt.Errorf("%s: %q: %w", fsyncMetric, line, err)
		}
		switch name := rest[:sp]; {
		case name == "_sum":
			h.Sum, found = v, true
		case name == "_count":
			h.Count = v
		case strings.HasPrefix(name, `_bucket{le="`):
			le := strings.TrimSuffix(strings.TrimPrefix(name, `_bucket{le="`), `"}`)
			upper, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
			if err != nil {
				return h, fmt.Errorf("%s: %q: %w", fsyncMetric, line, err)
			}
			h.Upper, h.Counts = append(h.Upper, upper), append(h.Counts, v)
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if !found {
		return h, fmt.Errorf("no %s in the broker's metrics", fsyncMetric)
	}
	return h, nil
}

// Since is the histogram of what was observed between before and h.
func (h FsyncHistogram) Since(before FsyncHistogram) FsyncHistogram {
	d := FsyncHistogram{Upper: h.Upper, Counts: make([]float64, len(h.Counts)), Sum: h.Sum - before.Sum, Count: h.Count - before.Count}
	for i := range h.Counts {
		d.Counts[i] = h.Counts[i]
		if i < len(before.Counts) {
			d.Counts[i] -= before.Counts[i]
		}
	}
	return d
}

// Quantile interpolates the q-quantile (seconds) within its bucket, as
// Prometheus' histogram_quantile does; 0 when empty.
func (h FsyncHistogram) Quantile(q float64) float64 {
	if len(h.Counts) == 0 || h.Counts[len(h.Counts)-1] <= 0 {
		return 0
	}
	rank := q * h.Counts[len(h.Counts)-1]
	lower, below := 0.0, 0.0
	for i, c := range h.Counts {
		if c >= rank {
			if math.IsInf(h.Upper[i], 1) {
				return lower // the highest finite bound
			}
			return lower + (h.Upper[i]-lower)*(rank-below)/math.Max(c-below, 1e-12)
		}
		lower, below = h.Upper[i], c
	}
	return lower
}

// Mean is the mean observation (seconds); 0 when empty.
func (h FsyncHistogram) Mean() float64 {
	if h.Count <= 0 {
		return 0
	}
	return h.Sum / h.Count
}

// Item4 is item 4's comparison for one system of an open-loop produce
// scenario.
type Item4 struct {
	System           string  `json:"system"`
	P99Ms            float64 `json:"p99_ms"`              // the scenario's median round
	BrokerFsyncP50Ms float64 `json:"broker_fsync_p50_ms"` // sushka_append_fdatasync_seconds in the scenario
	BrokerFsyncP99Ms float64 `json:"broker_fsync_p99_ms"`
	BrokerFsyncMean  float64 `json:"broker_fsync_mean_ms"`
	// FlushBytes is the estimated bytes of one group commit: the
	// partition's byte rate × BrokerFsyncMean.
	FlushBytes   float64 `json:"flush_bytes_estimate"`
	ProbeBytes   int64   `json:"probe_bytes"` // the probed size nearest FlushBytes
	ProbeP99Ms   float64 `json:"probe_p99_ms"`
	Ratio        float64 `json:"ratio"` // P99Ms / ProbeP99Ms
	Probe4KP99Ms float64 `json:"probe_4k_p99_ms"`
	Ratio4K      float64 `json:"ratio_4k"`
}

// NewItem4 computes the comparison from a system's p99 (median round), the
// partition's byte rate, the broker's fdatasync histogram over the scenario
// and the disk probe.
func NewItem4(system string, p99Ms, partitionBytesPerSec float64, fsync FsyncHistogram, d *DiskSummary) Item4 {
	it := Item4{System: system, P99Ms: p99Ms, BrokerFsyncP50Ms: 1e3 * fsync.Quantile(0.5),
		BrokerFsyncP99Ms: 1e3 * fsync.Quantile(0.99), BrokerFsyncMean: 1e3 * fsync.Mean()}
	it.FlushBytes = partitionBytesPerSec * fsync.Mean()
	flushes := d.flushes()
	it.Probe4KP99Ms = flushes[0].P99Ms
	best := flushes[0]
	for _, f := range flushes[1:] {
		if it.FlushBytes > 0 && math.Abs(math.Log(float64(f.Bytes)/it.FlushBytes)) < math.Abs(math.Log(float64(best.Bytes)/it.FlushBytes)) {
			best = f
		}
	}
	it.ProbeBytes, it.ProbeP99Ms = best.Bytes, best.P99Ms
	if it.ProbeP99Ms > 0 {
		it.Ratio = p99Ms / it.ProbeP99Ms
	}
	if it.Probe4KP99Ms > 0 {
		it.Ratio4K = p99Ms / it.Probe4KP99Ms
	}
	return it
}

// String is the report's line.
func (it Item4) String() string {
	return fmt.Sprintf("#   %s: p99 %s = %.2f× the disk's fdatasync p99 at %s (%s; the flush size: %.0f KiB per group commit, "+
		"the partition's %.1f MB/s × the broker's mean fdatasync %s; broker fdatasync p50 %s p99 %s), %.2f× the 4 KiB probe's %s\n",
		it.System, fmtMs(it.P99Ms), it.Ratio, diskprobe.FormatSize(it.ProbeBytes), fmtMs(it.ProbeP99Ms), it.FlushBytes/1024,
		it.rateMBps(), fmtMs(it.BrokerFsyncMean), fmtMs(it.BrokerFsyncP50Ms), fmtMs(it.BrokerFsyncP99Ms), it.Ratio4K, fmtMs(it.Probe4KP99Ms))
}

func (it Item4) rateMBps() float64 {
	if it.BrokerFsyncMean <= 0 {
		return 0
	}
	return it.FlushBytes / (it.BrokerFsyncMean / 1e3) / 1e6
}
