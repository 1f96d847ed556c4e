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

	recoveryPartitions = flag.Int("recovery-partitions", 1, "partitions TestRecoverySpeed divides -recovery-gb into")
	recoveryThreads    = flag.Int("recovery-threads", DefaultRecoveryThreads(), "recovery threads of TestRecoverySpeed (OpenAll)")
	recoveryDir        = flag.String("recovery-dir", "", "keep TestRecoverySpeed's logs in this directory and reuse them")
	recoveryClean      = flag.Bool("recovery-clean", false, "TestRecoverySpeed keeps the recovery-point checkpoints (a clean stop)")
	recoveryDrop       = flag.Bool("recovery-drop-cache", true, "TestRecoverySpeed drops the logs from the page cache first (false: read from memory, the CPU's share alone)")
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

// TestRecoverySpeed writes -recovery-gb of logs (in -recovery-partitions
// partitions), drops them from the page cache and measures how fast OpenAll
// opens them on -recovery-threads. With -recovery-dir the logs are kept
// there and reused by the next run (so binaries built from different
// revisions can read the same files, interleaved); without -recovery-clean
// the recovery-point checkpoints are removed first, as after an unclean
// stop.
func TestRecoverySpeed(t *testing.T) {
	if *recoveryGB <= 0 {
		t.Skip("pass -recovery-gb 4 to run")
	}
	dir := *recoveryDir
	if dir == "" {
		dir = benchDir(t)
		printDisk(t, dir)
	}
	var cfgs []Config
	for p := range *recoveryPartitions {
		cfg := DefaultConfig(vfs.OS(), filepath.Join(dir, fmt.Sprintf("recovery-%d", p)))
		cfg.Logger, cfg.RetentionTime = quietLogger, -1
		cfgs = append(cfgs, cfg)
	}
	target := int64(*recoveryGB*(1<<30)) / int64(len(cfgs))
	done := filepath.Join(dir, fmt.Sprintf("written-%d-%d", len(cfgs), target))
	if _, err := os.Stat(done); err != nil {
		proto := batch.Build(batch.BuildOptions{Records: 100, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
		for _, cfg := range cfgs {
			os.RemoveAll(cfg.Dir)
			l, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Counted as appended: Size is the published size, which lags
			// behind AckWritten appends.
			for written := int64(0); written < target; written += int64(len(proto)) {
				if _, err := l.Append(proto, AckWritten); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(done, nil, 0o644)
	}
	var size int64
	for _, cfg := range cfgs {
		if !*recoveryClean {
			forgetRecoveryPoint(t, vfs.OS(), cfg.Dir)
		}
		size += dirBytes(t, cfg.Dir)
	}
	dropped := false
	if *recoveryDrop {
		dropped = dropCache(t, dir)
	}
	start := time.Now()
	logs, errs := OpenAll(cfgs, *recoveryThreads)
	elapsed := time.Since(start)
	var records int64
	for i, l := range logs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		records += l.HighWatermark()
		l.Close()
	}
	t.Logf("recovered %d bytes (%d records, %d partitions, clean %v, threads %d) in %v: %.0f MB/s (page cache dropped: %v)",
		size, records, len(cfgs), *recoveryClean, *recoveryThreads, elapsed.Round(time.Millisecond), float64(size)/1e6/elapsed.Seconds(), dropped)
}

// dirBytes is the size of the files in dir.
func dirBytes(t *testing.T, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

// dropCache syncs the files under dir and asks the kernel to drop their
// pages.
func dropCache(t *testing.T, dir string) bool {
	ok := true
	err := filepath.WalkDir(dir, func(name string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		f.Sync()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			ok = false
			fmt.Fprintln(os.Stderr, "fadvise:", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
