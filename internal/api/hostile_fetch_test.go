package api

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// fetchRequest is a v12 Fetch (topic names, flexible) of partition 0 of
// topic, named copies times, from offset 0.
func fetchRequest(topic string, copies int, minBytes int32, maxWait time.Duration) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(maxWait / time.Millisecond)
	req.MinBytes = minBytes
	req.MaxBytes = 50 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = make([]kmsg.FetchRequestTopicPartition, copies)
	for i := range rt.Partitions {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions[i] = rp
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestHostileFetchRepeatsOnePartition70000Times: a long poll naming one
// partition 70,000 times used to build one select case per entry and panic
// in reflect.Select (more than 65,536 cases), closing the connection. Kafka
// keys a fetch's partitions by topic-partition (the later entry wins), so
// the answer names the partition once, after the long poll.
func TestHostileFetchRepeatsOnePartition70000Times(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	start := time.Now()
	r, err := c.roundTrip(fetchRequest("t", 70000, 1, 300*time.Millisecond), 10*time.Second)
	if err != nil {
		t.Fatalf("fetch: %v (the broker closed the connection?)", err)
	}
	took := time.Since(start)
	resp := r.(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("want one topic with one partition, got %d topics, %d partitions", len(resp.Topics), len(resp.Topics[0].Partitions))
	}
	if p := resp.Topics[0].Partitions[0]; p.Partition != 0 || p.ErrorCode != 0 || p.HighWatermark != 0 {
		t.Fatalf("partition answer %+v", p)
	}
	if took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answered after %v, want the 300ms long poll", took)
	}
}

// TestHostileFetchDuplicatesBuildNoResponse: a 33 MB Fetch naming one
// partition a million times must not build (or read, or send) a million
// answers. The request's own decoding (the frame and kmsg's structs) is the
// server's: it is measured on the same request made an incremental fetch
// of a session that does not exist, which the handler refuses at once,
// and the handler may add little to it.
func TestHostileFetchDuplicatesBuildNoResponse(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	const copies = 1_000_000
	roundTrip := func(sessionID int32) (allocated uint64, response int) {
		req := fetchRequest("t", copies, 0, 0)
		req.SessionID = sessionID
		if sessionID != 0 {
			req.SessionEpoch = 1 // incremental: FETCH_SESSION_ID_NOT_FOUND at once
		}
		allocated, body := allocatedByRoundTrip(t, c, req)
		return allocated, len(body)
	}
	decoding, _ := roundTrip(7)
	allocated, response := roundTrip(0)
	t.Logf("request of %d partitions: decoding allocates %d MB, the whole round trip %d MB; response %d bytes", copies, decoding>>20, allocated>>20, response)
	if response > 1000 {
		t.Errorf("response is %d bytes: the duplicates were answered", response)
	}
	if limit := decoding + 16<<20; allocated > limit {
		t.Errorf("the round trip allocated %d MB, decoding alone %d MB: the handler added more than 16 MB", allocated>>20, decoding>>20)
	}
}

// TestHostileFetchOfAMillionMissingPartitions: a 33 MB Fetch naming a
// million distinct partitions that do not exist is answered, each with
// UNKNOWN_TOPIC_OR_PARTITION as Kafka does, but at the cost of its answer
// (about 35 bytes each), not of a read per partition: the handler allocates
// less than twice what decoding the request does (it used to be four times).
func TestHostileFetchOfAMillionMissingPartitions(t *testing.T) {
	// Above the default MaxPartitionsPerRequest, to see the cost per
	// missing partition at scale.
	tb := startTestBroker(t, Config{MaxPartitionsPerRequest: 2_000_000})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	const partitions = 1_000_000
	roundTrip := func(sessionID int32) (allocated uint64, response []byte) {
		req := fetchRequest("t", partitions, 0, 0)
		for i := range req.Topics[0].Partitions {
			req.Topics[0].Partitions[i].Partition = int32(i + 1) // t has only partition 0
		}
		req.SessionID = sessionID
		if sessionID != 0 {
			req.SessionEpoch = 1 // incremental: FETCH_SESSION_ID_NOT_FOUND at once
		}
		return allocatedByRoundTrip(t, c, req)
	}
	decoding, _ := roundTrip(7)
	allocated, body := roundTrip(0)
	t.Logf("decoding allocates %d MB, the whole round trip %d MB (the answer, read by this test: %d MB)", decoding>>20, allocated>>20, len(body)>>20)
	resp := kmsg.FetchResponse{Version: 12}
	if err := resp.ReadFrom(body[1:]); err != nil { // body[0]: header tags
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != partitions {
		t.Fatalf("want %d answers, got %d topics", partitions, len(resp.Topics))
	}
	if p := resp.Topics[0].Partitions[partitions-1]; p.Partition != partitions || p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("last answer %+v", p)
	}
	if extra := allocated - decoding; extra > 2*decoding {
		t.Errorf("the handler allocated %d MB beyond decoding's %d MB", extra>>20, decoding>>20)
	}
}

// TestHostileFetchMaxWaitIsCapped: a fetch asking to wait 24 days is
// answered after Config.MaxFetchWait.
func TestHostileFetchMaxWaitIsCapped(t *testing.T) {
	tb := startTestBroker(t, Config{MaxFetchWait: 300 * time.Millisecond})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	start := time.Now()
	req := fetchRequest("t", 1, 1, 0)
	req.MaxWaitMillis = 1<<31 - 1
	if _, err := c.roundTrip(req, 10*time.Second); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("answered after %v, want about 300ms", took)
	}
}

// wakersLeft is the number of Wakers registered with tp's logs.
func wakersLeft(tp *topic) int {
	n := 0
	for _, l := range tp.parts {
		n += l.Wakers()
	}
	return n
}

// waitRegistered waits (5 s at most) until a long poll has registered with
// every partition of tp.
func waitRegistered(t *testing.T, tp *topic) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); wakersLeft(tp) < len(tp.parts); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the long poll registered with %d of %d partitions", wakersLeft(tp), len(tp.parts))
		}
	}
}

// TestFetchLongPollOverManyPartitions: a caught-up consumer long-polling
// 2,000 partitions is woken by an append to the last one, answers with that
// partition's batch, and leaves no registration behind; so do a long poll
// that times out and one whose context ends (its client went away).
func TestFetchLongPollOverManyPartitions(t *testing.T) {
	tb := startTestBroker(t, Config{})
	const n = 2000
	tp := tb.createTopic(t, "t", n)
	ctx := context.Background()

	done := make(chan server.Response, 1)
	go func() { done <- tb.Handle(ctx, fetchAll(tp, make([]int64, n), 1, 10*time.Second)) }()
	waitRegistered(t, tp) // registered with every partition: waiting
	start := time.Now()
	appendOne(t, tp.parts[n-1])
	var resp server.Response
	select {
	case resp = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the append did not wake the long poll")
	}
	t.Logf("woken %v after the append started", time.Since(start))
	if got := resp.Frame.Len(); got < 100 {
		t.Fatalf("answer of %d bytes has no batch", got)
	}
	resp.Frame.Release()
	if left := wakersLeft(tp); left != 0 {
		t.Fatalf("%d registrations left after the answer", left)
	}

	// Timed out.
	offsets := make([]int64, n)
	offsets[n-1] = 1
	resp = tb.Handle(ctx, fetchAll(tp, offsets, 1, 50*time.Millisecond))
	resp.Frame.Release()
	if left := wakersLeft(tp); left != 0 {
		t.Fatalf("%d registrations left after a timed-out long poll", left)
	}

	// Context ended.
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- tb.Handle(cctx, fetchAll(tp, offsets, 1, 30*time.Second)) }()
	waitRegistered(t, tp)
	cancel()
	select {
	case resp = <-done:
		resp.Frame.Release()
	case <-time.After(2 * time.Second):
		t.Fatal("the long poll outlived its context")
	}
	if left := wakersLeft(tp); left != 0 {
		t.Fatalf("%d registrations left after the context ended", left)
	}
}

// allocatedByRoundTrip sends req and reads its answer, returning the bytes
// this process allocated meanwhile (the broker's handling and the
// test's read of the answer; the request is encoded before counting).
func allocatedByRoundTrip(t *testing.T, c *rawConn, req *kmsg.FetchRequest) (allocated uint64, body []byte) {
	t.Helper()
	c.corr++
	frame := encodeRequest(req, c.corr)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c.sendFrame(frame)
	_, body, err := c.readFrame(20 * time.Second)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, body
}
