package plog

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// An idle partition (opened, written once, then left alone) holds no
// goroutine, no descriptor once its file's idle timeout has passed, and
// at most idleBytesPerPartition of heap (what this package
// allocated and still holds: the Log, its segment, indexes, producer
// table): a broker of 100,000 partitions (issue 12) pays for the ones in
// use, not for the others.
const idleBytesPerPartition = 2 << 10

func TestIdlePartitionCost(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 partitions")
	}
	const partitions = 500
	dir := t.TempDir()
	// 64 idle files may stay open by the limit; the idle timeout closes
	// them all.
	cache := NewIdleFileCache(64, 50*time.Millisecond, clock.Real{})
	// The heap this package holds: every live allocation made in
	// internal/plog (not the runtime's own, such as the threads sysmon
	// starts on a loaded machine), from the memory profile at rate 1.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	heap := func() uint64 {
		for range 3 {
			runtime.GC()
		}
		records := make([]runtime.MemProfileRecord, 1024)
		for {
			n, ok := runtime.MemProfile(records, true)
			if ok {
				records = records[:n]
				break
			}
			records = make([]runtime.MemProfileRecord, n+1024)
		}
		var held uint64
		for _, r := range records {
			frames := runtime.CallersFrames(r.Stack())
			for {
				f, more := frames.Next()
				if strings.HasPrefix(f.Function, "github.com/sushka-io/sushka/internal/plog.") && !strings.Contains(f.Function, ".Test") {
					held += uint64(r.InUseBytes())
					break
				}
				if !more {
					break
				}
			}
		}
		return held
	}
	// The runtime keeps the descriptors of ended goroutines for reuse
	// (not per partition): let it have enough before the baseline.
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 2 * partitions {
		wg.Add(1)
		go func() { defer wg.Done(); <-release }()
	}
	close(release)
	wg.Wait()
	goroutinesBefore, heapBefore, fdsBefore := runtime.NumGoroutine(), heap(), openDescriptors(t)
	logs := make([]*Log, partitions)
	b := mkBatch(1, 100, t0.UnixMilli())
	for p := range logs {
		cfg := DefaultConfig(vfs.OS(), fmt.Sprintf("%s/t-%d", dir, p))
		cfg.Logger, cfg.FileCache = quietLogger, cache
		l, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logs[p] = l
		mustAppend(t, l, b, AckForced)
	}
	defer func() {
		for _, l := range logs {
			l.Close()
		}
	}()
	// Writers go idle once their queue stays empty, files once unused
	// for the idle timeout (the sweep then ends).
	deadline := time.Now().Add(10 * time.Second)
	goroutines, fds := runtime.NumGoroutine()-goroutinesBefore, openDescriptors(t)-fdsBefore
	for (goroutines > 0 || fds > 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		goroutines, fds = runtime.NumGoroutine()-goroutinesBefore, openDescriptors(t)-fdsBefore
	}
	perPartition := (int64(heap()) - int64(heapBefore)) / partitions
	if f := os.Getenv("PLOG_IDLE_HEAP_PROFILE"); f != "" {
		w, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		pprof.WriteHeapProfile(w)
		w.Close()
	}
	t.Logf("%d idle partitions: %d goroutines, %d descriptors, %d heap bytes each", partitions, goroutines, fds, perPartition)
	if goroutines > 0 {
		t.Errorf("%d goroutines for %d idle partitions, want none", goroutines, partitions)
	}
	if fds > 0 {
		t.Errorf("%d descriptors open for %d idle partitions, want none (the cache counts %d)", fds, partitions, cache.Open())
	}
	if perPartition > idleBytesPerPartition {
		t.Errorf("an idle partition holds %d heap bytes, want at most %d", perPartition, idleBytesPerPartition)
	}
	runtime.KeepAlive(logs)
}

// openDescriptors is the count of this process's open descriptors.
func openDescriptors(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count descriptors: %v", err)
	}
	return len(entries) - 1 // the directory ReadDir opened
}
