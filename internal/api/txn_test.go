package api

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
)

// testVerifier is a transaction coordinator as Produce sees it: it answers
// refuse[partition] (0 when absent) and remembers what it was asked.
type testVerifier struct {
	mu     sync.Mutex
	refuse map[int32]int16
	calls  []verifyCall
}

type verifyCall struct {
	transactionalID string
	producerID      int64
	epoch           int16
	topic           string
	partition       int32
	implicitAdd     bool
}

func (v *testVerifier) VerifyPartition(_ context.Context, transactionalID string, producerID int64, epoch int16, topic string, partition int32, implicitAdd bool) int16 {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, verifyCall{transactionalID, producerID, epoch, topic, partition, implicitAdd})
	return v.refuse[partition]
}

func txnBatch(n int, pid int64, epoch int16, seq int32) []byte {
	return batch.Build(batch.BuildOptions{Records: n, ValueSize: 32, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
		BaseTimestamp: time.Now().UnixMilli(), Attributes: batch.AttrTransactional})
}

// produceTo sends one batch to partition 0 of topic and returns its answer.
func produceTo(t *testing.T, c *rawConn, version int16, transactionalID *string, topic string, partition int32, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = version, -1, 5000, transactionalID
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := c.roundTrip(req, 10*time.Second)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// fetchIsolated fetches partition 0 of topic from offset at isolation level.
func fetchIsolated(t *testing.T, c *rawConn, topic string, offset int64, isolation int8, minBytes int32, maxWait time.Duration) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := fetchRequest(topic, 1, minBytes, maxWait)
	req.IsolationLevel = isolation
	req.Topics[0].Partitions[0].FetchOffset = offset
	resp, err := c.roundTrip(req, 30*time.Second)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

// batchOffsets lists the [base, last] offsets of the batches in records.
func batchOffsets(records []byte) [][2]int64 {
	var out [][2]int64
	for len(records) >= batch.HeaderSize {
		h, _ := batch.ParseHeader(records)
		out = append(out, [2]int64{h.BaseOffset, h.LastOffset()})
		records = records[h.Size():]
	}
	return out
}

func TestTxnProduceVerifiedThenReadCommitted(t *testing.T) {
	v := &testVerifier{refuse: map[int32]int16{1: kerr.InvalidTxnState.Code}}
	tb := startTestBroker(t, Config{TxnVerifier: v})
	tp := tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	tx := ptr("tx-1")

	if sp := produceTo(t, c, 9, nil, "t", 0, mkPlain(3)); sp.ErrorCode != 0 || sp.BaseOffset != 0 { // 0-2
		t.Fatalf("plain produce: %+v", sp)
	}
	if sp := produceTo(t, c, 9, tx, "t", 0, txnBatch(2, 7, 1, 0)); sp.ErrorCode != 0 || sp.BaseOffset != 3 { // 3-4
		t.Fatalf("transactional produce v9: %+v", sp)
	}
	if sp := produceTo(t, c, 12, tx, "t", 0, txnBatch(1, 7, 1, 2)); sp.ErrorCode != 0 || sp.BaseOffset != 5 { // 5
		t.Fatalf("transactional produce v12: %+v", sp)
	}
	want := []verifyCall{{"tx-1", 7, 1, "t", 0, false}, {"tx-1", 7, 1, "t", 0, true}}
	if !slices.Equal(v.calls, want) {
		t.Fatalf("verifier asked %+v, want %+v", v.calls, want)
	}
	// The coordinator says the partition is not in the transaction:
	// nothing of it is appended.
	if sp := produceTo(t, c, 9, tx, "t", 1, txnBatch(1, 7, 1, 0)); sp.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("unverified partition answered %+v, want INVALID_TXN_STATE", sp)
	}
	if hw := tp.parts[1].HighWatermark(); hw != 0 {
		t.Fatalf("refused transactional batch appended: high watermark %d", hw)
	}

	// read_committed stops at the LSO (3) and is told it; read_uncommitted
	// reads on, told the LSO too, with null aborted transactions.
	p := fetchIsolated(t, c, "t", 0, 1, 1, 0)
	if p.ErrorCode != 0 || p.HighWatermark != 6 || p.LastStableOffset != 3 || !slices.Equal(batchOffsets(p.RecordBatches), [][2]int64{{0, 2}}) {
		t.Fatalf("read_committed before the marker: hw %d lso %d batches %v", p.HighWatermark, p.LastStableOffset, batchOffsets(p.RecordBatches))
	}
	if p := fetchIsolated(t, c, "t", 3, 1, 0, 0); len(p.RecordBatches) != 0 || p.ErrorCode != 0 {
		t.Fatalf("read_committed at the LSO returned %v (error %d)", batchOffsets(p.RecordBatches), p.ErrorCode)
	}
	p = fetchIsolated(t, c, "t", 0, 0, 1, 0)
	if p.LastStableOffset != 3 || p.AbortedTransactions != nil || len(batchOffsets(p.RecordBatches)) != 3 {
		t.Fatalf("read_uncommitted: lso %d aborted %v batches %v", p.LastStableOffset, p.AbortedTransactions, batchOffsets(p.RecordBatches))
	}

	// The coordinator aborts: the marker is durable when WriteTxnMarker
	// answers, and read_committed gets the aborted transaction.
	if code := tb.WriteTxnMarker(context.Background(), "t", 0, plog.TxnMarker{ProducerID: 7, ProducerEpoch: 1, CoordinatorEpoch: 0}); code != 0 {
		t.Fatalf("abort marker: %v", kerr.ErrorForCode(code))
	}
	p = fetchIsolated(t, c, "t", 0, 1, 1, 0)
	if p.HighWatermark != 7 || p.LastStableOffset != 7 || len(batchOffsets(p.RecordBatches)) != 4 {
		t.Fatalf("read_committed after the abort: hw %d lso %d batches %v", p.HighWatermark, p.LastStableOffset, batchOffsets(p.RecordBatches))
	}
	if a := p.AbortedTransactions; len(a) != 1 || a[0].ProducerID != 7 || a[0].FirstOffset != 3 {
		t.Fatalf("aborted transactions %+v, want producer 7 from offset 3", a)
	}
	if code := tb.WriteTxnMarker(context.Background(), "t", 9, plog.TxnMarker{ProducerID: 7}); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("marker to a missing partition: %d", code)
	}
	if code := tb.WriteTxnMarker(context.Background(), "t", 0, plog.TxnMarker{ProducerID: 7, ProducerEpoch: 0}); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("marker of an older epoch: %v", kerr.ErrorForCode(code))
	}

	// ListOffsets: latest is the HWM for read_uncommitted, the LSO for
	// read_committed; a new transaction holds the LSO back again.
	future := time.Now().Add(time.Hour).UnixMilli() // only the open transaction's batch is this late
	open := batch.Build(batch.BuildOptions{Records: 1, ValueSize: 32, ProducerID: 8, BaseTimestamp: future, Attributes: batch.AttrTransactional})
	if sp := produceTo(t, c, 9, tx, "t", 0, open); sp.ErrorCode != 0 || sp.BaseOffset != 7 {
		t.Fatalf("second transaction: %+v", sp)
	}
	for _, tc := range []struct {
		isolation int8
		timestamp int64
		want      int64
	}{{0, -1, 8}, {1, -1, 7}, {0, 0, 0}, {1, 0, 0}, {0, future, 7}, {1, future, -1}, {0, -3, 7}, {1, -3, -1}} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.IsolationLevel, req.ReplicaID = 5, tc.isolation, -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = tc.timestamp
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := c.roundTrip(req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset; got != tc.want {
			t.Errorf("ListOffsets isolation %d timestamp %d: %d, want %d", tc.isolation, tc.timestamp, got, tc.want)
		}
	}

	// DescribeProducers shows both producers, 8 with its transaction.
	dreq := kmsg.NewPtrDescribeProducersRequest()
	drt := kmsg.NewDescribeProducersRequestTopic()
	drt.Topic, drt.Partitions = "t", []int32{0, 0, 5}
	dreq.Topics = append(dreq.Topics, drt)
	resp, err := c.roundTrip(dreq, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	parts := resp.(*kmsg.DescribeProducersResponse).Topics[0].Partitions
	if len(parts) != 2 || parts[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("DescribeProducers partitions %+v", parts)
	}
	ps := parts[0].ActiveProducers
	if len(ps) != 2 || ps[0].ProducerID != 7 || ps[0].ProducerEpoch != 1 || ps[0].LastSequence != 2 || ps[0].CurrentTxnStartOffset != -1 || ps[0].CoordinatorEpoch != 0 ||
		ps[1].ProducerID != 8 || ps[1].CurrentTxnStartOffset != 7 || ps[1].CoordinatorEpoch != -1 || ps[1].LastSequence != 0 {
		t.Fatalf("active producers %+v", ps)
	}
}

// mkPlain is a batch of n records from a non-idempotent producer.
func mkPlain(n int) []byte {
	return batch.Build(batch.BuildOptions{Records: n, ValueSize: 32, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
}

// TestTxnReadCommittedLongPollWakesOnMarker: a read_committed consumer
// caught up to the LSO, with uncommitted data past it, waits (the data
// past the LSO is not for it) and is woken by the commit marker.
func TestTxnReadCommittedLongPollWakesOnMarker(t *testing.T) {
	tb := startTestBroker(t, Config{TxnVerifier: &testVerifier{}})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	if sp := produceTo(t, c, 9, ptr("tx"), "t", 0, txnBatch(5, 3, 0, 0)); sp.ErrorCode != 0 {
		t.Fatalf("produce: %+v", sp)
	}
	const delay = 300 * time.Millisecond
	go func() {
		time.Sleep(delay)
		tb.WriteTxnMarker(context.Background(), "t", 0, plog.TxnMarker{ProducerID: 3, Commit: true})
	}()
	start := time.Now()
	p := fetchIsolated(t, c, "t", 0, 1, 1, 20*time.Second)
	took := time.Since(start)
	if took < delay || took > 10*time.Second {
		t.Fatalf("long poll answered after %v, want when the marker is written (%v)", took, delay)
	}
	if p.LastStableOffset != 6 || len(batchOffsets(p.RecordBatches)) != 2 || len(p.AbortedTransactions) != 0 {
		t.Fatalf("after the commit: lso %d batches %v aborted %v", p.LastStableOffset, batchOffsets(p.RecordBatches), p.AbortedTransactions)
	}
}

// TestHostileControlBatchFromClient: markers are the coordinator's; a
// client sending a control batch (CRC valid) gets INVALID_RECORD, as from
// Kafka's LogValidator, and nothing is appended.
func TestHostileControlBatchFromClient(t *testing.T) {
	tb := startTestBroker(t, Config{TxnVerifier: &testVerifier{}})
	tp := tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	for _, tx := range []*string{nil, ptr("tx")} {
		sp := produceTo(t, c, 9, tx, "t", 0, batch.BuildControl(5, 0, true, 0, time.Now().UnixMilli()))
		if sp.ErrorCode != kerr.InvalidRecord.Code {
			t.Fatalf("control batch (transactional id %v) answered %v, want INVALID_RECORD", tx != nil, kerr.ErrorForCode(sp.ErrorCode))
		}
	}
	if hw := tp.parts[0].HighWatermark(); hw != 0 {
		t.Fatalf("control batch appended: high watermark %d", hw)
	}
}

// TestHostileTransactionalBatchWithoutTransactionalID: Kafka answers a
// transactional batch in a request without a transactional id
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (KafkaApis.handleProduceRequest);
// with the broker's own coordinator (internal/txn, Config.TxnVerifier
// nil), a transactional id it does not know is
// INVALID_PRODUCER_ID_MAPPING. Nothing is appended either way.
func TestHostileTransactionalBatchWithoutTransactionalID(t *testing.T) {
	v := &testVerifier{}
	tb := startTestBroker(t, Config{TxnVerifier: v})
	tp := tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	if sp := produceTo(t, c, 9, nil, "t", 0, txnBatch(1, 5, 0, 0)); sp.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("answered %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", kerr.ErrorForCode(sp.ErrorCode))
	}
	if len(v.calls) != 0 || tp.parts[0].HighWatermark() != 0 {
		t.Fatalf("verifier asked %d times, high watermark %d", len(v.calls), tp.parts[0].HighWatermark())
	}

	tb2 := startTestBroker(t, Config{})
	tp2 := tb2.createTopic(t, "t", 1)
	c2 := dialRaw(t, tb2.addr)
	if sp := produceTo(t, c2, 9, ptr("tx"), "t", 0, txnBatch(1, 5, 0, 0)); sp.ErrorCode != kerr.InvalidProducerIDMapping.Code {
		t.Fatalf("an id the coordinator does not know: %v, want INVALID_PRODUCER_ID_MAPPING", kerr.ErrorForCode(sp.ErrorCode))
	}
	if hw := tp2.parts[0].HighWatermark(); hw != 0 {
		t.Fatalf("appended for an unknown transactional id: high watermark %d", hw)
	}
}

// TestWriteTxnMarkersAnswersEachPartition: a WriteTxnMarkers (admin tools
// aborting a hanging transaction) is answered marker by marker, partition
// by partition, in the request's order, each partition with its own code.
func TestWriteTxnMarkersAnswersEachPartition(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	for _, m := range []struct {
		pid        int64
		commit     bool
		partitions []int32
	}{{5, true, []int32{0, 7}}, {6, false, []int32{1}}} {
		rm := kmsg.NewWriteTxnMarkersRequestMarker()
		rm.ProducerID, rm.Committed = m.pid, m.commit
		rm.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "t", Partitions: m.partitions}}
		req.Markers = append(req.Markers, rm)
	}
	resp, err := c.roundTrip(req, 10*time.Second)
	if err != nil {
		t.Fatalf("WriteTxnMarkers: %v", err)
	}
	var got []string
	for _, m := range resp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range m.Topics {
			for _, p := range rt.Partitions {
				got = append(got, fmt.Sprintf("%d %s/%d %d", m.ProducerID, rt.Topic, p.Partition, p.ErrorCode))
			}
		}
	}
	want := []string{"5 t/0 0", fmt.Sprintf("5 t/7 %d", kerr.UnknownTopicOrPartition.Code), "6 t/1 0"}
	if !slices.Equal(got, want) {
		t.Fatalf("WriteTxnMarkers answered %q, want %q", got, want)
	}
	if hw := tp.parts[0].HighWatermark(); hw != 1 {
		t.Fatalf("t/0 high watermark %d after its commit marker, want 1", hw)
	}
}
