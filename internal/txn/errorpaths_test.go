package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp/errresptest"
	"github.com/sushka-io/sushka/internal/kvlog"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// txnKeys are the request types internal/api routes to the transaction
// coordinator (its Handle switch).
var txnKeys = []int16{10, 22, 24, 25, 26, 65, 66}

// TestRequestTypeNotServedIsAnError hands the coordinator every request
// type it does not serve (errresptest.NotServedIsAnError): UNKNOWN_SERVER_ERROR
// in the request's shape or ErrUnsupported, never error code 0.
func TestRequestTypeNotServedIsAnError(t *testing.T) {
	s := startTxnService(t, vfs.NewMem(), newPartitionsSide())
	defer s.Close()
	errresptest.NotServedIsAnError(t, txnKeys, ErrUnsupported, func(req kmsg.Request) (kmsg.Response, error) {
		return s.Do(context.Background(), req)
	})
}

// TestBatchedAddPartitionsFailsEachTransactionOfAFailedPartition: a v4
// AddPartitionsToTxn names transactions of two __transaction_state
// partitions, and the append to one of them fails. Each transaction of the
// failed partition must be answered NOT_COORDINATOR, the others succeed;
// before, only the first transaction's partition was looked at, and a
// transaction whose records were lost was answered success.
func TestBatchedAddPartitionsFailsEachTransactionOfAFailedPartition(t *testing.T) {
	// Two ids in different partitions of a 2-partition __transaction_state.
	ids := []string{"a"}
	for i := 0; len(ids) < 2; i++ {
		if id := fmt.Sprintf("b%d", i); kvlog.PartitionFor(id, 2) != kvlog.PartitionFor("a", 2) {
			ids = append(ids, id)
		}
	}
	var failing atomic.Bool
	failDir := fmt.Sprintf("%s-%d", StateTopic, kvlog.PartitionFor(ids[1], 2))
	fs := vfs.NewErrorFS(vfs.NewMem(), vfs.WritesWhile(&failing, failDir))
	var pid int64
	s, err := Start(ServiceConfig{FS: fs, DataDir: "/data", Logger: slog.New(slog.DiscardHandler), Markers: newPartitionsSide(),
		Coordinator: Config{NodeID: 1, StatePartitions: 2, NewProducerID: func() (int64, error) { pid++; return pid, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version = 4
	for _, id := range ids {
		init := kmsg.NewPtrInitProducerIDRequest()
		init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, &id, 60000
		ir := doTxn[*kmsg.InitProducerIDResponse](t, s, init)
		if ir.ErrorCode != 0 {
			t.Fatalf("InitProducerID %s: %v", id, kerr.ErrorForCode(ir.ErrorCode))
		}
		rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
		rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch = id, ir.ProducerID, ir.ProducerEpoch
		rt.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: "t", Partitions: []int32{0}}}
		add.Transactions = append(add.Transactions, rt)
	}
	failing.Store(true)
	resp := doTxn[*kmsg.AddPartitionsToTxnResponse](t, s, add)
	if len(resp.Transactions) != 2 {
		t.Fatalf("%d transactions answered, want 2", len(resp.Transactions))
	}
	for i, want := range []int16{0, kerr.NotCoordinator.Code} {
		rt := resp.Transactions[i]
		if rt.TransactionalID != ids[i] || len(rt.Topics) != 1 || len(rt.Topics[0].Partitions) != 1 {
			t.Fatalf("transaction %d answered %+v", i, rt)
		}
		if got := rt.Topics[0].Partitions[0].ErrorCode; got != want {
			t.Errorf("%s (partition %d, failing: %v): %v, want %v", ids[i], kvlog.PartitionFor(ids[i], 2), i == 1, kerr.ErrorForCode(got), kerr.ErrorForCode(want))
		}
	}
}

// TestListTransactionsWhileAPartitionIsUnloaded: while a
// __transaction_state partition is unloaded after a storage error, its ids
// would be missing from ListTransactions, so the answer is
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's while a partition loads, not
// success without them; once it is back the id is listed again.
func TestListTransactionsWhileAPartitionIsUnloaded(t *testing.T) {
	var failing atomic.Bool
	fs := vfs.NewErrorFS(vfs.NewMem(), vfs.WritesWhile(&failing, ""))
	s := startTxnService(t, fs, newPartitionsSide())
	defer s.Close()
	beginTxn(t, s, "tx")
	list := func() *kmsg.ListTransactionsResponse {
		req := kmsg.NewPtrListTransactionsRequest()
		req.Version = 1
		req.DurationFilterMillis = -1
		return doTxn[*kmsg.ListTransactionsResponse](t, s, req)
	}
	if r := list(); r.ErrorCode != 0 || len(r.TransactionStates) != 1 {
		t.Fatalf("ListTransactions: %v, %d ids, want tx", kerr.ErrorForCode(r.ErrorCode), len(r.TransactionStates))
	}
	failing.Store(true)
	id := "tx"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, &id, 60000
	init.ProducerID, init.ProducerEpoch = -1, -1
	if code := doTxn[*kmsg.InitProducerIDResponse](t, s, init).ErrorCode; code != kerr.NotCoordinator.Code {
		t.Fatalf("InitProducerID on a failing disk: %v, want NOT_COORDINATOR", kerr.ErrorForCode(code))
	}
	if r := list(); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("ListTransactions with tx's partition unloaded: %v with %d ids, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(r.ErrorCode), len(r.TransactionStates))
	}
	failing.Store(false)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := list()
		if r.ErrorCode == 0 {
			if len(r.TransactionStates) != 1 || r.TransactionStates[0].TransactionalID != "tx" {
				t.Fatalf("ListTransactions after recovery: %+v, want tx", r.TransactionStates)
			}
			break
		}
		if r.ErrorCode != kerr.CoordinatorLoadInProgress.Code || time.Now().After(deadline) {
			t.Fatalf("ListTransactions after the disk came back: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
}

// slowToStop is a marker writer that holds every write until its context
// ends and then takes a while to return, as a partition log finishing the
// fsync of a marker already queued does.
type slowToStop struct {
	started  chan struct{}
	returned atomic.Int32
}

func (w *slowToStop) WriteTxnMarker(ctx context.Context, topic string, partition int32, m plog.TxnMarker) int16 {
	w.started <- struct{}{}
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond)
	w.returned.Add(1)
	return kerr.RequestTimedOut.Code
}

// TestCloseWaitsForMarkerJobs: Close cancels the marker jobs and returns
// only once they have (before, a job could still be writing into the
// partition logs the broker closes right after the coordinator, and report
// into a stopped loop).
func TestCloseWaitsForMarkerJobs(t *testing.T) {
	w := &slowToStop{started: make(chan struct{}, 8)}
	s := startTxnService(t, vfs.NewMem(), w)
	pid, epoch := beginTxn(t, s, "tx")
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 3, "tx", pid, epoch, true
	answered := make(chan error, 1)
	go func() {
		_, err := s.Do(context.Background(), end)
		answered <- err
	}()
	<-w.started // t/0 and t/1: up to two writes in flight
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := w.returned.Load(); n == 0 {
		t.Fatal("Close returned while its marker job was still writing")
	}
	if err := <-answered; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("EndTxn waiting at Close: %v", err)
	}
}
