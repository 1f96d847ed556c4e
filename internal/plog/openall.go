package plog

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// DefaultRecoveryThreads is how many partition logs a broker recovers at
// once when not told (Kafka's num.recovery.threads.per.data.dir, 2 since
// Kafka 4.0): one per core, at least 2 and at most 8. Recovery is read-bound
// on one partition (a reader goroutine keeps the disk busy while the scan
// checksums); more threads overlap many partitions' reads, their CRCs on
// every core, and the opens and fsyncs of many small partitions. At most 8
// by default because each thread may hold two read blocks (32 MiB) and a
// disk is saturated by a few sequential streams.
func DefaultRecoveryThreads() int { return min(max(2, runtime.GOMAXPROCS(0)), 8) }

// OpenAll opens the logs of cfgs, at most threads at once (at least 1),
// each recovery thread reusing its read buffers from one partition to the
// next: recovery holds at most threads × 2 read blocks of memory and
// 2 × threads goroutines (a thread and its read-ahead). logs[i] and errs[i]
// are what Open(cfgs[i]) returns; one log that fails does not stop the
// others. Partitions are taken in the order given.
//
// Once all are open, the checkpoints of their data directories are
// written (checkpoint.go): the recovery points recovery moved, the values
// of per-partition files migrated (then removed), without the partitions
// whose directory is gone. A failed write is logged: the previous files
// stay, which only makes a later recovery more lenient.
func OpenAll(cfgs []Config, threads int) (logs []*Log, errs []error) {
	logs, errs = make([]*Log, len(cfgs)), make([]error, len(cfgs))
	threads = max(1, min(threads, len(cfgs)))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bufs scanBuffers
			defer bufs.release()
			for i := int(next.Add(1) - 1); i < len(cfgs); i = int(next.Add(1) - 1) {
				logs[i], errs[i] = open(cfgs[i], &bufs)
			}
		}()
	}
	wg.Wait()
	seen := map[*checkpoints]bool{}
	for _, l := range logs {
		if l == nil || seen[l.cp] {
			continue
		}
		seen[l.cp] = true
		l.cp.prune()
		if err := l.cp.write(); err != nil {
			l.cp.logger.Warn("checkpoints not written after recovery", "dir", l.cp.dir, "err", err)
		}
	}
	return logs, errs
}
