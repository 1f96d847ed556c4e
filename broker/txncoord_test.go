package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sarama asks for a transaction coordinator and, on an error, for the
// metadata of __transaction_state; with auto creation on, that made the
// broker create a user topic of that name. The internal topic is listed as
// internal, never created, and cannot be created or deleted.
func TestTransactionStateTopicIsInternal(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client()
	ctx := ctxT(t, 20*time.Second)

	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorType, find.CoordinatorKey = 1, "tx"
	find.Version = 3
	fresp, err := find.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if fresp.ErrorCode != 0 || fresp.NodeID < 0 {
		t.Fatalf("FindCoordinator(transaction): %v node %d", kerr.ErrorForCode(fresp.ErrorCode), fresp.NodeID)
	}

	md := kmsg.NewPtrMetadataRequest()
	name := "__transaction_state"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
	md.AllowAutoTopicCreation = true
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 || !mresp.Topics[0].IsInternal || len(mresp.Topics[0].Partitions) != 1 {
		t.Fatalf("Metadata(__transaction_state): %+v", mresp.Topics)
	}
	adm := tb.admin()
	resp, err := adm.CreateTopic(ctx, 1, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if !errorsIs(err, kerr.TopicAlreadyExists) {
		t.Fatalf("CreateTopics(__transaction_state): %v", err)
	}
	// No user topic of that name: not in the catalogue, so DeleteTopics
	// has nothing to delete.
	dresp, err := adm.DeleteTopics(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if d := dresp[name]; !errorsIs(d.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("DeleteTopics(__transaction_state): %v", d.Err)
	}
	if _, ok := tb.Broker.catalog.Topic(name); ok {
		t.Fatal("__transaction_state is a user topic in the catalogue")
	}
}

// The coordinator over the wire: InitProducerID with a transactional id,
// AddPartitionsToTxn, EndTxn (its markers written to the partitions), and a
// restart that replays __transaction_state.
func TestTransactionCoordinatorRoundTripAndRestart(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 30*time.Second)
	if _, err := tb.admin().CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	cl := tb.client()
	id := "tx-1"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 60000
	iresp, err := init.RequestWith(ctx, cl)
	if err != nil || iresp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v %v", err, kerr.ErrorForCode(iresp.ErrorCode))
	}
	pid, epoch := iresp.ProducerID, iresp.ProducerEpoch

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, pid, epoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
	aresp, err := add.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range aresp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("AddPartitionsToTxn %s/%d: %v", rt.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	describe := func(cl *kgo.Client) kmsg.DescribeTransactionsResponseTransactionState {
		t.Helper()
		d := kmsg.NewPtrDescribeTransactionsRequest()
		d.TransactionalIDs = []string{id}
		dresp, err := d.RequestWith(ctx, cl)
		if err != nil || len(dresp.TransactionStates) != 1 {
			t.Fatalf("DescribeTransactions: %v %+v", err, dresp)
		}
		return dresp.TransactionStates[0]
	}
	if st := describe(cl); st.State != "Ongoing" || len(st.Topics) != 1 || len(st.Topics[0].Partitions) != 2 {
		t.Fatalf("described: %+v", st)
	}

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, true
	eresp, err := end.RequestWith(ctx, cl) // kgo sends v5: the epoch is bumped (KIP-890 part 2)
	if err != nil || eresp.ErrorCode != 0 || eresp.Version < 5 || eresp.ProducerID != pid || eresp.ProducerEpoch != epoch+1 {
		t.Fatalf("EndTxn: %v %+v", err, eresp)
	}
	epoch = eresp.ProducerEpoch
	// The markers are in the partitions (one control batch each) before
	// EndTxn answered.
	ends, err := tb.admin().ListEndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if o, _ := ends.Lookup("t", p); o.Offset != 1 {
			t.Fatalf("t/%d ends at %d after the commit, want 1 (the marker)", p, o.Offset)
		}
	}

	dir := tb.dir
	tb.stop()
	tb2 := startBroker(t, Config{DataDir: dir})
	cl2 := tb2.client()
	if st := describe(cl2); st.State != "CompleteCommit" || st.ProducerID != pid || st.ProducerEpoch != epoch {
		t.Fatalf("after restart: %+v", st)
	}
	// The next InitProducerID bumps the epoch of the same producer id.
	iresp, err = init.RequestWith(ctx, cl2)
	if err != nil || iresp.ErrorCode != 0 || iresp.ProducerID != pid || iresp.ProducerEpoch != epoch+1 {
		t.Fatalf("InitProducerID after restart: %v %+v", err, iresp)
	}
}
