package txn

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// partitionsSide is the partitions as the driver sees them: it records the
// markers written, and while hold is set it holds every marker write until
// its context ends (a broker that dies before the markers), or fails the
// partitions in failing.
type partitionsSide struct {
	mu      sync.Mutex
	hold    bool
	failing map[TopicPartition]bool
	written []string
	started chan struct{} // a write began (buffered)
}

func newPartitionsSide() *partitionsSide {
	return &partitionsSide{failing: map[TopicPartition]bool{}, started: make(chan struct{}, 64)}
}

func (p *partitionsSide) WriteTxnMarker(ctx context.Context, topic string, partition int32, m plog.TxnMarker) int16 {
	p.started <- struct{}{}
	p.mu.Lock()
	hold, fail := p.hold, p.failing[TopicPartition{topic, partition}]
	p.mu.Unlock()
	if hold {
		<-ctx.Done()
		return kerr.RequestTimedOut.Code
	}
	if fail {
		return kerr.KafkaStorageError.Code
	}
	kind := "abort"
	if m.Commit {
		kind = "commit"
	}
	p.mu.Lock()
	p.written = append(p.written, kind+" "+topic+"/"+string(rune('0'+partition)))
	p.mu.Unlock()
	return 0
}

func (p *partitionsSide) markers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.written...)
}

func startTxnService(t *testing.T, fs vfs.FS, markers MarkerWriter) *Service {
	t.Helper()
	var pid int64
	s, err := Start(ServiceConfig{FS: fs, DataDir: "/data", Logger: slog.New(slog.DiscardHandler), Markers: markers,
		Coordinator: Config{NodeID: 1, NewProducerID: func() (int64, error) { pid++; return pid, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func doTxn[R kmsg.Response](t *testing.T, s *Service, req kmsg.Request) R {
	t.Helper()
	resp, err := s.Do(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(R)
}

// beginTxn inits id and adds t/0 and t/1 to its transaction.
func beginTxn(t *testing.T, s *Service, id string) (int64, int16) {
	t.Helper()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, &id, 60000
	ir := doTxn[*kmsg.InitProducerIDResponse](t, s, init)
	if ir.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v", kerr.ErrorForCode(ir.ErrorCode))
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, id, ir.ProducerID, ir.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
	doTxn[*kmsg.AddPartitionsToTxnResponse](t, s, add)
	return ir.ProducerID, ir.ProducerEpoch
}

func describeTxn(t *testing.T, s *Service, id string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	d := kmsg.NewPtrDescribeTransactionsRequest()
	d.TransactionalIDs = []string{id}
	return doTxn[*kmsg.DescribeTransactionsResponse](t, s, d).TransactionStates[0]
}

// A crash after the PrepareCommit is durable and before any marker is
// written: the restarted coordinator finds the transaction prepared,
// writes its markers and completes it; a crash image of the filesystem
// (unsynced data lost) holds the prepare because it was fsynced before the
// markers began.
func TestRestartWritesMarkersOfPreparedTransaction(t *testing.T) {
	fs := vfs.NewMem()
	side := newPartitionsSide()
	side.hold = true
	s := startTxnService(t, fs, side)
	pid, epoch := beginTxn(t, s, "tx")
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 4, "tx", pid, epoch, true
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() { _, err := s.Do(ctx, end); answered <- err }()
	<-side.started // the markers are being written: the prepare is durable
	select {
	case err := <-answered:
		t.Fatalf("EndTxn answered before its markers were written: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	crashed := fs.Crash(rand.New(rand.NewPCG(1, 2)))
	cancel()
	s.Close()

	side2 := newPartitionsSide()
	s2 := startTxnService(t, crashed, side2)
	defer s2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for describeTxn(t, s2, "tx").State != "CompleteCommit" {
		if time.Now().After(deadline) {
			t.Fatalf("the prepared transaction did not complete after the restart: %+v (markers %v)", describeTxn(t, s2, "tx"), side2.markers())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := side2.markers(); len(got) != 2 || got[0] == got[1] {
		t.Fatalf("markers after the restart: %v, want a commit to t/0 and t/1", got)
	}
	for _, m := range side2.markers() {
		if m != "commit t/0" && m != "commit t/1" {
			t.Fatalf("marker %q, want commits", m)
		}
	}
}

// A marker that cannot be written (a partition's storage error) is tried
// again until it is; EndTxn answers only then.
func TestFailedMarkerIsRetried(t *testing.T) {
	side := newPartitionsSide()
	side.failing[TopicPartition{"t", 1}] = true
	s := startTxnService(t, vfs.NewMem(), side)
	defer s.Close()
	pid, epoch := beginTxn(t, s, "tx")
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 4, "tx", pid, epoch, false
	answered := make(chan *kmsg.EndTxnResponse, 1)
	go func() { answered <- doTxn[*kmsg.EndTxnResponse](t, s, end) }()
	time.Sleep(2 * markerRetryInterval)
	select {
	case r := <-answered:
		t.Fatalf("EndTxn answered while t/1 had no marker: %+v", r)
	default:
	}
	if st := describeTxn(t, s, "tx"); st.State != "PrepareAbort" {
		t.Fatalf("state while a marker fails: %s", st.State)
	}
	side.mu.Lock()
	side.failing = map[TopicPartition]bool{}
	side.mu.Unlock()
	select {
	case r := <-answered:
		if r.ErrorCode != 0 {
			t.Fatalf("EndTxn: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("EndTxn not answered after the partition recovered")
	}
	if got := side.markers(); len(got) != 2 {
		t.Fatalf("markers: %v", got)
	}
}

// TestStorageErrorFailsRequestsThenRecovers: while __transaction_state
// cannot be written, the ids of the failed partition answer
// NOT_COORDINATOR; once writes succeed again, the store reopens the
// partition (kvlog.Store.ReopenBroken) and the coordinator serves it again
// without a restart, with the state that was durable.
func TestStorageErrorFailsRequestsThenRecovers(t *testing.T) {
	var failing atomic.Bool
	fs := vfs.NewErrorFS(vfs.NewMem(), vfs.WritesWhile(&failing, ""))
	s := startTxnService(t, fs, newPartitionsSide())
	defer s.Close()
	pid, epoch := beginTxn(t, s, "tx")
	init := func() int16 {
		id := "tx"
		r := kmsg.NewPtrInitProducerIDRequest()
		r.Version, r.TransactionalID, r.TransactionTimeoutMillis = 4, &id, 60000
		r.ProducerID, r.ProducerEpoch = -1, -1
		return doTxn[*kmsg.InitProducerIDResponse](t, s, r).ErrorCode
	}
	failing.Store(true)
	if code := init(); code != kerr.NotCoordinator.Code {
		t.Fatalf("InitProducerID on a failing disk: %v, want NOT_COORDINATOR", kerr.ErrorForCode(code))
	}
	failing.Store(false)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st := describeTxn(t, s, "tx")
		if st.ErrorCode == 0 {
			// The durable state: the first transaction, ongoing, not
			// the refused re-init's fencing.
			if st.ProducerID != pid || st.ProducerEpoch != epoch || st.State != "Ongoing" {
				t.Fatalf("after the disk came back: %+v, want producer %d epoch %d Ongoing", st, pid, epoch)
			}
			break
		}
		if st.ErrorCode != kerr.NotCoordinator.Code || time.Now().After(deadline) {
			t.Fatalf("describe after the disk came back: %v", kerr.ErrorForCode(st.ErrorCode))
		}
	}
}
