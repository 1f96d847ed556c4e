// Package kafka is the stream.Transport over the Kafka protocol, with
// franz-go's kgo client: it works against Sushka and any Kafka cluster.
//
//	app := stream.New(kafka.Transport(kgo.SeedBrokers("127.0.0.1:9092")), stream.Group("billing"))
//
// Offsets are committed only for what the App marked done (the consumer
// runs with kgo's auto-commit off): every CommitInterval, when partitions
// are revoked (after the App has finished their in-flight messages), and
// on Close. Partitions lost rather than revoked (kgo's OnPartitionsLost:
// the member was fenced, or cut off past its session) are dropped: the App
// cancels their in-flight handlers without waiting, and their marks are
// forgotten, so the new owner's committed offset stands. A group without
// committed offsets starts at the start of each partition. A seek (a nack's redelivery) is applied by the polling
// goroutine before its next poll, as kgo recommends for SetOffsets.
//
// With ExactlyOnce (txn.go) the same handlers run exactly once: each commit
// of marks is a Kafka transaction holding exactly the publishes of the
// messages below the marks. It drives kgo's transactional client itself
// rather than GroupTransactSession, which commits polled (not marked)
// offsets and aborts on every revocation; ExactlyOnce's doc says why.
package kafka

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/stream"
)

// Kafka is the transport. Its producer is a kgo client of its own; each
// consumer (one per App) is another, in the App's group.
type Kafka struct {
	opts           []kgo.Opt
	consumerOpts   []kgo.Opt
	commitInterval time.Duration
	// producer is the producer's kgo client: replaced (txn.go,
	// resetProducer) only when an exactly-once producer was fenced.
	producer     atomic.Pointer[kgo.Client]
	producerOpts []kgo.Opt    // the producer client's options, for a replacement
	txn          *txnProducer // with ExactlyOnce (txn.go), else nil
	err          error        // from creating the producer's client: returned by every use
}

// Option configures the transport beyond the client options.
type Option func(*Kafka)

// ConsumerOpts adds kgo options for the consumers only (fetch sizes,
// FetchMaxWait, session timeouts), after the shared ones. The consumers'
// FetchMaxWait is 500 ms (Kafka's fetch.max.wait.ms) unless set here or in
// the shared options, not kgo's 5 s.
func ConsumerOpts(opts ...kgo.Opt) Option {
	return func(k *Kafka) { k.consumerOpts = append(k.consumerOpts, opts...) }
}

// CommitInterval sets how often marked offsets are committed (default 1 s);
// they are also committed at revocation and on Close.
func CommitInterval(d time.Duration) Option { return func(k *Kafka) { k.commitInterval = d } }

// Transport returns a Kafka transport with the kgo client options opts
// (seed brokers, TLS, SASL, producer acks...), shared by its producer and
// consumers. Do not pass consumer options (ConsumeTopics, ConsumerGroup,
// offsets, commit settings) here: the transport sets them from the App.
// A record's explicit partition is honoured; otherwise records are
// partitioned by kgo's sticky key partitioner (murmur2, as Kafka's Java
// client), which the transport installs after opts.
func Transport(opts ...kgo.Opt) *Kafka { return New(opts) }

// New is Transport with transport options.
func New(clientOpts []kgo.Opt, opts ...Option) *Kafka {
	k := &Kafka{opts: clientOpts, commitInterval: time.Second}
	for _, o := range opts {
		o(k)
	}
	producerOpts := append(append([]kgo.Opt(nil), clientOpts...),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}))
	k.producerOpts = k.txn.producerOpts(producerOpts)
	cl, err := kgo.NewClient(k.producerOpts...)
	if err != nil {
		k.err = err
		return k
	}
	k.producer.Store(cl)
	return k
}

// Client returns the producer's kgo client (for admin requests, say), or
// nil if it could not be created. An exactly-once transport whose producer
// was fenced replaces it: Client then returns the new one.
func (k *Kafka) Client() *kgo.Client { return k.producer.Load() }

// Producer returns the transport's producer.
func (k *Kafka) Producer() stream.Producer {
	if k.txn != nil {
		return k.txn
	}
	return producer{k}
}

type producer struct{ k *Kafka }

// Publish produces rec and waits for the broker's acknowledgement (acks per
// the client options; kgo's default is all in-sync replicas).
func (p producer) Publish(ctx context.Context, rec *stream.Record) error {
	if p.k.err != nil {
		return p.k.err
	}
	// kgo keeps the record's slices until the produce completes; rec may
	// be reused once Publish returns, which is after that.
	return p.k.producer.Load().ProduceSync(ctx, toKgo(rec)).FirstErr()
}

// toKgo returns rec as a kgo record sharing rec's slices.
func toKgo(rec *stream.Record) *kgo.Record {
	kr := &kgo.Record{
		Topic:     rec.Topic,
		Partition: rec.Partition,
		Key:       rec.Key,
		Value:     rec.Value,
		Timestamp: rec.Timestamp,
	}
	if len(rec.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return kr
}

// Close closes the producer's client (after flushing what it buffers).
func (k *Kafka) Close() error {
	cl := k.producer.Load()
	if cl == nil {
		return k.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cl.Flush(ctx)
	cl.Close()
	return err
}

// partitioner sends a record with an explicit partition (>= 0) there and
// gives the others to the fallback.
type partitioner struct{ fallback kgo.Partitioner }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{p.fallback.ForTopic(topic)}
}

type topicPartitioner struct{ fallback kgo.TopicPartitioner }

func (p topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition >= 0 || p.fallback.RequiresConsistency(r)
}

func (p topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition) // kgo fails the record if n does not cover it
	}
	return p.fallback.Partition(r, n)
}

// OnNewBatch keeps the fallback's stickiness for unkeyed records.
func (p topicPartitioner) OnNewBatch() {
	if nb, ok := p.fallback.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}

// Consume starts a consumer of cfg.Topics in cfg.Group.
func (k *Kafka) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	if k.err != nil {
		return nil, k.err
	}
	if cfg.Group == "" {
		return nil, errors.New("kafka: a consumer group is required (stream.Group)")
	}
	c := &consumer{
		k:         k,
		group:     cfg.Group,
		onRevoked: cfg.OnRevoked,
		onLost:    cfg.OnLost,
		marks:     map[stream.TopicPartition]int64{},
		committed: map[stream.TopicPartition]int64{},
		seeks:     map[stream.TopicPartition]int64{},
		held:      map[stream.TopicPartition]*heldRecords{},
		behind:    map[stream.TopicPartition]bool{},
		stop:      make(chan struct{}),
		wakePoll:  make(chan struct{}, 1),
		stopped:   make(chan struct{}),
	}
	// Kafka's fetch.max.wait.ms (500 ms) rather than kgo's 5 s, before the
	// caller's options so that theirs wins: a partition whose fetching was
	// paused (see consumer.held) is fetched again only after kgo's
	// in-flight fetch, a long poll when the other partitions are idle, so
	// kgo's default stalled a resumed backlog for up to 5 s.
	opts := append([]kgo.Opt{kgo.FetchMaxWait(defaultFetchMaxWait)}, k.opts...)
	opts = append(opts, k.consumerOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	opts = append(opts, k.txn.consumerOpts()...)
	if err := k.txn.attach(c); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		k.txn.detach(c)
		return nil, err
	}
	c.cl = cl
	go c.commitLoop()
	return c, nil
}

type consumer struct {
	k         *Kafka
	cl        *kgo.Client
	group     string
	onRevoked func([]stream.TopicPartition)
	onLost    func([]stream.TopicPartition)

	mu         sync.Mutex
	marks      map[stream.TopicPartition]int64 // guarded by mu: marked, maybe not committed
	committed  map[stream.TopicPartition]int64 // guarded by mu: what the last commit sent
	seeks      map[stream.TopicPartition]int64 // guarded by mu: applied by the next Poll
	cancelPoll context.CancelFunc              // guarded by mu: interrupts the Poll in progress
	// held are the partitions the App paused (Pause), with the records
	// fetched for them since: returned by Poll once resumed. A pause does
	// not reach kgo, which would drop what it fetched for the partition
	// (the rest of its buffered fetch, and its in-flight one) and fetch it
	// again after the resume, and only after its in-flight fetch (a long
	// poll of the other partitions, up to FetchMaxWait, 500 ms by default).
	// Once the held records of the partitions kgo still fetches reach
	// holdBytes, Poll stops polling kgo while the App may resume a paused
	// partition (kgo then fetches nothing more than the one fetch it
	// buffers: a backlog is read once, as by a raw poll loop that blocks
	// on its handlers), unless that would starve another partition: one
	// whose last fetch left records on the broker, with none held for it
	// and not paused by the App. Then the partition that holds more than
	// twice what the others kgo fetches hold together (the slow one) has
	// its fetching paused in kgo (fetchPaused), once, and the others go on
	// at once (TestSlowPartitionCostsTheOthersNothing). When no partition
	// starves and none is resumed for holdWait, kgo's fetching of every
	// paused partition is paused (their handlers are stuck), so that
	// records arriving for a caught-up partition are fetched. A pause that
	// reaches kgo costs the re-fetch of at most one fetch of the partition,
	// and, when the other partitions are idle, a wait after its resume:
	// kgo cannot cut its in-flight fetch short (a SetOffsets restarts its
	// session, but the new fetch queues behind the old one on the broker's
	// connection). Bounded: holdBytes for the partitions kgo fetches,
	// 2*holdBytes in all, plus one poll's records per partition.
	held      map[stream.TopicPartition]*heldRecords // guarded by mu
	heldBytes int                                    // guarded by mu: the value bytes in held
	// behind: whether the last fetch of a partition left records on the
	// broker (for the partitions kgo returned since their assignment).
	behind map[stream.TopicPartition]bool // guarded by mu
	// wakePoll is signalled by Resume, Seek and revocations: a Poll
	// waiting at holdBytes looks again.
	wakePoll chan struct{}

	stop, stopped chan struct{}
	closeOnce     sync.Once
	closeErr      error
}

// holdBytes is how many value bytes of paused partitions the consumer
// holds, all partitions kgo fetches together, before it stops polling kgo
// (or pauses a slow partition's fetching; see consumer.held): a little
// below kgo's default budget of one fetch (FetchMaxBytes, 50 MiB), which
// the client may buffer anyway. The App's pauses are short when its
// handlers keep up (a worker resumes when half its queue is done).
const holdBytes = 32 << 20

// holdWait is how long Poll waits at holdBytes (no partition starving, or
// none of the paused ones slow; see pauseSlowLocked) for the App to resume
// a paused partition before it pauses kgo's fetching of the paused ones:
// their handlers are stuck, and records for a caught-up partition must not
// wait longer.
const holdWait = 500 * time.Millisecond

// defaultFetchMaxWait is the consumer's FetchMaxWait unless the caller
// sets one: Kafka's default fetch.max.wait.ms.
const defaultFetchMaxWait = 500 * time.Millisecond

// heldRecords is a paused partition's state in the consumer.
type heldRecords struct {
	records []*kgo.Record
	bytes   int
	// paused: the App has paused the partition (else its records are
	// ready for the next Poll); fetchPaused: kgo's fetching of it too.
	paused, fetchPaused bool
}

func (c *consumer) Poll(ctx context.Context, buf []*stream.Record) ([]*stream.Record, error) {
	buf = buf[:0]
	limit := max(cap(buf), 1)
	for {
		c.applySeeks()
		if buf = c.takeHeld(buf, limit); len(buf) > 0 {
			return buf, nil
		}
		if err := c.waitBelowHold(ctx); err != nil {
			return buf, err
		}
		// A Seek interrupts the poll (cancelPoll): otherwise a seek back
		// on an idle partition would wait for a record that never comes.
		// So does a Resume with held records, which are ready at once.
		pollCtx, cancel := context.WithCancel(ctx)
		// A Resume after takeHeld looked and before cancelPoll was set
		// is seen here.
		c.mu.Lock()
		c.cancelPoll = cancel
		interrupted := len(c.seeks) > 0 || c.heldReadyLocked()
		c.mu.Unlock()
		if interrupted {
			cancel()
		}
		fetches := c.cl.PollRecords(pollCtx, limit)
		c.mu.Lock()
		c.cancelPoll = nil
		c.mu.Unlock()
		cancel()
		if fetches.IsClientClosed() {
			return buf, stream.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return buf, err
		}
		// Fetch errors are per partition and kgo retries them itself
		// (a topic being created answers UNKNOWN_TOPIC_OR_PARTITION for a
		// while): they are not the App's to stop on.
		// A partition's records go to the App unless the partition is
		// held; c.mu is taken once per partition, and records are
		// converted outside it (the App's workers Mark under it).
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if !c.receive(p) {
				for _, r := range p.Records {
					buf = append(buf, fromKgo(r))
				}
			}
		})
		if len(buf) > 0 {
			return buf, nil
		}
	}
}

// waitBelowHold returns at once unless the held records of the
// partitions kgo fetches have reached holdBytes and kgo may still fetch a
// paused partition, whose records would be held too. Then, if another
// partition starves, it pauses kgo's fetching of the slow partition and
// returns; otherwise it waits for a Resume, a Seek or a revocation (the
// App handling what is held) up to holdWait, and at holdWait pauses kgo's
// fetching of the paused partitions.
func (c *consumer) waitBelowHold(ctx context.Context) error {
	var timer *time.Timer
	for {
		c.mu.Lock()
		hold := c.atHoldLocked()
		if hold && c.starvingLocked() && c.pauseSlowLocked() {
			hold = false
		}
		c.mu.Unlock()
		if !hold {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(holdWait)
			defer timer.Stop()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wakePoll:
		case <-timer.C:
			c.pauseFetchingHeld()
			return nil
		}
	}
}

// atHoldLocked reports whether Poll must not poll kgo: the held records
// of the partitions kgo fetches at holdBytes (or all held records at
// twice that), none ready, and a paused partition kgo still fetches. c.mu
// is held.
func (c *consumer) atHoldLocked() bool {
	if c.heldBytes < holdBytes || len(c.seeks) > 0 {
		return false
	}
	fetching, fetchedBytes := false, 0
	for _, h := range c.held {
		if !h.paused && len(h.records) > 0 {
			return false // ready: the next takeHeld returns them
		}
		if !h.fetchPaused {
			fetchedBytes += h.bytes
			fetching = fetching || h.paused
		}
	}
	return fetching && (fetchedBytes >= holdBytes || c.heldBytes >= 2*holdBytes)
}

// starvingLocked reports whether a partition waits for records kgo would
// fetch for it: its last fetch left records on the broker, and it is
// neither paused by the App nor holding records (a partition resumed with
// held records is ready, and Poll does not wait then). A caught-up
// partition does not count: pausing a partition in kgo for it would cost
// a re-fetch for records that may never come. c.mu is held.
func (c *consumer) starvingLocked() bool {
	for tp, behind := range c.behind {
		if behind && c.held[tp] == nil {
			return true
		}
	}
	return false
}

// pauseSlowLocked pauses kgo's fetching of the paused partition that
// holds more than twice what the other partitions kgo fetches hold
// together, if there is one (at most one can), and reports whether it
// did. Between partitions whose handlers keep up the held records are
// spread about evenly, so a starving partition there is a passing state
// that a Resume ends, and pausing would only cost re-fetches. c.mu is
// held.
func (c *consumer) pauseSlowLocked() bool {
	fetchedBytes := 0
	for _, h := range c.held {
		if !h.fetchPaused {
			fetchedBytes += h.bytes
		}
	}
	for tp, h := range c.held {
		if h.paused && !h.fetchPaused && h.bytes > 2*(fetchedBytes-h.bytes) {
			h.fetchPaused = true
			c.cl.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
			return true
		}
	}
	return false
}

// pauseFetchingHeld pauses kgo's fetching of every paused partition.
func (c *consumer) pauseFetchingHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	pause := map[string][]int32{}
	for tp, h := range c.held {
		if h.paused && !h.fetchPaused {
			h.fetchPaused = true
			pause[tp.Topic] = append(pause[tp.Topic], tp.Partition)
		}
	}
	if len(pause) > 0 {
		// Under mu, so that kgo sees Pause and Resume in their order.
		c.cl.PauseFetchPartitions(pause)
	}
}

// signalPoll wakes a Poll waiting at holdBytes.
func (c *consumer) signalPoll() {
	select {
	case c.wakePoll <- struct{}{}:
	default:
	}
}

// receive notes whether p's fetch left records on the broker and keeps
// p's records (in offset order) when the partition is paused, or resumed
// with held records still to leave first; it reports whether the caller
// has nothing to hand to the App (the records were kept, or there were
// none).
func (c *consumer) receive(p kgo.FetchTopicPartition) bool {
	tp := stream.TopicPartition{Topic: p.Topic, Partition: p.Partition}
	if len(p.Records) == 0 {
		if p.Err == nil {
			// Fetched, and nothing came: caught up (or the response had
			// no room left; taken as caught up, the cautious reading).
			c.mu.Lock()
			if _, ok := c.behind[tp]; ok {
				c.behind[tp] = false
			}
			c.mu.Unlock()
		}
		return true
	}
	// The end a fetch can reach: the high watermark, or the last stable
	// offset below it (an open transaction: read_committed fetches stop
	// there; a read_uncommitted one may then be taken for caught up
	// while records remain, the cautious side).
	end := p.HighWatermark
	if p.LastStableOffset >= 0 && p.LastStableOffset < end {
		end = p.LastStableOffset
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.behind[tp] = p.Records[len(p.Records)-1].Offset+1 < end
	h := c.held[tp]
	if h == nil || (!h.paused && len(h.records) == 0) {
		return false
	}
	h.records = append(h.records, p.Records...)
	for _, r := range p.Records {
		h.bytes += len(r.Value)
		c.heldBytes += len(r.Value)
	}
	return true
}

// heldReadyLocked reports whether a resumed partition has held records.
func (c *consumer) heldReadyLocked() bool {
	for _, h := range c.held {
		if !h.paused && len(h.records) > 0 {
			return true
		}
	}
	return false
}

// takeHeld appends to buf, up to limit, the held records of partitions no
// longer paused, in offset order per partition.
func (c *consumer) takeHeld(buf []*stream.Record, limit int) []*stream.Record {
	var ready [][]*kgo.Record
	c.mu.Lock()
	room := limit - len(buf)
	for tp, h := range c.held {
		if h.paused || room == 0 {
			continue
		}
		n := min(len(h.records), room)
		ready = append(ready, h.records[:n:n])
		for _, r := range h.records[:n] {
			h.bytes -= len(r.Value)
			c.heldBytes -= len(r.Value)
		}
		h.records = h.records[n:]
		room -= n
		if len(h.records) == 0 {
			c.resumeFetchLocked(tp, h)
			delete(c.held, tp)
		}
	}
	c.mu.Unlock()
	for _, records := range ready {
		for _, r := range records {
			buf = append(buf, fromKgo(r))
		}
	}
	return buf
}

// fromKgo is r as the App's record, sharing r's slices.
func fromKgo(r *kgo.Record) *stream.Record {
	sr := &stream.Record{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Key:       r.Key,
		Value:     r.Value,
		Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		sr.Headers = make([]stream.Header, len(r.Headers))
		for i, h := range r.Headers {
			sr.Headers[i] = stream.Header{Key: h.Key, Value: h.Value}
		}
	}
	return sr
}

func (c *consumer) applySeeks() {
	c.mu.Lock()
	if len(c.seeks) == 0 {
		c.mu.Unlock()
		return
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	for tp, off := range c.seeks {
		if set[tp.Topic] == nil {
			set[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
		delete(c.seeks, tp)
	}
	c.mu.Unlock()
	c.cl.SetOffsets(set)
}

func (c *consumer) Mark(tp stream.TopicPartition, next int64) {
	c.mu.Lock()
	if next > c.marks[tp] {
		c.marks[tp] = next
	}
	c.mu.Unlock()
}

func (c *consumer) Seek(tp stream.TopicPartition, offset int64) {
	c.mu.Lock()
	c.seeks[tp] = offset
	c.k.txn.dropFrom(tp, offset) // under mu: before the redelivery can publish again
	if h := c.held[tp]; h != nil {
		// Fetched before the seek: kgo fetches again from offset, at once
		// (the redelivery waits for it).
		c.heldBytes -= h.bytes
		clear(h.records)
		h.records, h.bytes = nil, 0
		c.resumeFetchLocked(tp, h)
		if !h.paused {
			delete(c.held, tp)
		}
	}
	if c.cancelPoll != nil {
		c.cancelPoll()
	}
	c.mu.Unlock()
	c.signalPoll()
}

// Pause holds what is fetched for tp from now on (see consumer.held).
func (c *consumer) Pause(tp stream.TopicPartition) {
	c.mu.Lock()
	h := c.held[tp]
	if h == nil {
		h = &heldRecords{}
		c.held[tp] = h
	}
	h.paused = true
	c.mu.Unlock()
}

// Resume makes tp's held records ready for the next Poll (interrupting
// the one in progress) and lets kgo fetch it again.
func (c *consumer) Resume(tp stream.TopicPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[tp]
	if h == nil || !h.paused {
		return
	}
	h.paused = false
	// A partition whose fetching was paused (its handlers were stuck)
	// is fetched again once its held records are taken (takeHeld), not
	// before: fetched now, its records would be held again, and at
	// holdBytes Poll would wait holdWait once more for every partition.
	if len(h.records) == 0 {
		c.resumeFetchLocked(tp, h)
		delete(c.held, tp)
	} else if c.cancelPoll != nil {
		c.cancelPoll()
	}
	c.signalPoll()
}

// resumeFetchLocked lets kgo fetch tp again if the consumer had paused
// its fetching. c.mu is held.
func (c *consumer) resumeFetchLocked(tp stream.TopicPartition, h *heldRecords) {
	if h.fetchPaused {
		h.fetchPaused = false
		c.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
	}
}

func (c *consumer) commitLoop() {
	defer close(c.stopped)
	tick := time.NewTicker(c.k.commitInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.commit(ctx, nil) // a failed periodic commit is retried at the next tick
			cancel()
		}
	}
}

// commit commits the marks of only (all marks when only is nil) that moved
// since the last commit.
func (c *consumer) commit(ctx context.Context, only []stream.TopicPartition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	sent := map[stream.TopicPartition]int64{}
	c.mu.Lock()
	add := func(tp stream.TopicPartition) {
		next, ok := c.marks[tp]
		if !ok || next <= c.committed[tp] {
			return
		}
		if offsets[tp.Topic] == nil {
			offsets[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: next}
		sent[tp] = next
	}
	if only == nil {
		for tp := range c.marks {
			add(tp)
		}
	} else {
		for _, tp := range only {
			add(tp)
		}
	}
	c.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var commitErr error
	if c.k.txn != nil {
		commitErr = c.k.txn.commit(ctx, c, offsets)
	} else {
		commitErr = c.commitPlain(ctx, offsets)
	}
	if commitErr != nil {
		return commitErr
	}
	c.mu.Lock()
	for tp, next := range sent {
		if next > c.committed[tp] {
			c.committed[tp] = next
		}
	}
	c.mu.Unlock()
	return nil
}

// commitPlain commits offsets with an OffsetCommit.
func (c *consumer) commitPlain(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	var commitErr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		commitErr = err
		if err == nil {
			commitErr = responseError(resp)
		}
	})
	return commitErr
}

func toPartitions(m map[string][]int32) []stream.TopicPartition {
	var out []stream.TopicPartition
	for topic, ps := range m {
		for _, p := range ps {
			out = append(out, stream.TopicPartition{Topic: topic, Partition: p})
		}
	}
	return out
}

// revoked runs in kgo's rebalance: the App finishes the partitions'
// in-flight messages, then their marks are committed, before kgo lets the
// group hand them to another member.
func (c *consumer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	parts := toPartitions(revoked)
	if c.onRevoked != nil && len(parts) > 0 {
		c.onRevoked(parts)
	}
	_ = c.commit(ctx, parts) // a failure means the next owner redelivers: at least once
	c.forget(parts)
}

// lost: the partitions are gone (the member was fenced, or cut off from
// the group); another member may own them already, so their marks must
// not be committed by this member any more, not even after it rejoins.
// OnLost returns without waiting for the in-flight messages and marks
// nothing after it returns, so forgetting the marks then is final.
func (c *consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	parts := toPartitions(lost)
	switch {
	case len(parts) == 0:
	case c.onLost != nil:
		c.onLost(parts)
	case c.onRevoked != nil:
		c.onRevoked(parts)
	}
	c.forget(parts)
}

func (c *consumer) forget(parts []stream.TopicPartition) {
	c.mu.Lock()
	for _, tp := range parts {
		delete(c.marks, tp)
		delete(c.committed, tp)
		delete(c.seeks, tp)
		delete(c.behind, tp)
		if h := c.held[tp]; h != nil {
			// kgo's pauses outlive an assignment: a partition given back
			// later must be fetched again.
			if h.fetchPaused {
				c.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
			}
			c.heldBytes -= h.bytes
			delete(c.held, tp)
		}
	}
	c.mu.Unlock()
	c.signalPoll()
	c.k.txn.dropPartitions(parts)
}

// Close commits every mark and leaves the group.
func (c *consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.stopped
		c.closeErr = c.commit(ctx, nil)
		c.cl.Close() // leaves the group; its revoke commits nothing new
		c.k.txn.detach(c)
	})
	return c.closeErr
}
