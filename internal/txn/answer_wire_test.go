package txn

import (
	"encoding/hex"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp"
)

// TestAddPartitionsAnswerOnTheWire pins AddPartitionsToTxn's answers byte
// for byte, as a client reads them: v2-3 (one transaction, per partition)
// and v4-5 (batched: per transaction, per topic, per partition), with every
// kind of per-partition and whole-transaction code the coordinator gives,
// and errresp.For's answers to the same requests. The bytes were captured
// from the hand-built walks before they were folded onto errresp's one
// walk: a field dropped or reordered (a transactional id, a topic, a
// partition, a code, a topic or transaction of the request) changes them.
func TestAddPartitionsAnswerOnTheWire(t *testing.T) {
	h := newHarness()
	var reqID uint64
	do := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		reqID++
		h.c.Handle(Request{ID: reqID, Now: h.now, Body: req})
		rd := h.c.Ready()
		if len(rd.Responses) != 1 || rd.Responses[0].Body == nil {
			t.Fatalf("%s v%d: %d responses, want 1 with a body", kmsg.NameForKey(req.Key()), req.GetVersion(), len(rd.Responses))
		}
		return rd.Responses[0].Body
	}
	type producer struct {
		id    int64
		epoch int16
	}
	producers := map[string]producer{}
	for _, id := range []string{"a", "b", "c", "d"} {
		init := kmsg.NewPtrInitProducerIDRequest()
		init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, &id, 60000
		r := do(init).(*kmsg.InitProducerIDResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("InitProducerID %s: %v", id, kerr.ErrorForCode(r.ErrorCode))
		}
		producers[id] = producer{r.ProducerID, r.ProducerEpoch}
	}
	oneTxn := func(version int16, id string, topics ...kmsg.AddPartitionsToTxnRequestTopic) *kmsg.AddPartitionsToTxnRequest {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch = version, id, producers[id].id, producers[id].epoch
		req.Topics = topics
		return req
	}
	topic := func(name string, partitions ...int32) kmsg.AddPartitionsToTxnRequestTopic {
		return kmsg.AddPartitionsToTxnRequestTopic{Topic: name, Partitions: partitions}
	}
	// b's transaction holds t1/0, so that verifying it answers one
	// partition 0 and another INVALID_TXN_STATE.
	if r := do(oneTxn(3, "b", topic("t1", 0))).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("adding b's t1/0: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}

	batch := func(version int16) *kmsg.AddPartitionsToTxnRequest {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = version
		txn := func(id string, pid int64, verifyOnly bool, topics ...kmsg.AddPartitionsToTxnRequestTransactionTopic) {
			rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
			rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, rt.VerifyOnly = id, pid, producers[id].epoch, verifyOnly
			rt.Topics = topics
			req.Transactions = append(req.Transactions, rt)
		}
		tt := func(name string, partitions ...int32) kmsg.AddPartitionsToTxnRequestTransactionTopic {
			return kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: name, Partitions: partitions}
		}
		txn("a", producers["a"].id, false, tt("t1", 0, 1), tt("t2", 1))             // added: 0 each
		txn("b", producers["b"].id, true, tt("t1", 0, 2))                           // verified: 0, INVALID_TXN_STATE
		txn("c", producers["c"].id+100, false, tt("t2", 0))                         // INVALID_PRODUCER_ID_MAPPING
		txn("d", producers["d"].id, false, tt("nope", 0), tt("t1", 5), tt("t2", 0)) // UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED
		return req
	}
	mixed := func(version int16) *kmsg.AddPartitionsToTxnRequest {
		return oneTxn(version, "c", topic("t1", 2), topic("nope", 3, 4), topic("t2", 1))
	}

	for _, c := range []struct {
		name string
		resp func() kmsg.Response
		want string
	}{
		{"v2 unknown partitions", func() kmsg.Response { return do(mixed(2)) }, "0000000000000003000274310000000100000002003700046e6f7065000000020000000300030000000400030002743200000001000000010037"},
		{"v3 unknown partitions", func() kmsg.Response { return do(mixed(3)) }, "0000000004037431020000000200370000056e6f70650300000003000300000000040003000003743202000000010037000000"},
		{"v3 added", func() kmsg.Response { return do(oneTxn(3, "c", topic("t1", 1, 2), topic("t2", 0))) }, "00000000030374310300000001000000000000020000000003743202000000000000000000"},
		{"v4 batch", func() kmsg.Response { return do(batch(4)) }, "000000000000050261030374310300000000000000000000010000000003743202000000010000000000026202037431030000000000000000000002003000000002630203743202000000000031000000026404056e6f70650200000000000300000374310200000005000300000374320200000000003700000000"},
		{"v5 batch", func() kmsg.Response { return do(batch(5)) }, "000000000000050261030374310300000000000000000000010000000003743202000000010000000000026202037431030000000000000000000002003000000002630203743202000000000031000000026404056e6f70650200000000000300000374310200000005000300000374320200000000003700000000"},
		{"errresp v2", func() kmsg.Response { return errresp.For(mixed(2), kerr.CoordinatorNotAvailable.Code) }, "0000000000000003000274310000000100000002000f00046e6f70650000000200000003000f00000004000f000274320000000100000001000f"},
		{"errresp v3", func() kmsg.Response { return errresp.For(mixed(3), kerr.CoordinatorNotAvailable.Code) }, "00000000040374310200000002000f0000056e6f70650300000003000f0000000004000f00000374320200000001000f000000"},
		{"errresp v4", func() kmsg.Response { return errresp.For(batch(4), kerr.CoordinatorNotAvailable.Code) }, "00000000000f0100"},
	} {
		got := hex.EncodeToString(c.resp().AppendTo(nil))
		if got != c.want {
			t.Errorf("%s: answer\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}
