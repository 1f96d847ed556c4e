package api

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/group"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/txn"
)

// The transaction API keys (22 with a transactional id, 10 with key type 1,
// 24, 25, 26, 65, 66) are served by the transaction coordinator
// (internal/txn): a state machine driven by one goroutine that owns it and
// the __transaction_state log (DATA/__transaction_state-0/). The handlers
// here hand the decoded request to that driver and wait for its answer,
// which an EndTxn gets once its markers are durable in every partition of
// the transaction. TxnOffsetCommit (28) goes to the group coordinator once
// the transaction coordinator has verified that the group's partition is in
// the producer's transaction; WriteTxnMarkers (27) writes markers directly.

// startTxns opens __transaction_state, replays it and starts the driver;
// the group coordinator must be started.
func (h *Handler) startTxns() error {
	svc, err := txn.Start(txn.ServiceConfig{
		FS:        h.cfg.FS,
		DataDir:   h.cfg.DataDir,
		Logger:    h.log.With("component", "txn-coordinator"),
		WritePath: h.cfg.WritePath,
		Markers:   txnMarkers{h},
		Coordinator: txn.Config{
			NodeID:            h.cfg.NodeID,
			OffsetsPartitions: h.groups.Store().Partitions(),
			Topics:            groupTopics{h},
			NewProducerID:     h.nextProducerID,
		},
	})
	if err != nil {
		return err
	}
	h.txns = svc
	if h.cfg.TxnVerifier == nil {
		h.cfg.TxnVerifier = txnVerifier{svc}
	}
	host, port := h.advertisedAddr(nil)
	svc.SetAddress(host, port)
	return nil
}

// closeTxns closes the transaction coordinator; h.txns stays set, as
// h.groups does (closeGroups): a closed Service answers ErrClosed.
func (h *Handler) closeTxns() error {
	if h.txns == nil {
		return nil
	}
	return h.txns.Close()
}

// Txns is the transaction coordinator service (tests, admin).
func (h *Handler) Txns() *txn.Service { return h.txns }

// txnVerifier is the coordinator as Produce sees it (TxnVerifier).
type txnVerifier struct{ svc *txn.Service }

func (v txnVerifier) VerifyPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, topic string, partition int32, implicitAdd bool) int16 {
	return v.svc.Verify(ctx, txn.Verify{
		TransactionalID: transactionalID,
		ProducerID:      producerID,
		ProducerEpoch:   producerEpoch,
		Partition:       txn.TopicPartition{Topic: topic, Partition: partition},
		ImplicitAdd:     implicitAdd,
	})
}

// txnMarkers writes a transaction's end into a partition for the
// coordinator: a control batch in a topic's partition log, or, in a
// __consumer_offsets partition, the group coordinator's commit (or drop) of
// the producer's pending offsets. Durable before it returns.
type txnMarkers struct{ h *Handler }

func (w txnMarkers) WriteTxnMarker(ctx context.Context, topic string, partition int32, m plog.TxnMarker) int16 {
	if topic == group.OffsetsTopic {
		return w.h.endGroupTxn(ctx, partition, m)
	}
	return w.h.WriteTxnMarker(ctx, topic, partition, m)
}

// endGroupTxn hands a marker for a __consumer_offsets partition to the
// group coordinator (as Kafka's WriteTxnMarkers does).
func (h *Handler) endGroupTxn(ctx context.Context, partition int32, m plog.TxnMarker) int16 {
	svc := h.groups
	if svc == nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	rm := kmsg.NewWriteTxnMarkersRequestMarker()
	rm.ProducerID, rm.ProducerEpoch, rm.Committed, rm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	rm.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: group.OffsetsTopic, Partitions: []int32{partition}}}
	req.Markers = append(req.Markers, rm)
	resp, err := svc.Do(ctx, "", "", req)
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	return resp.(*kmsg.WriteTxnMarkersResponse).Markers[0].Topics[0].Partitions[0].ErrorCode
}

// viaTxnCoordinator is the handler registered by the transaction API keys'
// files.
func viaTxnCoordinator[Req kmsg.Request](h *Handler, ctx context.Context, creq *server.Request, _ Req) server.Response {
	return h.authorizedCoordinated(creq, func() server.Response { return h.handleTxn(ctx, creq) })
}

// handleTxn hands a transaction request to the coordinator and waits for
// its response. A connection that closes abandons the wait.
func (h *Handler) handleTxn(ctx context.Context, creq *server.Request) server.Response {
	body := creq.Body
	svc := h.txns
	if svc == nil {
		return errorReply(body, kerr.CoordinatorNotAvailable.Code)
	}
	waited := creq.Accounting.WaitStart() // the driver's time, not the request's (throttle.go)
	resp, err := svc.Do(ctx, body)
	creq.Accounting.WaitEnd(waited)
	if err != nil {
		if errors.Is(err, txn.ErrClosed) {
			return errorReply(body, kerr.CoordinatorNotAvailable.Code)
		}
		return server.Response{None: true, Close: true}
	}
	return reply(resp)
}
