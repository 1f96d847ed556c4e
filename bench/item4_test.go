package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/diskprobe"
)

const fsyncScrape = `# HELP sushka_append_fdatasync_seconds acks=all: the fdatasync covering an append.
# TYPE sushka_append_fdatasync_seconds histogram
sushka_append_fdatasync_seconds_bucket{le="0.001"} 10
sushka_append_fdatasync_seconds_bucket{le="0.002"} 90
sushka_append_fdatasync_seconds_bucket{le="0.004"} 100
sushka_append_fdatasync_seconds_bucket{le="+Inf"} 100
sushka_append_fdatasync_seconds_sum 0.15
sushka_append_fdatasync_seconds_count 100
sushka_append_latency_seconds_bucket{le="0.001"} 7
`

// TestFsyncHistogram: the scrape is parsed, differenced and its quantiles
// interpolated within buckets as histogram_quantile does.
func TestFsyncHistogram(t *testing.T) {
	after, err := parseFsync(strings.NewReader(fsyncScrape))
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Upper) != 4 || !math.IsInf(after.Upper[3], 1) || after.Count != 100 || after.Sum != 0.15 {
		t.Fatalf("parsed %+v", after)
	}
	before := FsyncHistogram{Upper: after.Upper, Counts: []float64{0, 0, 0, 0}, Sum: 0.05, Count: 0}
	d := after.Since(before)
	if d.Sum != 0.1 && math.Abs(d.Sum-0.1) > 1e-12 {
		t.Fatalf("sum %v", d.Sum)
	}
	// p50: rank 50 in (0.001, 0.002], 40 of its 80 → 1.5 ms.
	if q := d.Quantile(0.5); math.Abs(q-0.0015) > 1e-9 {
		t.Errorf("p50 %v, want 0.0015", q)
	}
	// p99: rank 99 in (0.002, 0.004], 9 of its 10 → 3.8 ms.
	if q := d.Quantile(0.99); math.Abs(q-0.0038) > 1e-9 {
		t.Errorf("p99 %v, want 0.0038", q)
	}
	if _, err := parseFsync(strings.NewReader("other_metric 1\n")); err == nil {
		t.Error("a scrape without the histogram parsed")
	}
}

// TestItem4ChoosesTheFlushSize: the ratio is taken against the probe whose
// size is nearest (by ratio) to the partition's bytes per group commit.
func TestItem4ChoosesTheFlushSize(t *testing.T) {
	d := &DiskSummary{FdatasyncCount: 100, FdatasyncP99Ms: 0.5, FdatasyncBySize: []FlushSummary{
		{Bytes: 64 << 10, Count: 100, P99Ms: 1}, {Bytes: 256 << 10, Count: 100, P99Ms: 2}, {Bytes: 1 << 20, Count: 100, P99Ms: 4}}}
	fsync, _ := parseFsync(strings.NewReader(fsyncScrape)) // mean 1.5 ms
	for _, tc := range []struct {
		rate      float64 // bytes/s per partition
		wantBytes int64
	}{
		{150e6, 256 << 10}, // 150 MB/s × 1.5 ms = 225 KB → 256 KiB
		{600e6, 1 << 20},   // 900 KB → 1 MiB
		{30e6, 64 << 10},   // 45 KB → 64 KiB
		{1e6, 4 << 10},     // 1.5 KB → 4 KiB
		{2000e6, 1 << 20},  // 3 MB: the largest probed
	} {
		it := NewItem4("s", 6, tc.rate, fsync, d)
		if it.ProbeBytes != tc.wantBytes {
			t.Errorf("%.0f B/s (flush %.0f B): probe of %d B, want %d", tc.rate, it.FlushBytes, it.ProbeBytes, tc.wantBytes)
		}
		probe := map[int64]float64{4 << 10: 0.5, 64 << 10: 1, 256 << 10: 2, 1 << 20: 4}[it.ProbeBytes]
		if it.Ratio != 6/probe || it.Ratio4K != 12 {
			t.Errorf("ratios %v, %v; want %v, 12", it.Ratio, it.Ratio4K, 6/probe)
		}
		if !strings.Contains(it.String(), diskprobe.FormatSize(it.ProbeBytes)) {
			t.Errorf("line %q does not name the probe", it.String())
		}
	}
}

// TestDiskSummaryFlushSizes: the passport's disk probe carries the flush
// sizes in its JSON, beside the 4 KiB figures.
func TestDiskSummaryFlushSizes(t *testing.T) {
	dir := t.TempDir()
	volatile, err := diskprobe.IsVolatile(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Disk(context.Background(), dir, 1<<20, 20, volatile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		P99    float64 `json:"fdatasync_p99_ms"`
		BySize []struct {
			Bytes int64   `json:"bytes"`
			Count int     `json:"count"`
			P99   float64 `json:"p99_ms"`
		} `json:"fdatasync_by_size"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.P99 <= 0 || len(back.BySize) != len(diskprobe.DefaultFlushSizes) {
		t.Fatalf("disk summary %s", b)
	}
	for i, f := range back.BySize {
		if f.Bytes != diskprobe.DefaultFlushSizes[i] || f.Count < 10 || f.P99 <= 0 {
			t.Errorf("flush size %d: %+v", i, f)
		}
	}
	if !strings.Contains(d.Line, "fdatasync 256KiB p50") {
		t.Errorf("line %q", d.Line)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("probe files left: %v", left)
	}
}
