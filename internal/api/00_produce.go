package api

import (
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	plog "github.com/sushka-io/sushka/internal/log"
	"github.com/sushka-io/sushka/internal/log/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// Produce: v3-13
//
// Behavior:
// * Record batches (magic 2) only, hence v3+. The bytes are appended as
//   sent; the log validates the CRC, assigns offsets and checks idempotent
//   sequences (design D2, D10).
// * acks 0/1/-1 → AckNone/AckWritten/AckForced (design D4). acks=0 gets no
//   response; if any partition failed, the connection is closed so the
//   client notices, as Kafka does.
// * The partitions of one request are appended concurrently, so one
//   fdatasync can cover them (group commit); requests on one connection are
//   appended in arrival order (Handler.Ordered).
// * TimeoutMillis is ignored: there are no replicas to wait for.
// * Transactional produce is refused (transactions are not built yet).
//
// Version notes:
// * v3: TransactionID, record batches
// * v5: LogStartOffset in the response
// * v8: ErrorRecords, ErrorMessage
// * v9: flexible versions
// * v13: TopicID instead of the topic name (KIP-516)

func init() { regKey(0, 3, 13) }

func (h *Handler) handleProduce(creq *server.Request, req *kmsg.ProduceRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)

	var ack plog.AckPolicy
	badAcks := false
	switch req.Acks {
	case 0:
		ack = plog.AckNone
	case 1:
		ack = plog.AckWritten
	case -1:
		ack = plog.AckForced
	default:
		badAcks = true
	}

	type job struct {
		sp      *kmsg.ProduceResponseTopicPartition
		log     *plog.Log
		records []byte
		topic   string
	}
	var jobs []job
	failed := false

	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		st := &resp.Topics[i]
		*st = kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		var t *topic
		if req.Version >= 13 {
			t = h.lookupID(rt.TopicID)
		} else {
			t = h.lookup(rt.Topic)
		}
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &st.Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			fail := func(code int16, msg string) {
				sp.ErrorCode = code
				if msg != "" && req.Version >= 8 {
					sp.ErrorMessage = &msg
				}
				failed = true
			}
			l := t.partition(rp.Partition)
			switch {
			case badAcks:
				fail(kerr.InvalidRequiredAcks.Code, "acks must be -1, 0 or 1")
			case req.TransactionID != nil:
				// Not TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing is
				// wrong with the client's rights, the feature is absent.
				fail(kerr.InvalidRequest.Code, "transactions are not supported yet")
			case l == nil && t == nil && req.Version >= 13:
				fail(kerr.UnknownTopicID.Code, "")
			case l == nil:
				fail(kerr.UnknownTopicOrPartition.Code, "")
			case len(rp.Records) == 0:
				fail(kerr.InvalidRecord.Code, "no record batch")
			default:
				jobs = append(jobs, job{sp: sp, log: l, records: rp.Records, topic: t.meta.Name})
			}
		}
	}

	run := func(j job) {
		start := time.Now()
		res, err := j.log.Append(j.records, ack)
		if m := h.cfg.Metrics; m != nil {
			m.AppendLatency(time.Since(start))
			if err == nil {
				m.ProducedBytes(j.topic, len(j.records))
			}
		}
		if err != nil && !errors.Is(err, plog.ErrDuplicateSequence) {
			code := produceErrorCode(err)
			j.sp.ErrorCode = code
			if req.Version >= 8 {
				j.sp.ErrorMessage = errMessage(err)
			}
			if code == kerr.KafkaStorageError.Code {
				h.log.Error("append failed", "topic", j.topic, "partition", j.sp.Partition, "err", err)
			}
			return
		}
		j.sp.BaseOffset = res.BaseOffset
		j.sp.LogAppendTime = res.LogAppendTime
		j.sp.LogStartOffset = res.LogStartOffset
	}
	if len(jobs) == 1 {
		run(jobs[0])
	} else {
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Add(1)
			go func() { defer wg.Done(); run(j) }()
		}
		wg.Wait()
	}

	if req.Acks == 0 {
		for _, j := range jobs {
			if j.sp.ErrorCode != 0 {
				failed = true
			}
		}
		return server.Response{None: true, Close: failed}
	}
	return server.Response{Body: resp}
}

// produceErrorCode maps an Append error to the code Kafka returns.
func produceErrorCode(err error) int16 {
	switch {
	case errors.Is(err, plog.ErrBatchTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, batch.ErrInvalidRecord):
		return kerr.InvalidRecord.Code
	case errors.Is(err, plog.ErrCorruptBatch), errors.Is(err, batch.ErrCorrupt):
		return kerr.CorruptMessage.Code
	case errors.Is(err, plog.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, plog.ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, plog.ErrUnknownProducerID):
		return kerr.UnknownProducerID.Code
	case errors.Is(err, plog.ErrClosed):
		return kerr.NotLeaderForPartition.Code
	}
	return kerr.KafkaStorageError.Code
}
