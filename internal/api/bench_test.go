package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// fetchAll is a v12 Fetch of every partition of tp from the offsets given.
func fetchAll(tp *topic, offsets []int64, minBytes int32, maxWait time.Duration) *server.Request {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(maxWait / time.Millisecond)
	req.MinBytes = minBytes
	req.MaxBytes = 50 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = tp.meta.Name
	for p := range tp.parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = int32(p)
		rp.FetchOffset = offsets[p]
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return &server.Request{Key: 1, Version: 12, Body: req}
}

func appendOne(tb testing.TB, l *plog.Log) {
	b := batch.Build(batch.BuildOptions{Records: 1, ValueSize: 100, ProducerID: -1})
	if _, err := l.Append(b, plog.AckWritten); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkFetch is a fetch that finds data at once (the consumer behind the
// log end): allocations per request, for 1 and 100 partitions.
func BenchmarkFetch(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			tb := startTestBroker(b, Config{})
			tp := tb.createTopic(b, "t", int32(n))
			for _, l := range tp.parts {
				appendOne(b, l)
			}
			req := fetchAll(tp, make([]int64, n), 1, time.Second)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp := tb.Handle(ctx, req)
				resp.Frame.Release()
			}
		})
	}
}

// BenchmarkFetchLongPollWake is a caught-up consumer's long poll over n
// partitions woken by an append to the last one: wake-µs is the time from
// the append's start to the fetch's answer.
func BenchmarkFetchLongPollWake(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			tb := startTestBroker(b, Config{})
			tp := tb.createTopic(b, "t", int32(n))
			offsets := make([]int64, n)
			last := tp.parts[n-1]
			ctx := context.Background()
			var total time.Duration
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				offsets[n-1] = last.HighWatermark()
				req := fetchAll(tp, offsets, 1, 10*time.Second)
				done := make(chan time.Time, 1)
				go func() {
					resp := tb.Handle(ctx, req)
					done <- time.Now()
					resp.Frame.Release()
				}()
				time.Sleep(time.Millisecond) // let it reach its wait
				start := time.Now()
				appendOne(b, last)
				total += (<-done).Sub(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "wake-µs")
		})
	}
}

// BenchmarkProduce is an acks=1 produce of one small batch to each of n
// partitions: allocations per request.
func BenchmarkProduce(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			tb := startTestBroker(b, Config{})
			tb.createTopic(b, "t", int32(n))
			req := kmsg.NewPtrProduceRequest()
			req.Version = 9
			req.Acks = 1
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "t"
			records := batch.Build(batch.BuildOptions{Records: 1, ValueSize: 100, ProducerID: -1})
			for p := range n {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition = int32(p)
				rp.Records = records
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			creq := &server.Request{Key: 0, Version: 9, Body: req}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tb.Handle(ctx, creq)
			}
		})
	}
}
