package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/sushka-io/sushka/internal/diskprobe"
)

// DiskSummary is the data directory's disk, measured by internal/diskprobe,
// printed beside results (MEASURING.md rule 9).
type DiskSummary struct {
	Dir            string  `json:"dir"`
	Storage        string  `json:"storage"`
	Volatile       bool    `json:"volatile"`
	SeqWriteMBps   float64 `json:"seq_write_mb_per_s"`
	SeqReadMBps    float64 `json:"seq_read_mb_per_s"`
	FdatasyncP50Ms float64 `json:"fdatasync_p50_ms"`
	FdatasyncP90Ms float64 `json:"fdatasync_p90_ms"`
	FdatasyncP99Ms float64 `json:"fdatasync_p99_ms"`
	FdatasyncMaxMs float64 `json:"fdatasync_max_ms"`
	FdatasyncCount int     `json:"fdatasync_count"`
	// FdatasyncBySize are the larger appends + fdatasync (64 KiB, 256 KiB,
	// 1 MiB): what a group commit of that size costs the disk, the
	// denominator of item 4's ratio (Item4).
	FdatasyncBySize  []FlushSummary `json:"fdatasync_by_size,omitempty"`
	WriteBytes       int64          `json:"write_bytes"`
	ReadCacheDropped bool           `json:"read_cache_dropped"`
	Suspect          []string       `json:"suspect,omitempty"`
	Line             string         `json:"line"`
	Raw              string         `json:"raw"`
}

// FlushSummary is one flush size's append + fdatasync latency.
type FlushSummary struct {
	Bytes int64   `json:"bytes"`
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// flushes lists the 4 KiB loop and the larger ones, smallest first.
func (d *DiskSummary) flushes() []FlushSummary {
	all := []FlushSummary{{Bytes: 4 << 10, Count: d.FdatasyncCount, P50Ms: d.FdatasyncP50Ms, P90Ms: d.FdatasyncP90Ms, P99Ms: d.FdatasyncP99Ms, MaxMs: d.FdatasyncMaxMs}}
	return append(all, d.FdatasyncBySize...)
}

// ErrVolatile refuses a storage probe on tmpfs (MEASURING.md rule 11).
var ErrVolatile = errors.New("the directory is on a filesystem in memory (tmpfs/ramfs): a storage figure there measures memory; pass --allow-tmpfs to measure it anyway, labelled")

// Disk probes dir. writeBytes bounds the sequential write and read.
func Disk(ctx context.Context, dir string, writeBytes int64, syncIterations int, allowTmpfs bool) (*DiskSummary, error) {
	res, err := diskprobe.Probe(ctx, dir, diskprobe.Options{WriteBytes: writeBytes, SyncIterations: syncIterations, AllowVolatile: allowTmpfs})
	if errors.Is(err, diskprobe.ErrVolatile) {
		return nil, fmt.Errorf("%s: %w", dir, ErrVolatile)
	}
	if err != nil {
		return nil, err
	}
	d := &DiskSummary{
		Dir: dir, Storage: res.Storage.String(), Volatile: res.Storage.Volatile,
		SeqWriteMBps: res.WriteBandwidth() / 1e6, SeqReadMBps: res.ReadBandwidth() / 1e6,
		FdatasyncP50Ms: ms(res.SyncLatencyP50), FdatasyncP90Ms: ms(res.SyncLatencyP90), FdatasyncP99Ms: ms(res.SyncLatencyP99),
		FdatasyncMaxMs: ms(res.SyncLatencyMax), FdatasyncCount: res.SyncCount, WriteBytes: res.WriteBytes,
		ReadCacheDropped: res.CacheDropped, Suspect: res.Suspect, Line: res.String(), Raw: res.Raw(),
	}
	for _, f := range res.Flushes {
		d.FdatasyncBySize = append(d.FdatasyncBySize, FlushSummary{Bytes: f.Bytes, Count: f.Count,
			P50Ms: ms(f.P50), P90Ms: ms(f.P90), P99Ms: ms(f.P99), MaxMs: ms(f.Max)})
	}
	if d.Volatile {
		d.Line += " — VOLATILE FILESYSTEM (--allow-tmpfs): these figures measure memory, not a disk"
	}
	return d, nil
}

// CheckStorage refuses a data directory on tmpfs for a storage-bound run
// unless allowed; it returns the storage description.
func CheckStorage(dir string, allowTmpfs bool) (string, error) {
	st, err := diskprobe.Describe(dir)
	if err != nil {
		return "", err
	}
	if st.Volatile && !allowTmpfs {
		return st.String(), fmt.Errorf("%s (%s): %w", dir, st, ErrVolatile)
	}
	return st.String(), nil
}
