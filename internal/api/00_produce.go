package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// Produce: v3-13
//
// Behavior:
// * Record batches (magic 2) only, hence v3+. The bytes are appended as
//   sent; the log validates the CRC, assigns offsets and checks idempotent
//   sequences (design D2, D10).
// * acks 0/1/-1 → AckWritten/AckWritten/AckForced (design D4). acks=0 gets
//   no response; if any partition failed, the connection is closed so the
//   client notices, as Kafka does. It is still waited for internally, so
//   the request stays within the in-flight and memory bounds until its
//   records are written.
// * The partitions of one request are queued to their logs together, so one
//   fdatasync per log covers them (group commit). Requests on one connection
//   are queued in arrival order (Handler.Ordered), and the next one is
//   queued as soon as this one is (Request.Sequenced), so pipelined
//   requests of an idempotent producer share fsyncs too.
// * TimeoutMillis is ignored: there are no replicas to wait for.
// * Transactional produce (KIP-98, txn.go): a request with a TransactionID
//   is refused with INVALID_REQUEST when the broker has no transaction
//   coordinator (Config.TxnVerifier nil). Otherwise each partition whose
//   batches are transactional is first verified with the coordinator
//   (KIP-890 part 1; v12+ may add it implicitly, part 2), and answered the
//   coordinator's error code when it says no (INVALID_TXN_STATE, ...),
//   nothing of it appended. A transactional batch in a request without a
//   TransactionID is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
//   answers it. Producer epochs and sequences are the log's (plog): an
//   older epoch is INVALID_PRODUCER_EPOCH (Kafka answers that rather than
//   PRODUCER_FENCED to Produce of every version since 2.7, so the client
//   can abort and retry), a non-transactional batch from a producer with a
//   transaction in progress INVALID_TXN_STATE. A control batch (marker) is
//   INVALID_RECORD: only the coordinator writes markers.
// * A partition named by more than one entry gets INVALID_REQUEST, once,
//   and none of its batches is appended (Kafka keeps the last entry and
//   drops the others unanswered); the request's other partitions are
//   appended as usual.
//
// Version notes:
// * v3: TransactionID, record batches
// * v5: LogStartOffset in the response
// * v8: ErrorRecords, ErrorMessage
// * v9: flexible versions
// * v12: transactions version 2 (KIP-890 part 2: partitions added by the
//   produce itself)
// * v13: TopicID instead of the topic name (KIP-516)

func init() {
	k := regKey(0, 3, 13, (*Handler).handleProduce)
	k.ordered = true // Handler.Ordered
}

func (h *Handler) handleProduce(ctx context.Context, creq *server.Request, req *kmsg.ProduceRequest) server.Response {
	ps := producePool.Get().(*produceState)
	resp := ps.response(req)

	var ack plog.AckPolicy
	badAcks := false
	switch req.Acks {
	case 0:
		// No answer, but the request is held (its frame, its share of the
		// memory budget, its in-flight slot) until the records are
		// written, as Kafka does: otherwise acks=0 producers escape every
		// bound while the writer still refers to their frames.
		ack = plog.AckWritten
	case 1:
		ack = plog.AckWritten
	case -1:
		ack = plog.AckForced
	default:
		badAcks = true
	}

	jobs := ps.jobs[:0]
	failed := false

	// A partition named by more than one entry: which batch would the
	// client want first, and which offsets would it match to which? Kafka
	// keeps the last entry and drops the others unanswered; we append none
	// and answer the partition once with INVALID_REQUEST, so nothing is
	// lost unseen and a partition repeated a million times costs one
	// answer.
	repeated, distinctPartitions := repeatedPartitions(req.Topics, func(rt *kmsg.ProduceRequestTopic) (topicKey, int) {
		return produceTopicKey(req.Version, rt), len(rt.Partitions)
	}, func(rt *kmsg.ProduceRequestTopic, i int) int32 { return rt.Partitions[i].Partition })
	if refused, ok := h.tooManyPartitions(creq, distinctPartitions); ok {
		creq.Sequenced()
		ps.Recycle()
		return refused
	}

	// A transactional produce needs WRITE on its transactional id, for the
	// whole request, before anything else (Kafka's order).
	txnDenied := req.TransactionID != nil && !h.allowed(creq, acl.TransactionalID, *req.TransactionID, acl.Write)

	// With repeats, the same walk again numbers the entries as
	// repeatedPartitions did, to answer each partition once.
	var answered requestPartitions
	distinct := int32(0)
	for i := range req.Topics {
		rt := &req.Topics[i]
		var ti int32
		if repeated != nil {
			ti = answered.topic(produceTopicKey(req.Version, rt))
		}
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		var t *topic
		if req.Version >= 13 {
			t = h.lookupID(rt.TopicID)
		} else {
			t = h.lookup(rt.Topic)
		}
		denied := h.topicDenied(creq, t, rt.Topic, acl.Write)
		if repeated == nil {
			// The usual request: every entry is a distinct partition.
			st.Partitions = ps.partitionAnswers(len(rt.Partitions))
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			var entry int32
			if repeated != nil {
				var again bool
				if entry, again = answered.partition(ti, rp.Partition, distinct); again {
					continue // answered with its first entry
				}
				distinct++
			}
			sp := kmsg.NewProduceResponseTopicPartition()
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
			case req.TransactionID != nil && h.cfg.TxnVerifier == nil:
				// Not TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing is
				// wrong with the client's rights, the feature is absent.
				fail(kerr.InvalidRequest.Code, "transactions are not supported: this broker has no transaction coordinator")
			case txnDenied:
				fail(kerr.TransactionalIDAuthorizationFailed.Code, "")
			case repeated[entry]:
				fail(kerr.InvalidRequest.Code, "partition named more than once in the request: none of its batches was appended")
			case denied:
				fail(kerr.TopicAuthorizationFailed.Code, "")
			case l == nil && t.notHostedHere(rp.Partition):
				fail(kerr.NotLeaderForPartition.Code, "this node holds no replica of the partition: refresh metadata for its leader")
			case l == nil && t == nil && req.Version >= 13:
				fail(kerr.UnknownTopicID.Code, "")
			case l == nil:
				fail(kerr.UnknownTopicOrPartition.Code, "")
			case len(rp.Records) == 0:
				fail(kerr.InvalidRecord.Code, "no record batch")
			default:
				if code, msg := h.verifyTxnProduce(ctx, req, t.meta.Name, rp); code != 0 {
					fail(code, msg)
					break
				}
				jobs = append(jobs, produceJob{topicIndex: int32(len(resp.Topics)), partitionIndex: int32(len(st.Partitions)), log: l, records: rp.Records, topic: t.meta.Name})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 {
			resp.Topics = append(resp.Topics, st)
		}
	}

	// Queue every partition's batches in request order, then let the next
	// produce request of this connection start (Request.Sequenced) while
	// this one waits: an idempotent producer's pipelined requests then reach
	// each log in sequence order and share its group commits.
	ps.jobs = jobs
	for i := range jobs {
		j := &jobs[i]
		j.start = time.Now()
		j.pending, j.err = j.log.Enqueue(j.records, ack)
	}
	h.produceThrottle(creq) // throttle.go: before the next produce of the connection starts
	creq.Sequenced()
	// Every append below is waited for (acks=0 included), so once this
	// handler returns the records (which alias the request frame) are on
	// disk or in the page cache and nothing refers to the frame.
	creq.RecycleFrame()
	waited := creq.Accounting.WaitStart() // the writer's and fsync's time is not the request's (throttle.go)
	for i := range jobs {
		q := &jobs[i]
		res := plog.AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1}
		err := q.err
		if err == nil {
			res, err = q.pending.Wait()
		}
		sp := &resp.Topics[q.topicIndex].Partitions[q.partitionIndex]
		h.finishProduce(req.Version, sp, q.topic, len(q.records), q.start, res, err)
	}
	creq.Accounting.WaitEnd(waited)

	if req.Acks == 0 {
		for _, j := range jobs {
			if resp.Topics[j.topicIndex].Partitions[j.partitionIndex].ErrorCode != 0 {
				failed = true
			}
		}
		return server.Response{None: true, Close: failed, Recycle: ps}
	}
	return server.Response{Body: resp, Recycle: ps}
}

// produceJob is one partition's batches of a Produce: where its answer
// is, and its append once queued.
type produceJob struct {
	topicIndex, partitionIndex int32 // of its answer in resp.Topics
	log                        *plog.Log
	records                    []byte
	topic                      string

	pending plog.Pending
	err     error
	start   time.Time
}

// produceState is what one Produce request needs besides its frame: the
// answer and the jobs. It comes from producePool and goes back once the
// answer is written (server.Response.Recycle), so a Produce allocates
// nothing of its own in the usual case (TestProduceAllocations).
type produceState struct {
	resp       kmsg.ProduceResponse
	topics     []kmsg.ProduceResponseTopic
	partitions []kmsg.ProduceResponseTopicPartition // carved into the topics' answers
	used       int                                  // of partitions
	jobs       []produceJob
}

var producePool = sync.Pool{New: func() any { return new(produceState) }}

// maxPooledProduce bounds what a pooled state keeps (partitions of one
// request): a rare huge request does not pin its slices in the pool.
const maxPooledProduce = 1024

// response resets the state for req and returns its answer, with room for
// every topic.
func (ps *produceState) response(req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	ps.resp = kmsg.ProduceResponse{Version: req.Version}
	ps.resp.Default()
	if cap(ps.topics) < len(req.Topics) {
		ps.topics = make([]kmsg.ProduceResponseTopic, 0, len(req.Topics))
	}
	ps.resp.Topics = ps.topics[:0]
	total := 0
	for i := range req.Topics {
		total += len(req.Topics[i].Partitions)
	}
	if cap(ps.partitions) < total {
		ps.partitions = make([]kmsg.ProduceResponseTopicPartition, total)
	}
	ps.partitions, ps.used = ps.partitions[:cap(ps.partitions)], 0
	return &ps.resp
}

// partitionAnswers returns an empty slice with room for n partitions'
// answers, carved from the state's (appending past n would reallocate, not
// overwrite the next topic's).
func (ps *produceState) partitionAnswers(n int) []kmsg.ProduceResponseTopicPartition {
	if ps.used+n > len(ps.partitions) {
		return make([]kmsg.ProduceResponseTopicPartition, 0, n)
	}
	s := ps.partitions[ps.used : ps.used : ps.used+n]
	ps.used += n
	return s
}

// Recycle puts the state back in the pool once its answer is written.
func (ps *produceState) Recycle() {
	if cap(ps.partitions) > maxPooledProduce || cap(ps.topics) > maxPooledProduce || cap(ps.jobs) > maxPooledProduce {
		return
	}
	clear(ps.topics[:cap(ps.topics)])
	clear(ps.partitions)
	clear(ps.jobs[:cap(ps.jobs)])
	ps.resp, ps.jobs = kmsg.ProduceResponse{}, ps.jobs[:0]
	producePool.Put(ps)
}

// finishProduce fills one partition's answer from its append, enqueued at
// start.
func (h *Handler) finishProduce(version int16, sp *kmsg.ProduceResponseTopicPartition, topic string, n int, start time.Time, res plog.AppendResult, err error) {
	if m := h.cfg.Metrics; m != nil {
		m.AppendLatency(time.Since(start))
		if err == nil {
			m.ProducedBytes(topic, n)
			m.AppendTiming(start, res.Timing)
		}
	}
	if err != nil && !errors.Is(err, plog.ErrDuplicateSequence) {
		code := errorCode(err)
		sp.ErrorCode = code
		if version >= 8 {
			sp.ErrorMessage = errMessage(err)
		}
		if code == kerr.KafkaStorageError.Code {
			h.log.Error("append failed", "topic", topic, "partition", sp.Partition, "err", err)
		}
		return
	}
	sp.BaseOffset = res.BaseOffset
	sp.LogAppendTime = res.LogAppendTime
	sp.LogStartOffset = res.LogStartOffset
}

// produceTopicKey is how a produce request names a topic entry.
func produceTopicKey(version int16, rt *kmsg.ProduceRequestTopic) topicKey {
	if version >= 13 {
		return topicKey{id: rt.TopicID}
	}
	return topicKey{name: rt.Topic}
}

// verifyTxnProduce checks a partition's batches of a Produce against the
// transaction rules that are not the log's: a transactional batch needs the
// request's TransactionID, and its partition must belong to the producer's
// transaction (the coordinator says). It returns 0 when the batches may be
// appended, else the code (and message) to answer.
func (h *Handler) verifyTxnProduce(ctx context.Context, req *kmsg.ProduceRequest, topic string, rp *kmsg.ProduceRequestTopicPartition) (int16, string) {
	producerID, epoch, transactional := transactionalBatch(rp.Records)
	switch {
	case !transactional:
		return 0, ""
	case req.TransactionID == nil:
		return kerr.TransactionalIDAuthorizationFailed.Code, "transactional batch in a produce request without a transactional id"
	case h.cfg.TxnVerifier == nil:
		return kerr.InvalidRequest.Code, "transactions are not supported: this broker has no transaction coordinator"
	}
	if code := h.cfg.TxnVerifier.VerifyPartition(ctx, *req.TransactionID, producerID, epoch, topic, rp.Partition, req.Version >= 12); code != 0 {
		return code, "refused by the transaction coordinator"
	}
	return 0, ""
}

// transactionalBatch reports whether any batch of records is transactional
// (a control batch is not looked past), with the producer id and epoch of
// the first that is. It reads headers
// only and stops at the first that does not frame (the log refuses those).
func transactionalBatch(records []byte) (producerID int64, epoch int16, transactional bool) {
	for len(records) >= batch.HeaderSize {
		h, _ := batch.ParseHeader(records)
		if h.Control() {
			// A marker from a client: the log refuses it (INVALID_RECORD)
			// whatever the transactional id, without asking the
			// coordinator. (Kafka, looking at the transactional bit first,
			// answers one without a transactional id
			// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; refused either way.)
			return -1, -1, false
		}
		if h.Transactional() {
			return h.ProducerID, h.ProducerEpoch, true
		}
		size := h.Size()
		if size < batch.HeaderSize || size > len(records) {
			break
		}
		records = records[size:]
	}
	return -1, -1, false
}
