package plog

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// BenchmarkAppendVisible: one producer appending with AckWritten, then
// waiting until the high watermark covers the append (what a caught-up
// consumer waits for: Wait fires, Read returns the batch). It reports the
// append-to-visible latency (from Append's return to the high watermark
// covering it): mean, p50 and p99.
func BenchmarkAppendVisible(b *testing.B) {
	for _, records := range []int{1, 100} {
		for _, p := range writePaths {
			b.Run(fmt.Sprintf("batch=%dx1KiB/path=%s", records, p.name), func(b *testing.B) {
				benchAppendVisible(b, p.path, records)
			})
		}
	}
}

func benchAppendVisible(b *testing.B, wp WritePath, records int) {
	l := openBench(b, wp)
	buf := batch.Build(batch.BuildOptions{Records: records, ValueSize: 1024, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wait := l.Wait() // before the append, so its publication wakes us
		res, err := l.Append(buf, AckWritten)
		if err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		end := res.BaseOffset + int64(records)
		for l.HighWatermark() < end {
			<-wait
			wait = l.Wait()
		}
		lat = append(lat, time.Since(acked))
	}
	b.StopTimer()
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "visible-ns/op")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "visible-p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "visible-p99-ns")
}
