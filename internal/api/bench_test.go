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

// TestFetchAllocations: a sessionless Fetch that finds data at once (the
// raw consumer's, `sushka bench consume --engine raw`) allocates only its
// partitions' reads once its pooled state is recycled, as the server
// recycles it after the write (issue 12): the floor is one allocation per
// partition answered with records (plog's ReadResult.Chunks); the request
// decoding and the server's per-request objects are not counted here.
func TestFetchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("pooled: the race detector drops pool items at random")
	}
	for _, n := range []int{1, 16} {
		tb := startTestBroker(t, Config{})
		tp := tb.createTopic(t, fmt.Sprintf("t%d", n), int32(n))
		for _, l := range tp.parts {
			appendVisible(t, l)
		}
		req := fetchAll(tp, make([]int64, n), 1, time.Second)
		ctx := context.Background()
		allocs := testing.AllocsPerRun(200, func() {
			resp := tb.Handle(ctx, req)
			if resp.Frame == nil || resp.Frame.Len() < int64(n)*100 {
				t.Fatalf("fetch of %d partitions answered %+v", n, resp)
			}
			resp.Frame.Release()
		})
		if floor := float64(n); allocs > floor {
			t.Errorf("%d partitions: a Fetch allocates %.1f times, the floor is %.0f", n, allocs, floor)
		}
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
				if resp := tb.Handle(ctx, creq); resp.Recycle != nil {
					resp.Recycle.Recycle() // as the server does once it is written
				}
			}
		})
	}
}

// txnLog fills l with transactions of recordsPerTxn records (one batch of
// 100-byte values each, producers in turn), every tenth aborted, the rest
// committed, and returns the base offsets of its data batches.
func txnLog(tb testing.TB, l *plog.Log, transactions, recordsPerTxn int) []int64 {
	var bases []int64
	for i := range transactions {
		pid := int64(1 + i%8)
		b := batch.Build(batch.BuildOptions{Records: recordsPerTxn, ValueSize: 100, ProducerID: pid, ProducerEpoch: 0,
			BaseSequence: int32(i / 8 * recordsPerTxn), Attributes: batch.AttrTransactional})
		res, err := l.Append(b, plog.AckForced)
		if err != nil {
			tb.Fatal(err)
		}
		bases = append(bases, res.BaseOffset)
		if _, err := l.WriteTxnMarker(context.Background(), plog.TxnMarker{ProducerID: pid, Commit: i%10 != 9}); err != nil {
			tb.Fatal(err)
		}
	}
	return bases
}

// isolationRequests are Fetches of tp's partition 0 at each isolation level
// (index 0 read_uncommitted, 1 read_committed) from 64 offsets spread over
// bases.
func isolationRequests(tp *topic, bases []int64) (reqs [2][]*server.Request) {
	for level := range reqs {
		for i := 0; i < len(bases); i += max(len(bases)/64, 1) {
			req := fetchAll(tp, []int64{bases[i]}, 1, time.Second)
			req.Body.(*kmsg.FetchRequest).IsolationLevel = int8(level)
			reqs[level] = append(reqs[level], req)
		}
	}
	return reqs
}

// BenchmarkFetchIsolation compares a read_committed fetch with a
// read_uncommitted one over the same log of 100-record transactions (every
// tenth aborted): the broker's cost per Fetch (Handle, response framed,
// record bytes left as file pieces: what sendfile then sends is the same
// for both), from offsets spread over the log. In "interleaved" the two
// alternate within one loop (A B B A ...), so a machine shared with other
// work slows both alike: committed-ns and uncommitted-ns are each one's
// mean, ratio their quotient. The other two run one level alone, for
// instruction counts (callgrind, two run lengths).
func BenchmarkFetchIsolation(b *testing.B) {
	tb := startTestBroker(b, Config{})
	tp := tb.createTopic(b, "t", 1)
	reqs := isolationRequests(tp, txnLog(b, tp.parts[0], 400, 100))
	ctx := context.Background()
	b.Run("interleaved", func(b *testing.B) {
		var took [2]time.Duration
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for k := range reqs {
				level := (i + k) % 2 // each goes first every other time: the second reads warmer caches
				start := time.Now()
				resp := tb.Handle(ctx, reqs[level][i%len(reqs[level])])
				took[level] += time.Since(start)
				resp.Frame.Release()
			}
		}
		b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "uncommitted-ns")
		b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "committed-ns")
		b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
	})
	for level, name := range []string{"read_uncommitted", "read_committed"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				resp := tb.Handle(ctx, reqs[level][i%len(reqs[level])])
				resp.Frame.Release()
			}
		})
	}
}

// TestReadCommittedFetchStaysZeroCopy: a read_committed Fetch's records
// are file pieces (sendfile), never bytes copied into the response, and it
// allocates no more than read_uncommitted (the aborted transactions of the
// answer come from a pool, back at the response's Release).
func TestReadCommittedFetchStaysZeroCopy(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 1)
	reqs := isolationRequests(tp, txnLog(t, tp.parts[0], 40, 100))
	ctx := context.Background()
	resp := tb.Handle(ctx, reqs[1][0])
	var fileBytes, copied int64
	for _, p := range resp.Frame.Pieces {
		if p.File != nil {
			fileBytes += p.Len
		} else {
			copied += int64(len(p.Bytes))
		}
	}
	resp.Frame.Release()
	if fileBytes < 100_000 || copied > 1000 {
		t.Fatalf("read_committed answer: %d bytes from files, %d bytes in memory; want the records as file pieces", fileBytes, copied)
	}
	if raceEnabled {
		return // pooled: the race detector drops pool items at random
	}
	var allocs [2]float64
	for level := range reqs {
		allocs[level] = testing.AllocsPerRun(50, func() {
			resp := tb.Handle(ctx, reqs[level][0])
			resp.Frame.Release()
		})
	}
	t.Logf("allocations per fetch: read_uncommitted %.0f, read_committed %.0f", allocs[0], allocs[1])
	if allocs[1] > allocs[0] {
		t.Fatalf("read_committed allocates %.0f per fetch, read_uncommitted %.0f", allocs[1], allocs[0])
	}
}

// BenchmarkFetchIsolationSocket is BenchmarkFetchIsolation/interleaved end
// to end: each Fetch goes through the server over loopback TCP, its records
// sent with sendfile, and the client reads the whole response frame
// (without decoding it): the cost a consumer's fetch puts on the machine.
func BenchmarkFetchIsolationSocket(b *testing.B) {
	tb := startTestBroker(b, Config{})
	tp := tb.createTopic(b, "t", 1)
	reqs := isolationRequests(tp, txnLog(b, tp.parts[0], 400, 100))
	c := dialRaw(b, tb.addr)
	frames := [2][][]byte{}
	for level := range reqs {
		for _, r := range reqs[level] {
			frames[level] = append(frames[level], encodeRequest(r.Body.(*kmsg.FetchRequest), 1))
		}
	}
	var took [2]time.Duration
	var bytesRead [2]int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range frames {
			level := (i + k) % 2
			start := time.Now()
			c.sendFrame(frames[level][i%len(frames[level])])
			_, body, err := c.readFrame(10 * time.Second)
			if err != nil {
				b.Fatal(err)
			}
			took[level] += time.Since(start)
			bytesRead[level] += int64(len(body))
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "uncommitted-ns")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "committed-ns")
	b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
	b.ReportMetric(float64(bytesRead[1])/float64(bytesRead[0]), "bytes-ratio")
}

// TestProduceAllocations: an acks=1 and an acks=all Produce of one batch
// (the raw generator's request: one topic, one partition) allocates
// nothing of its own once its pooled state is recycled as the server
// recycles it after the write (issue 12); the floor covers what remains:
// the log's wait for the writer (none) and a slice per topic beyond the
// first (none here).
func TestProduceAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("pooled: the race detector drops pool items at random")
	}
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	records := batch.Build(batch.BuildOptions{Records: 10, ValueSize: 100, ProducerID: -1})
	ctx := context.Background()
	for _, acks := range []int16{1, -1} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks = 9, acks
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		creq := &server.Request{Key: 0, Version: 9, Body: req}
		const floor = 0
		allocs := testing.AllocsPerRun(200, func() {
			resp := tb.Handle(ctx, creq)
			if p := resp.Body.(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 {
				t.Fatalf("produce failed: error %d", p.ErrorCode)
			}
			if resp.Recycle != nil {
				resp.Recycle.Recycle()
			}
		})
		if allocs > floor {
			t.Errorf("acks=%d: a Produce allocates %.1f times, the floor is %d", acks, allocs, floor)
		}
	}
}
