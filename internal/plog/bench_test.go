package plog

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Benchmarks run on the OS filesystem in SUSHKA_BENCH_DIR (default: the
// test's temp directory, which must not be tmpfs for the numbers to mean
// anything: see docs/benchmarks.md for the commands and results).

func benchDir(tb testing.TB) string {
	if root := os.Getenv("SUSHKA_BENCH_DIR"); root != "" {
		dir, err := os.MkdirTemp(root, "bench-")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return tb.TempDir()
}

func openBench(tb testing.TB, wp WritePath) *Log {
	cfg := DefaultConfig(vfs.OS(), benchDir(tb))
	cfg.WritePath, cfg.Logger, cfg.RetentionTime = wp, quietLogger, -1
	l, err := Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

var ackNames = map[AckPolicy]string{AckNone: "none", AckWritten: "written", AckForced: "forced"}

// BenchmarkAppend: one producer, ack × records per batch × record size ×
// write path.
func BenchmarkAppend(b *testing.B) {
	for _, ack := range []AckPolicy{AckNone, AckWritten, AckForced} {
		for _, records := range []int{1, 10, 100} {
			for _, size := range []int{128, 1024} {
				for _, p := range writePaths {
					name := fmt.Sprintf("ack=%s/batch=%d/record=%dB/path=%s", ackNames[ack], records, size, p.name)
					b.Run(name, func(b *testing.B) { benchAppend(b, p.path, ack, records, size) })
				}
			}
		}
	}
}

func benchAppend(b *testing.B, wp WritePath, ack AckPolicy, records, size int) {
	l := openBench(b, wp)
	proto := batch.Build(batch.BuildOptions{Records: records, ValueSize: size, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	// With AckNone the writer may still hold a batch after Append returns:
	// rotate through more buffers than can be queued.
	ring := 1
	if ack == AckNone {
		ring = 2 * (DefaultQueueDepth + maxGroup)
	}
	bufs := make([][]byte, ring)
	for i := range bufs {
		bufs[i] = append([]byte(nil), proto...)
	}
	b.SetBytes(int64(len(proto)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(bufs[i%ring], ack); err != nil {
			b.Fatal(err)
		}
	}
	if ack == AckNone { // count the writes, not just the queueing
		if _, err := l.Append(append([]byte(nil), proto...), AckWritten); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*records)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkGroupCommit: 1, 8 and 64 producers appending with AckForced
// (batches of 1 and of 10 records of 1 KiB). Throughput should scale with
// the number of producers because one fdatasync acknowledges the whole
// group; it stops scaling where the group's bytes make the fsync
// bandwidth-bound.
func BenchmarkGroupCommit(b *testing.B) {
	if os.Getenv("SUSHKA_NO_YIELD") != "" {
		yieldBeforeDrain = false
	}
	for _, records := range []int{1, 10} {
		for _, producers := range []int{1, 8, 64} {
			for _, p := range writePaths {
				b.Run(fmt.Sprintf("batch=%dx1KiB/producers=%d/path=%s", records, producers, p.name), func(b *testing.B) {
					benchGroupCommit(b, p.path, producers, records)
				})
			}
		}
	}
}

func benchGroupCommit(b *testing.B, wp WritePath, producers, records int) {
	l := openBench(b, wp)
	proto := batch.Build(batch.BuildOptions{Records: records, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	b.SetBytes(int64(len(proto)))
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := append([]byte(nil), proto...)
			for next.Add(1) <= int64(b.N) {
				if _, err := l.Append(buf, AckForced); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(b.N)/float64(max(l.Syncs(), 1)), "appends/fsync")
}
