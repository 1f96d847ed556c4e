package api

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// TestHostileProduceRepeatsOnePartition: a produce naming a partition twice
// appends neither batch and answers the partition once, INVALID_REQUEST;
// the other partitions of the request are appended. Named 200,000 times,
// the partition still gets one small answer.
func TestHostileProduceRepeatsOnePartition(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	produce := func(copies int) *kmsg.ProduceResponse {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Version = 9
		req.Acks = -1 // answered once durable, so visible (acks=1 is visible one fsync later)
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		for i := 0; i < copies; i++ {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = batch.Build(batch.BuildOptions{Records: 1, ValueSize: 10, ProducerID: -1})
			rt.Partitions = append(rt.Partitions, rp)
		}
		other := kmsg.NewProduceRequestTopicPartition()
		other.Partition = 1
		other.Records = batch.Build(batch.BuildOptions{Records: 1, ValueSize: 10, ProducerID: -1})
		rt.Partitions = append(rt.Partitions, other)
		req.Topics = append(req.Topics, rt)
		r, err := c.roundTrip(req, 20*time.Second)
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
		return r.(*kmsg.ProduceResponse)
	}
	for _, copies := range []int{2, 200_000} {
		resp := produce(copies)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("%d copies: want one topic with two answers, got %d topics, %d answers", copies, len(resp.Topics), len(resp.Topics[0].Partitions))
		}
		p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if p0.Partition != 0 || p0.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("%d copies: repeated partition answered %d (%v), want INVALID_REQUEST", copies, p0.ErrorCode, kerr.ErrorForCode(p0.ErrorCode))
		}
		if p1.Partition != 1 || p1.ErrorCode != 0 {
			t.Errorf("%d copies: the other partition answered %d", copies, p1.ErrorCode)
		}
	}
	if hw := tp.parts[0].HighWatermark(); hw != 0 {
		t.Errorf("the repeated partition holds %d records, want none", hw)
	}
	if hw := tp.parts[1].HighWatermark(); hw != 2 {
		t.Errorf("the other partition holds %d records, want 2", hw)
	}
}

// TestHostileListOffsetsRepeatsOnePartition: ListOffsets by timestamp over
// a gzip batch decompresses it; a request naming the partition 100,000
// times used to do it 100,000 times in a row. Kafka answers a repeated
// partition INVALID_REQUEST; we answer it once, at once, and the other
// partition normally.
func TestHostileListOffsetsRepeatsOnePartition(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	gz := batch.Build(batch.BuildOptions{Records: 500, ValueSize: 200, Codec: batch.CodecGzip, ProducerID: -1, BaseTimestamp: 1000, TimestampStep: 1})
	for _, l := range tp.parts {
		if _, err := l.Append(gz, plog.AckWritten); err != nil {
			t.Fatal(err)
		}
	}
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	for i := 0; i < 100_000; i++ {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = 1250
		rt.Partitions = append(rt.Partitions, rp)
	}
	other := kmsg.NewListOffsetsRequestTopicPartition()
	other.Partition, other.Timestamp = 1, 1250
	rt.Partitions = append(rt.Partitions, other)
	req.Topics = append(req.Topics, rt)
	start := time.Now()
	r, err := c.roundTrip(req, 10*time.Second)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	t.Logf("answered in %v", time.Since(start))
	resp := r.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		t.Fatalf("want one topic with two answers, got %d topics, %d answers", len(resp.Topics), len(resp.Topics[0].Partitions))
	}
	p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
	if p0.Partition != 0 || p0.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("repeated partition answered %d, want INVALID_REQUEST", p0.ErrorCode)
	}
	if p1.Partition != 1 || p1.ErrorCode != 0 || p1.Offset != 250 {
		t.Errorf("the other partition answered %+v, want offset 250", p1)
	}
}

// TestListOffsetsStopsWithItsContext: a lookup by timestamp may decompress
// a batch per partition; once the request's context has ended (the client
// went away) the handler looks nothing up and closes.
func TestListOffsetsStopsWithItsContext(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 50)
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	for p := range tp.parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = int32(p), 0
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	creq := &server.Request{Key: 2, Version: 7, Body: req}

	if resp := tb.Handle(context.Background(), creq); resp.None || len(resp.Body.(*kmsg.ListOffsetsResponse).Topics[0].Partitions) != 50 {
		t.Fatalf("live request: %+v", resp)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if resp := tb.Handle(ctx, creq); !resp.None || !resp.Close {
		t.Fatalf("request whose client is gone was answered: %+v", resp)
	}
}
