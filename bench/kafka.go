package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Workload is what a produce, consume or e2e round does.
type Workload struct {
	RecordSize int           `json:"record_size"`
	Keys       bool          `json:"keys"`
	Codec      string        `json:"codec"`
	Acks       string        `json:"acks"`
	Linger     time.Duration `json:"linger_ns"`
	Partitions int32         `json:"partitions"`
	// ReplicationFactor of each fresh topic (0: 1): a cluster's rf=3.
	ReplicationFactor int16 `json:"replication_factor,omitempty"`
	Clients           int   `json:"clients"`
	// Rate is records per second over all clients (open loop); with Max
	// the loop is closed with Window outstanding records per client.
	Rate     float64       `json:"rate"`
	Max      bool          `json:"max"`
	Window   int           `json:"window"`
	Duration time.Duration `json:"duration_ns"`
	Drain    time.Duration `json:"drain_ns"`
	// Records to pre-fill and read back (consume).
	Records int64 `json:"records,omitempty"`
	// Engine generates the load: EngineFranzGo (the default) or EngineRaw
	// (pre-encoded batches, bench/raw*.go) with Raw's options.
	Engine string     `json:"engine,omitempty"`
	Raw    RawOptions `json:"raw,omitempty"`
}

// Label is a short scenario name: "produce 1024 B none acks=all open-loop 5000/s".
func (w Workload) Label(kind string) string {
	mode := fmt.Sprintf("open-loop %.0f/s", w.Rate)
	if w.Max {
		mode = fmt.Sprintf("closed-loop max (window %d)", w.Window)
	}
	if kind == "consume" {
		mode = fmt.Sprintf("%d records", w.Records)
	}
	if w.Engine == EngineRaw {
		r := w.Raw.withDefaults(w.RecordSize)
		if w.Max {
			mode = fmt.Sprintf("closed-loop max (%d requests in flight per connection)", r.InFlight)
		}
		if kind == "consume" {
			return fmt.Sprintf("%s %d B p=%d engine=raw connections=%d %s", kind, w.RecordSize, w.Partitions, r.Connections, mode)
		}
		return fmt.Sprintf("%s %d B acks=%s p=%d engine=raw connections=%d in-flight=%d batch=%d idempotent=%v %s",
			kind, w.RecordSize, w.Acks, w.Partitions, r.Connections, r.InFlight, r.BatchRecords, r.Idempotent, mode)
	}
	return fmt.Sprintf("%s %d B %s acks=%s linger=%s p=%d c=%d %s", kind, w.RecordSize, w.Codec, w.Acks, w.Linger, w.Partitions, w.Clients, mode)
}

// Durability names the durability mode the workload asks of the broker.
func (w Workload) Durability() string {
	switch w.Acks {
	case "all", "-1":
		return "acks=all (the broker decides what that means: see each system's runtime durability)"
	case "1":
		return "acks=1 (leader write, page cache)"
	case "0":
		return "acks=0 (no acknowledgement)"
	}
	return "acks=" + w.Acks
}

// Codec parses a codec name.
func Codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown codec %q (none, gzip, snappy, lz4, zstd)", name)
}

// Acks parses a required-acks name (all or -1, 1, 0) and says whether the
// producer may stay idempotent: franz-go requires acks=all for that.
func Acks(name string) (acks kgo.Acks, idempotent bool, err error) {
	level, err := AcksLevel(name)
	switch level {
	case -1:
		return kgo.AllISRAcks(), true, err
	case 1:
		return kgo.LeaderAck(), false, err
	}
	return kgo.NoAck(), false, err
}

// AcksLevel is a required-acks name as the protocol's value (-1, 1, 0):
// the one table of the names both engines accept.
func AcksLevel(name string) (int16, error) {
	switch name {
	case "all", "-1":
		return -1, nil
	case "1":
		return 1, nil
	case "0":
		return 0, nil
	}
	return 0, fmt.Errorf("unknown acks %q (all, 1, 0)", name)
}

func acksOpt(name string) ([]kgo.Opt, error) {
	acks, idempotent, err := Acks(name)
	if err != nil {
		return nil, err
	}
	if !idempotent {
		return []kgo.Opt{kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite()}, nil
	}
	return []kgo.Opt{kgo.RequiredAcks(acks)}, nil
}

// Payloads makes n distinct JSON records of about size bytes: a fixed
// structure and random hex filler, so compression sees realistic data
// (as in the producer-batching lesson) and never n copies of one buffer.
func Payloads(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		head := fmt.Sprintf(`{"seq":%d,"id":"ord-%08d","event":"OrderPlaced","ts":%d,"payload":"`, i, i, time.Now().UnixMilli())
		fill := size - len(head) - 2
		var b []byte
		if fill > 0 {
			raw := make([]byte, (fill+1)/2)
			_, _ = rand.Read(raw)
			b = append([]byte(head), hex.EncodeToString(raw)[:fill]...)
			b = append(b, '"', '}')
		} else {
			b = make([]byte, size)
			_, _ = rand.Read(b)
		}
		out[i] = b
	}
	return out
}

// NewClient makes a franz-go client for the workload's producer settings.
func NewClient(brokers string, w Workload, extra ...kgo.Opt) (*kgo.Client, error) {
	codec, err := Codec(w.Codec)
	if err != nil {
		return nil, err
	}
	acks, err := acksOpt(w.Acks)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ClientID("sushka-bench"),
		kgo.ProducerLinger(w.Linger),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(1 << 20),
		kgo.AllowAutoTopicCreation(),
	}
	opts = append(opts, acks...)
	opts = append(opts, extra...)
	return kgo.NewClient(opts...)
}

// CreateTopic creates topic with partitions (replication factor 1); an
// existing topic is fine.
func CreateTopic(ctx context.Context, brokers, topic string, partitions int32) error {
	return CreateTopicReplicated(ctx, brokers, topic, partitions, 1)
}

// CreateTopicReplicated is CreateTopic with replication factor rf (below
// 1: 1).
func CreateTopicReplicated(ctx context.Context, brokers, topic string, partitions int32, rf int16) error {
	rf = max(rf, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, rf, nil, topic)
	if err != nil {
		return fmt.Errorf("creating topic %s on %s: %w", topic, brokers, err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s on %s: %w", topic, brokers, r.Err)
		}
	}
	return nil
}

// DeleteTopic deletes topic; a topic that does not exist is fine. Benchmark
// rounds write gigabytes each, so every round's topic is deleted after it
// (sushka bench --keep-topics keeps them).
func DeleteTopic(ctx context.Context, brokers, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("deleting topic %s on %s: %w", topic, brokers, err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("deleting topic %s on %s: %w", topic, brokers, r.Err)
		}
	}
	return nil
}

// ProduceResult is one produce round.
type ProduceResult struct {
	Load  LoadResult `json:"load"`
	Bytes int64      `json:"bytes"` // payload bytes acknowledged
}

// Produce runs one produce round on topic with w.Clients clients, each
// with its own share of the rate (or its own closed-loop window).
func Produce(ctx context.Context, brokers, topic string, w Workload) (ProduceResult, error) {
	clients := max(w.Clients, 1)
	payloads := Payloads(4096, w.RecordSize)
	results := make([]LoadResult, clients)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		cl, err := NewClient(brokers, w, kgo.DefaultProduceTopic(topic))
		if err != nil {
			return ProduceResult{}, err
		}
		defer cl.Close()
		// Fetch metadata before the clock starts.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = cl.ProduceSync(pctx, &kgo.Record{Value: payloads[0]}).FirstErr()
		cancel()
		if err != nil {
			return ProduceResult{}, fmt.Errorf("first record to %s on %s: %w", topic, brokers, err)
		}
		wg.Add(1)
		go func(c int, cl *kgo.Client) {
			defer wg.Done()
			op := func(seq int64, _ time.Time, done func(error)) {
				r := &kgo.Record{Value: payloads[int(seq)%len(payloads)]}
				if w.Keys {
					r.Key = BenchKey(seq)
				}
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) { done(err) })
			}
			if w.Max {
				results[c] = ClosedLoop(ctx, w.Window, w.Duration, w.Drain, op)
			} else {
				results[c] = OpenLoop(ctx, w.Rate/float64(clients), w.Duration, w.Drain, op)
			}
		}(c, cl)
	}
	wg.Wait()
	res := ProduceResult{Load: mergeLoads(results)}
	res.Bytes = res.Load.Acked * int64(w.RecordSize)
	return res, nil
}

func mergeLoads(rs []LoadResult) LoadResult {
	out := LoadResult{Mode: rs[0].Mode, Window: rs[0].Window, Latency: &Histogram{}}
	if rs[0].SendLag != nil {
		out.SendLag = &Histogram{}
	}
	for _, r := range rs {
		out.Offered += r.Offered
		out.Issued += r.Issued
		out.Acked += r.Acked
		out.Errors += r.Errors
		out.Unfinished += r.Unfinished
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		out.Elapsed = max(out.Elapsed, r.Elapsed)
		out.FinalLag = max(out.FinalLag, r.FinalLag)
		out.Backpressure += r.Backpressure
		out.Latency.Merge(r.Latency)
		if r.SendLag != nil {
			out.SendLag.Merge(r.SendLag)
		}
	}
	return out
}

// Fill writes n records of w's shape into topic as fast as the broker
// takes them, for a consume round to read.
func Fill(ctx context.Context, brokers, topic string, w Workload, n int64) error {
	cl, err := NewClient(brokers, w, kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	payloads := Payloads(4096, w.RecordSize)
	var firstErr atomic.Value
	for i := int64(0); i < n && ctx.Err() == nil; i++ {
		cl.Produce(ctx, &kgo.Record{Value: payloads[int(i)%len(payloads)]}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	return ctx.Err()
}

// ConsumeResult is one consume round.
type ConsumeResult struct {
	Records int64         `json:"records"`
	Bytes   int64         `json:"bytes"`
	Elapsed time.Duration `json:"elapsed_ns"` // first record received to last
	Total   time.Duration `json:"total_ns"`   // client start to last record
}

// Consume reads want records of topic from the start with one fresh client
// (no group) and times it; the window opens at the first record.
func Consume(ctx context.Context, brokers, topic string, want int64, timeout time.Duration) (ConsumeResult, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ClientID("sushka-bench"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return ConsumeResult{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r ConsumeResult
	start := time.Now()
	var first time.Time
	for r.Records < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return r, fmt.Errorf("consumed %d of %d records of %s before the timeout", r.Records, want, topic)
		}
		if err := fs.Err0(); err != nil {
			return r, err
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if first.IsZero() {
				first = time.Now()
			}
			r.Records++
			r.Bytes += int64(len(rec.Value))
		})
	}
	end := time.Now()
	r.Elapsed, r.Total = end.Sub(first), end.Sub(start)
	return r, nil
}

// E2EResult is one produce → consume round.
type E2EResult struct {
	Produce  LoadResult `json:"produce"`
	Received int64      `json:"received"`
	// Latency is from the moment a record was due to its arrival at the
	// consumer (one process, one clock).
	Latency *Histogram `json:"-"`
}

// The e2e clients are configured as a latency-sensitive user configures
// them (E2EClients says so in the report): the producer sends at once
// (kgo.ProducerLinger(0) unless --linger says otherwise; kgo's default
// is 10 ms) and the consumer's fetch is answered as soon as one record is
// there (fetch.min.bytes 1), the broker's long poll waking at the high
// watermark advance; its FetchMaxWait only bounds an idle poll.
const (
	e2eFetchMinBytes = 1
	e2eFetchMaxWait  = 100 * time.Millisecond
)

// E2EClients describes the e2e clients' latency settings for w.
func E2EClients(w Workload) string {
	_, idempotent, _ := Acks(w.Acks)
	inFlight := "1 produce request in flight"
	if idempotent {
		inFlight = "up to 5 produce requests in flight (idempotent)"
	}
	return fmt.Sprintf("clients: franz-go producer linger %s, acks=%s, %s; franz-go consumer (no group) fetch.min.bytes %d, FetchMaxWait %s (a long poll ends at the high watermark advance)",
		w.Linger, w.Acks, inFlight, e2eFetchMinBytes, e2eFetchMaxWait)
}

// E2E subscribes a consumer to a fresh topic first, then produces at
// w.Rate (open loop) with the due time in the first 8 bytes of each value,
// and measures due → received.
func E2E(ctx context.Context, brokers, topic string, w Workload) (E2EResult, error) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ClientID("sushka-bench-e2e"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMinBytes(e2eFetchMinBytes), kgo.FetchMaxWait(e2eFetchMaxWait))
	if err != nil {
		return E2EResult{}, err
	}
	defer cons.Close()
	prod, err := NewClient(brokers, w, kgo.DefaultProduceTopic(topic))
	if err != nil {
		return E2EResult{}, err
	}
	defer prod.Close()
	size := max(w.RecordSize, 8)
	payloads := Payloads(4096, size)
	// Warm: one record through both clients before the clock starts.
	warm := make([]byte, size)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = prod.ProduceSync(pctx, &kgo.Record{Value: warm}).FirstErr()
	cancel()
	if err != nil {
		return E2EResult{}, err
	}
	var (
		mu       sync.Mutex
		lat      Histogram
		received atomic.Int64
	)
	cctx, ccancel := context.WithCancel(ctx)
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		for cctx.Err() == nil {
			fs := cons.PollFetches(cctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) {
				due := int64(binary.BigEndian.Uint64(rec.Value))
				if due == 0 {
					return // the warm-up record
				}
				lat.Record(now.Sub(time.Unix(0, due)))
				received.Add(1)
			})
			mu.Unlock()
		}
	}()
	var res E2EResult
	res.Produce = OpenLoop(ctx, w.Rate, w.Duration, w.Drain, func(seq int64, due time.Time, done func(error)) {
		v := make([]byte, size)
		copy(v, payloads[int(seq)%len(payloads)])
		binary.BigEndian.PutUint64(v, uint64(due.UnixNano()))
		prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) { done(err) })
	})
	deadline := time.Now().Add(w.Drain)
	for received.Load() < res.Produce.Acked && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ccancel()
	<-consDone
	mu.Lock()
	res.Latency = &lat
	res.Received = received.Load()
	mu.Unlock()
	return res, nil
}
