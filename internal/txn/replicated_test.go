package txn

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/coordloop/replicatest"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// dataPartitions are the user partitions t/0 and t/1 the transactions
// write to: real plog logs (one copy, not the subject here), whose markers
// every node's coordinator writes through markerLogs. A node's writer may
// be held (its markers wait until the coordinator gives up: a node about
// to fail).
type dataPartitions struct {
	logs    map[TopicPartition]*plog.Log
	started chan uint64 // a node began writing a marker (buffered)
	mu      sync.Mutex
	held    map[uint64]bool
}

func newDataPartitions(t *testing.T) *dataPartitions {
	fs := vfs.NewMem()
	d := &dataPartitions{logs: map[TopicPartition]*plog.Log{}, started: make(chan uint64, 64), held: map[uint64]bool{}}
	for p := range int32(2) {
		cfg := plog.DefaultConfig(fs, fmt.Sprintf("/data/t-%d", p))
		cfg.Logger = replicatest.Quiet
		l, err := plog.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		d.logs[TopicPartition{"t", p}] = l
	}
	return d
}

// markerLogs is node's MarkerWriter over the data partitions.
type markerLogs struct {
	d    *dataPartitions
	node uint64
}

func (m markerLogs) WriteTxnMarker(ctx context.Context, topic string, partition int32, marker plog.TxnMarker) int16 {
	m.d.started <- m.node
	m.d.mu.Lock()
	held := m.d.held[m.node]
	m.d.mu.Unlock()
	if held {
		<-ctx.Done()
		return kerr.RequestTimedOut.Code
	}
	l := m.d.logs[TopicPartition{topic, partition}]
	if l == nil {
		return kerr.UnknownTopicOrPartition.Code
	}
	if _, err := l.WriteTxnMarker(ctx, marker); err != nil {
		return kerr.UnknownServerError.Code
	}
	return 0
}

// produce appends one transactional batch of pid/epoch to t/p.
func (d *dataPartitions) produce(t *testing.T, p int32, pid int64, epoch int16, seq int32) {
	t.Helper()
	b := batch.Build(batch.BuildOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, ValueSize: 8,
		BaseTimestamp: time.Now().UnixMilli(), Attributes: batch.AttrTransactional})
	if _, err := d.logs[TopicPartition{"t", p}].Append(b, plog.AckForced); err != nil {
		t.Fatal(err)
	}
}

// TestPreparedAndOngoingTransactionsAfterFailover: on node 1, leader of
// __transaction_state, one transaction is ended (PrepareCommit durable
// through raft, its marker held) and another is ongoing when node 1's
// node stops. Node 2, elected, loads the partition from its replica and
// does what Kafka's coordinator does on load: the prepared transaction's
// marker is written and it completes (CompleteCommit, t/0 stable past its
// batch); the ongoing one is still Ongoing with its partition and its
// producer commits it there. The EndTxn waiting on node 1 is answered
// with an error, never success. Fails with LoadPartition not resuming the
// prepared ends (the transaction stays PrepareCommit).
func TestPreparedAndOngoingTransactionsAfterFailover(t *testing.T) {
	c := replicatest.New(t, 3, 1, StateTopic)
	data := newDataPartitions(t)
	data.held[1] = true
	var pids atomic.Int64 // the cluster's producer id allocator
	services := make([]*Service, 3)
	for id := uint64(1); id <= 3; id++ {
		s, err := Start(ServiceConfig{Logger: replicatest.Quiet, Markers: markerLogs{data, id}, Replicated: c.Replicated(id),
			Coordinator: Config{NodeID: int32(id - 1), NewProducerID: func() (int64, error) { return pids.Add(1), nil }}})
		if err != nil {
			t.Fatal(err)
		}
		c.OnLeader(id, s.LeaderChanged)
		services[id-1] = s
		t.Cleanup(func() { s.Close() })
	}
	do := func(id uint64, req kmsg.Request) kmsg.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := services[id-1].Do(ctx, req)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		return resp
	}
	// initOn waits until node id serves txID and inits it.
	initOn := func(id uint64, txID string) (int64, int16) {
		t.Helper()
		var ir *kmsg.InitProducerIDResponse
		c.TickUntil(300, fmt.Sprintf("node %d serving %s", id, txID), func() bool {
			init := kmsg.NewPtrInitProducerIDRequest()
			init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, &txID, 60000
			init.ProducerID, init.ProducerEpoch = -1, -1
			ir = do(id, init).(*kmsg.InitProducerIDResponse)
			return ir.ErrorCode != kerr.NotCoordinator.Code && ir.ErrorCode != kerr.CoordinatorLoadInProgress.Code
		})
		if ir.ErrorCode != 0 {
			t.Fatalf("InitProducerID %s on node %d: %v", txID, id, kerr.ErrorForCode(ir.ErrorCode))
		}
		return ir.ProducerID, ir.ProducerEpoch
	}
	addPartition := func(id uint64, txID string, pid int64, epoch int16, p int32) {
		t.Helper()
		add := kmsg.NewPtrAddPartitionsToTxnRequest()
		add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, txID, pid, epoch
		add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{p}}}
		r := do(id, add).(*kmsg.AddPartitionsToTxnResponse)
		if code := r.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("AddPartitionsToTxn %s: %v", txID, kerr.ErrorForCode(code))
		}
	}
	describe := func(id uint64, txID string) kmsg.DescribeTransactionsResponseTransactionState {
		t.Helper()
		d := kmsg.NewPtrDescribeTransactionsRequest()
		d.TransactionalIDs = []string{txID}
		return do(id, d).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]
	}
	endTxn := func(txID string, pid int64, epoch int16) *kmsg.EndTxnRequest {
		end := kmsg.NewPtrEndTxnRequest()
		end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 4, txID, pid, epoch, true
		return end
	}

	c.Elect(1, 0)
	prepPID, prepEpoch := initOn(1, "prepared")
	addPartition(1, "prepared", prepPID, prepEpoch, 0)
	data.produce(t, 0, prepPID, prepEpoch, 0)
	ongoingPID, ongoingEpoch := initOn(1, "ongoing")
	addPartition(1, "ongoing", ongoingPID, ongoingEpoch, 1)
	data.produce(t, 1, ongoingPID, ongoingEpoch, 0)

	heldEnd := make(chan *kmsg.EndTxnResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := services[0].Do(ctx, endTxn("prepared", prepPID, prepEpoch))
		if err != nil {
			heldEnd <- nil
			return
		}
		heldEnd <- resp.(*kmsg.EndTxnResponse)
	}()
	select {
	case <-data.started: // node 1 writes the marker: the PrepareCommit is committed
	case <-time.After(10 * time.Second):
		t.Fatal("node 1 never began the marker")
	}
	if lso, hwm := data.logs[TopicPartition{"t", 0}].LastStableOffset(), data.logs[TopicPartition{"t", 0}].HighWatermark(); lso >= hwm {
		t.Fatalf("t/0 stable at %d with its transaction open (high watermark %d)", lso, hwm)
	}

	c.Stop(1)
	select {
	case r := <-heldEnd:
		if r != nil && r.ErrorCode == 0 {
			t.Fatal("the EndTxn on the stopped node was answered success")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the EndTxn on node 1 not answered after its node stopped")
	}
	c.Elect(2, 0)
	var st kmsg.DescribeTransactionsResponseTransactionState
	c.TickUntil(300, "the prepared transaction completed on node 2", func() bool {
		st = describe(2, "prepared")
		return st.ErrorCode == 0 && st.State == "CompleteCommit"
	})
	if st.ProducerID != prepPID || st.ProducerEpoch != prepEpoch {
		t.Fatalf("completed as producer %d epoch %d, want %d %d", st.ProducerID, st.ProducerEpoch, prepPID, prepEpoch)
	}
	t0 := data.logs[TopicPartition{"t", 0}]
	if lso, hwm := t0.LastStableOffset(), t0.HighWatermark(); lso != hwm {
		t.Fatalf("t/0 stable at %d after the commit, high watermark %d", lso, hwm)
	}
	st = describe(2, "ongoing")
	if st.ErrorCode != 0 || st.State != "Ongoing" || st.ProducerID != ongoingPID || len(st.Topics) != 1 || st.Topics[0].Partitions[0] != 1 {
		t.Fatalf("the ongoing transaction on node 2: %+v", st)
	}
	if r := do(2, endTxn("ongoing", ongoingPID, ongoingEpoch)).(*kmsg.EndTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("EndTxn of the ongoing transaction on node 2: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	t1 := data.logs[TopicPartition{"t", 1}]
	if lso, hwm := t1.LastStableOffset(), t1.HighWatermark(); lso != hwm {
		t.Fatalf("t/1 stable at %d after the commit on node 2, high watermark %d", lso, hwm)
	}
	for _, follower := range []uint64{3} {
		if st := describe(follower, "ongoing"); st.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("node %d (a follower): %v, want NOT_COORDINATOR", follower, kerr.ErrorForCode(st.ErrorCode))
		}
	}
}
