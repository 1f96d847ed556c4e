package plog

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sushka-io/sushka/internal/diskprobe"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Long storage measurements, kept out of CI behind flags (commands in
// docs/benchmarks.md):
//
//	go test ./internal/plog -run TestSustainedWrite -sustained 60s -v
//	go test ./internal/plog -run TestRecoverySpeed -recovery-gb 4 -v
var (
	sustained  = flag.Duration("sustained", 0, "run TestSustainedWrite for this long (0 skips it)")
	recoveryGB = flag.Float64("recovery-gb", 0, "size of the log TestRecoverySpeed writes then recovers (0 skips it)")
	probeDisk  = flag.Bool("probe-disk", true, "print the data directory's disk limits beside soak results")
)

func printDisk(t *testing.T, dir string) {
	st, err := diskprobe.Describe(dir)
	if err == nil {
		t.Logf("# storage: %s", st)
	}
	if !*probeDisk {
		return
	}
	res, err := diskprobe.Probe(context.Background(), dir, diskprobe.Options{WriteBytes: 1 << 30})
	if err != nil {
		t.Logf("# disk probe failed: %v", err)
		return
	}
	t.Logf("%s", res)
}

// TestSustainedWrite appends batches of 100 records of 1 KiB with AckWritten
// from 4 producers for the -sustained duration, with retention keeping the
// log under 8 GiB, and reports the mean and the worst second.
func TestSustainedWrite(t *testing.T) {
	if *sustained <= 0 {
		t.Skip("pass -sustained 60s to run")
	}
	dir := benchDir(t)
	printDisk(t, dir)
	for _, p := range writePaths {
		t.Run(p.name, func(t *testing.T) {
			cfg := DefaultConfig(vfs.OS(), filepath.Join(dir, p.name))
			cfg.WritePath, cfg.Logger, cfg.RetentionBytes, cfg.RetentionTime = p.path, quietLogger, 8<<30, -1
			l, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			proto := batch.Build(batch.BuildOptions{Records: 100, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
			var written atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := append([]byte(nil), proto...)
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := l.Append(buf, AckWritten); err != nil {
							t.Error(err)
							return
						}
						written.Add(int64(len(buf)))
					}
				}()
			}
			var perSecond []float64
			start := time.Now()
			last := int64(0)
			tick := time.NewTicker(time.Second)
			for time.Since(start) < *sustained {
				<-tick.C
				n := written.Load()
				perSecond = append(perSecond, float64(n-last)/1e6)
				last = n
				l.EnforceRetention()
			}
			tick.Stop()
			close(stop)
			wg.Wait()
			elapsed := time.Since(start)
			sorted := append([]float64(nil), perSecond...)
			sort.Float64s(sorted)
			t.Logf("sustained %v, path=%s, ack=written, batch=100x1KiB, 4 producers: mean %.0f MB/s, worst second %.0f MB/s, best second %.0f MB/s, median %.0f MB/s (%d bytes)",
				elapsed.Round(time.Second), p.name, float64(written.Load())/1e6/elapsed.Seconds(),
				sorted[0], sorted[len(sorted)-1], sorted[len(sorted)/2], written.Load())
		})
	}
}

// TestRecoverySpeed writes a -recovery-gb log, drops it from the page cache
// and measures how fast Open scans it.
func TestRecoverySpeed(t *testing.T) {
	if *recoveryGB <= 0 {
		t.Skip("pass -recovery-gb 4 to run")
	}
	dir := benchDir(t)
	printDisk(t, dir)
	cfg := DefaultConfig(vfs.OS(), dir)
	cfg.Logger, cfg.RetentionTime = quietLogger, -1
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proto := batch.Build(batch.BuildOptions{Records: 100, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	target := int64(*recoveryGB * (1 << 30))
	for l.Size() < target {
		if _, err := l.Append(proto, AckWritten); err != nil {
			t.Fatal(err)
		}
	}
	size := l.Size()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	dropped := dropCache(t, dir)
	start := time.Now()
	l, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	hw := l.HighWatermark()
	l.Close()
	t.Logf("recovered %d bytes (%d records, %d segments) in %v: %.0f MB/s (page cache dropped: %v)",
		size, hw, (size>>30)+1, elapsed.Round(time.Millisecond), float64(size)/1e6/elapsed.Seconds(), dropped)
}

// dropCache syncs the segment files and asks the kernel to drop their pages.
func dropCache(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f.Sync()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			ok = false
			fmt.Fprintln(os.Stderr, "fadvise:", err)
		}
		f.Close()
	}
	return ok
}
