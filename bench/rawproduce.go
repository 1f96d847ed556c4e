package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// Engines of `sushka bench produce` and `consume`.
const (
	EngineFranzGo = "franz-go"
	EngineRaw     = "raw"
)

// RawOptions shape the raw engine's connections and requests.
type RawOptions struct {
	// Connections to the partitions' leaders (at least one per leader).
	Connections int `json:"connections"`
	// InFlight is the bound on unanswered Produce requests per connection:
	// the broker's own bound by default (server.DefaultMaxInFlight).
	InFlight int `json:"in_flight"`
	// BatchRecords is the records of each partition's batch in a request
	// (0: DefaultRawBatchBytes of records: larger batches spread the
	// per-request cost of both sides, as franz-go's batches grow under
	// load).
	BatchRecords int `json:"batch_records"`
	// Idempotent: InitProducerId first, then per-partition sequences and
	// the producer's epoch in every batch (Kafka requires acks=all).
	Idempotent bool `json:"idempotent"`
}

// DefaultRawBatchBytes is the record bytes of a raw batch when
// RawOptions.BatchRecords is 0.
const DefaultRawBatchBytes = 256 << 10

// rawRequestPool is how many distinct requests each connection cycles
// through (different records in each; patched before every send).
const rawRequestPool = 4

func (o RawOptions) withDefaults(recordSize int) RawOptions {
	o.Connections = max(o.Connections, 1)
	if o.InFlight <= 0 {
		o.InFlight = server.DefaultMaxInFlight
	}
	if o.BatchRecords <= 0 {
		o.BatchRecords = max(1, DefaultRawBatchBytes/max(recordSize, 1))
	}
	return o
}

// BenchKey is the key of record seq when a workload has keys: 1024
// distinct 8-character keys, the same for both engines.
func BenchKey(seq int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq%1024)*0x9E3779B97F4A7C15)
	const hexDigits = "0123456789abcdef"
	out := make([]byte, 8)
	for i := 0; i < 4; i++ {
		out[2*i], out[2*i+1] = hexDigits[b[i]>>4], hexDigits[b[i]&15]
	}
	return out
}

// rawRequest is one pre-encoded Produce request and its batches (which
// alias buf).
type rawRequest struct {
	buf     []byte
	batches []rawBatch
}

// rawSend is a request due to be written.
type rawSend struct {
	done func(int64, error)
}

// rawProducer is one connection's writer and reader.
type rawProducer struct {
	conn       *rawConn
	topic      string
	partitions []int32
	requests   []rawRequest
	sequences  []int32 // next base sequence per partition (index in partitions)
	batchSize  int32
	acks       int16
	version    int16
	producerID int64
	epoch      int16
	sends      chan rawSend
	pending    chan pendingProduce
	dead       atomic.Pointer[error]
}

type pendingProduce struct {
	corr int32
	done func(int64, error)
}

// RawProduce runs one produce round with the raw engine: pre-encoded
// batches of w.RecordSize records (the values of Payloads, the keys of
// BenchKey hashed to partitions as Kafka's default partitioner does),
// written on o.Connections connections, each pipelining up to o.InFlight
// requests, in an open loop by due time (or closed with --max). Every
// request carries one batch for each partition of its connection; its
// latency is every one of its records' latency.
func RawProduce(ctx context.Context, brokers, topic string, w Workload, o RawOptions) (ProduceResult, error) {
	return rawProduce(ctx, brokers, topic, w, o, Payloads(4096, w.RecordSize))
}

// rawProduce is RawProduce with the values given (tests compare engines
// on the same bytes). Record i of the pool of each connection (request r,
// its partition j, record k: i = (r·partitions + j)·batch + k, counted
// over the connections in order) has value payloads[i mod len].
func rawProduce(ctx context.Context, brokers, topic string, w Workload, o RawOptions, payloads [][]byte) (ProduceResult, error) {
	if w.Codec != "" && w.Codec != "none" {
		return ProduceResult{}, fmt.Errorf("the raw engine sends uncompressed batches; --compression %s needs --engine %s", w.Codec, EngineFranzGo)
	}
	acks, err := AcksLevel(w.Acks)
	if err != nil {
		return ProduceResult{}, err
	}
	if o.Idempotent && acks != -1 {
		return ProduceResult{}, fmt.Errorf("an idempotent producer needs acks=all (Kafka refuses it otherwise)")
	}
	o = o.withDefaults(w.RecordSize)
	cl, err := discoverRaw(ctx, brokers, topic)
	if err != nil {
		return ProduceResult{}, err
	}
	addrs, parts := cl.assign(o.Connections)
	for _, p := range parts {
		if len(p) != len(parts[0]) {
			return ProduceResult{}, fmt.Errorf("the raw engine needs as many partitions on every connection: %d partitions do not split evenly over %d connections", len(cl.leaders), len(addrs))
		}
	}
	producerID, epoch := int64(-1), int16(-1)
	if o.Idempotent {
		if producerID, epoch, err = rawInitProducerID(ctx, cl, addrs[0]); err != nil {
			return ProduceResult{}, err
		}
	}
	var keyParts [][][]byte // partition → keys hashing to it
	if w.Keys {
		keyParts = make([][][]byte, len(cl.leaders))
		tp := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
		for s := int64(0); s < 1024; s++ {
			k := BenchKey(s)
			p := tp.Partition(&kgo.Record{Key: k}, len(cl.leaders))
			keyParts[p] = append(keyParts[p], k)
		}
	}
	var producers []*rawProducer
	closeAll := func() {
		for _, p := range producers {
			p.conn.c.Close()
		}
	}
	var record int
	for i, addr := range addrs {
		c, err := dialRaw(ctx, addr)
		if err != nil {
			closeAll()
			return ProduceResult{}, err
		}
		p := &rawProducer{conn: c, topic: topic, partitions: parts[i], sequences: make([]int32, len(parts[i])),
			batchSize: int32(o.BatchRecords), acks: acks, version: cl.versions[0], producerID: producerID, epoch: epoch,
			sends: make(chan rawSend, o.InFlight), pending: make(chan pendingProduce, o.InFlight)}
		producers = append(producers, p)
		for r := 0; r < rawRequestPool; r++ {
			req, err := p.encode(payloads, keyParts, &record)
			if err != nil {
				closeAll()
				return ProduceResult{}, err
			}
			p.requests = append(p.requests, req)
		}
	}
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(2)
		go func() { defer wg.Done(); p.write() }()
		go func() { defer wg.Done(); p.read() }()
	}
	perRequest := int64(o.BatchRecords) * int64(len(parts[0]))
	var backpressure atomic.Int64
	op := func(seq int64, _ time.Time, done func(int64, error)) {
		p := producers[seq%int64(len(producers))]
		select {
		case p.sends <- rawSend{done: done}:
		default:
			// The connection has its in-flight bound of requests written
			// and as many waiting: the broker sets the pace.
			start := time.Now()
			p.sends <- rawSend{done: done}
			backpressure.Add(int64(time.Since(start)))
		}
	}
	var l LoadResult
	if w.Max {
		l = ClosedLoopBatches(ctx, len(producers)*o.InFlight, perRequest, w.Duration, w.Drain, op)
	} else {
		l = OpenLoopBatches(ctx, w.Rate, perRequest, w.Duration, w.Drain, op)
	}
	l.Backpressure = time.Duration(backpressure.Load())
	for _, p := range producers {
		close(p.sends)
	}
	closeAll() // unblocks a reader still waiting for an answer after the drain
	wg.Wait()
	return ProduceResult{Load: l, Bytes: l.Acked * int64(w.RecordSize)}, nil
}

// rawInitProducerID asks addr for a producer id (no transactional id).
func rawInitProducerID(ctx context.Context, cl *rawCluster, addr string) (int64, int16, error) {
	v, ok := cl.versions[22]
	if !ok {
		return 0, 0, fmt.Errorf("raw engine: %s does not serve InitProducerId: run without --idempotent", addr)
	}
	c, err := dialRaw(ctx, addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.c.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(v)
	req.TransactionTimeoutMillis = 60000
	resp, err := c.roundTrip(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	r := resp.(*kmsg.InitProducerIDResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("raw engine: InitProducerId from %s: %w", addr, err)
	}
	return r.ProducerID, r.ProducerEpoch, nil
}

// encode builds one request: a batch of p.batchSize records for each of
// p's partitions, the request encoded once by kmsg, and each batch found
// again inside the encoded request, where sends patch it.
func (p *rawProducer) encode(payloads [][]byte, keyParts [][][]byte, record *int) (rawRequest, error) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(p.version)
	req.Acks, req.TimeoutMillis = p.acks, 30000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = p.topic
	var batches []rawBatch
	for _, part := range p.partitions {
		keys := make([][]byte, p.batchSize)
		values := make([][]byte, p.batchSize)
		for i := range values {
			values[i] = payloads[*record%len(payloads)]
			if keyParts != nil {
				ks := keyParts[part]
				if len(ks) == 0 {
					return rawRequest{}, fmt.Errorf("no key of the 1024 hashes to partition %d: use fewer partitions or no --keys", part)
				}
				keys[i] = ks[*record%len(ks)]
			}
			*record++
		}
		b := encodeRawBatch(keys, values)
		batches = append(batches, b)
		tp := kmsg.NewProduceRequestTopicPartition()
		tp.Partition, tp.Records = part, b.b
		t.Partitions = append(t.Partitions, tp)
	}
	req.Topics = []kmsg.ProduceRequestTopic{t}
	buf := p.conn.fmt.AppendRequest(nil, req, 0)
	from := 0
	for i := range batches {
		at := bytes.Index(buf[from:], batches[i].b)
		if at < 0 {
			return rawRequest{}, errors.New("raw engine: an encoded batch is not in its request")
		}
		at += from
		batches[i].b = buf[at : at+len(batches[i].b) : at+len(batches[i].b)]
		from = at + len(batches[i].b)
	}
	return rawRequest{buf: buf, batches: batches}, nil
}

// nextSequence is Kafka's sequence increment: it wraps to 0 after
// MaxInt32 (DefaultRecordBatch.incrementSequence).
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// write is the connection's writer: it patches the next request of the
// pool, hands its answer to the reader and writes it. A request whose
// write failed, or any request after the connection broke, fails whole.
func (p *rawProducer) write() {
	defer close(p.pending)
	var n int
	var corr int32
	perRequest := int64(p.batchSize) * int64(len(p.partitions))
	for s := range p.sends {
		if e := p.dead.Load(); e != nil {
			s.done(perRequest, *e)
			continue
		}
		req := &p.requests[n%len(p.requests)]
		n++
		now := time.Now().UnixMilli()
		for i := range req.batches {
			seq := int32(-1)
			if p.producerID >= 0 {
				seq = p.sequences[i]
				p.sequences[i] = nextSequence(seq, p.batchSize)
			}
			req.batches[i].patch(now, p.producerID, p.epoch, seq)
		}
		corr++
		binary.BigEndian.PutUint32(req.buf[8:], uint32(corr))
		if p.acks != 0 {
			p.pending <- pendingProduce{corr: corr, done: s.done}
		}
		if _, err := p.conn.c.Write(req.buf); err != nil {
			err = fmt.Errorf("writing to %s: %w", p.conn.addr, err)
			p.dead.CompareAndSwap(nil, &err)
			if p.acks == 0 {
				s.done(perRequest, err)
			}
			continue
		}
		if p.acks == 0 {
			s.done(0, nil) // acks=0: the broker does not answer
		}
	}
}

// read is the connection's reader: answers arrive in request order.
func (p *rawProducer) read() {
	perRequest := int64(p.batchSize) * int64(len(p.partitions))
	for pp := range p.pending {
		if e := p.dead.Load(); e != nil {
			pp.done(perRequest, *e)
			continue
		}
		frame, err := p.conn.readFrame()
		if err != nil {
			err = fmt.Errorf("reading from %s: %w", p.conn.addr, err)
			p.dead.CompareAndSwap(nil, &err)
			pp.done(perRequest, err)
			continue
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(p.version)
		if err := parseResponse(frame, pp.corr, resp); err != nil {
			err = fmt.Errorf("produce response from %s: %w", p.conn.addr, err)
			p.dead.CompareAndSwap(nil, &err)
			pp.done(perRequest, err)
			continue
		}
		pp.done(p.failures(resp))
	}
}

// failures counts the records of the partitions the response failed, with
// the first partition's error, as the franz-go engine reports a record's
// error (kerr's name and description), prefixed by topic and partition.
func (p *rawProducer) failures(resp *kmsg.ProduceResponse) (int64, error) {
	var failed int64
	var first error
	answered := 0
	for _, t := range resp.Topics {
		for _, part := range t.Partitions {
			answered++
			if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
				failed += int64(p.batchSize)
				if first == nil {
					first = fmt.Errorf("%s[%d]: %w", t.Topic, part.Partition, err)
				}
			}
		}
	}
	if missing := len(p.partitions) - answered; missing > 0 {
		failed += int64(missing) * int64(p.batchSize)
		if first == nil {
			first = fmt.Errorf("%s: the response answered %d of %d partitions", p.topic, answered, len(p.partitions))
		}
	}
	return failed, first
}
