// Package nats is the stream.Transport over NATS JetStream, with nats.go's
// jetstream package (the new API):
//
//	app := stream.New(nats.Transport("nats://127.0.0.1:4222"), stream.Group("billing"))
//
// How the stream model maps onto JetStream:
//
//   - topic -> subject. The topic is published as a literal NATS subject,
//     and a JetStream stream must capture it. By default the transport
//     looks for the stream that captures the subject and, when there is
//     none, creates one (named StreamName(topic), capturing the topic
//     only, file storage, limits retention: messages stay after they are
//     acknowledged, as a Kafka log's records do, so a new group reads them
//     from the start). ExpectStreams turns creation off: a topic without a
//     stream is then an UNKNOWN_TOPIC_OR_PARTITION error; StreamConfig
//     changes what is created.
//   - group -> a durable pull consumer, DurableName(group, topic), one per
//     (group, topic) because a JetStream consumer reads one stream. The
//     group's members (Apps) share it, and JetStream spreads its messages
//     over their pull requests. Explicit ack, AckWait and MaxAckPending as
//     configured, unlimited deliveries, delivering from the start of the
//     stream.
//   - key -> the header Sushka-Key (KeyHeader). Nats-Msg-Id is JetStream's
//     deduplication id, not a key. Keys and header values that are not
//     header-safe text travel base64-encoded (see encodeValue): binary keys
//     survive the trip.
//   - headers -> NATS headers. The values of one name keep their order;
//     across names NATS keeps none, and they are delivered sorted by name.
//   - offset -> the stream sequence minus one, so that the first message
//     of a stream has offset 0, as in Kafka. A stream that captures
//     several subjects leaves gaps in a topic's offsets; nothing in the
//     framework needs them dense.
//   - partition -> 0. JetStream has no partitions: publishing to another
//     partition fails with UNKNOWN_TOPIC_OR_PARTITION. Order: JetStream
//     delivers a consumer's messages in stream order, so one member sees
//     its messages in offset order (the framework's per-partition and
//     per-key order holds); with several members the group's messages are
//     spread over them and two messages of one key may be handled at once
//     by two members: per-key order across members is not kept. Nor
//     after JetStream redelivers a message whose AckWait passed (the
//     transport keeps the messages it holds alive, so that happens only
//     when a member stalls or its connection is gone that long).
//   - timestamp -> the message's metadata timestamp (when the server
//     stored it); a publish's Record.Timestamp is not carried.
//
// Acknowledgement. Mark(tp, next) acks exactly the messages this member
// holds below next: the framework marks only prefixes it has finished, so
// no message is acked before its handler returned. Messages a member has
// fetched and not finished are kept alive with +WIP (InProgress) every
// AckWait/3, so a slow handler or a paused topic does not make JetStream
// hand them to another member meanwhile. Close acks nothing more: it naks
// what the member holds unfinished, so that JetStream redelivers it at once
// to the next member instead of after AckWait.
//
// Seek(offset), the framework's redelivery after a nack, does not nak: a
// nak'ed message goes back to the shared consumer, may be delivered to
// another member, and comes after whatever JetStream has already sent
// this member, while the framework drops every record after a seek until
// the sought offset comes back. So the member would wait for a message it
// may never see, and would drop (never ack, never nak) what arrived
// before it. Instead the transport redelivers locally: it queues again,
// in offset order and ahead of anything newer, every message it holds from
// offset on (they are unacknowledged, because the framework's marks never
// pass a failed message). The result is Kafka's seek exactly: the same
// records from the same offset, the framework's attempts and backoff apply,
// and JetStream's delivery count does not move.
//
// Flow control: each topic has one pull request (Fetch) outstanding at a
// time, of at most FetchBatch messages, and a fetch is issued only while
// the topic is not paused and fewer than FetchBatch/2 fetched messages
// wait to be polled. Pause stops fetching and holds back what was already
// fetched; Resume lets it go. What a member holds is thus bounded by
// FetchBatch plus the framework's in-flight window, and the group's by
// MaxAckPending.
//
// Producer.Publish returns after JetStream's PubAck: the message is stored
// (per the stream's storage and replicas) before a handler's message is
// acknowledged. The connection reconnects forever by default (nats.go
// options given to Transport override that); while it is down, Publish
// fails with nats.go's timeout after the publish deadline, fetches are
// retried, and acks wait in nats.go's reconnect buffer. A consumer whose
// durable is deleted, or whose connection is closed for good, makes Poll
// (and so App.Run) fail.
package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/stream"
)

// NATS is the transport: one connection, shared by its producer and its
// consumers.
type NATS struct {
	cfg config
	nc  *natsclient.Conn
	js  jetstream.JetStream
	err error // from connecting: returned by every use

	mu      sync.Mutex
	streams map[string]string // guarded by mu: topic -> the stream that captures it
}

type config struct {
	createStreams bool
	streamConfig  func(topic string) jetstream.StreamConfig
	ackWait       time.Duration
	maxAckPending int
	fetchBatch    int
	fetchExpiry   time.Duration
	logger        *slog.Logger
}

// defaultConfig is the one home of the transport's defaults.
func defaultConfig() config {
	return config{
		createStreams: true,
		streamConfig: func(topic string) jetstream.StreamConfig {
			return jetstream.StreamConfig{
				Name:      StreamName(topic),
				Subjects:  []string{topic},
				Storage:   jetstream.FileStorage,
				Retention: jetstream.LimitsPolicy,
			}
		},
		ackWait:       30 * time.Second,
		maxAckPending: 1024,
		fetchBatch:    256,
		fetchExpiry:   5 * time.Second,
		logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (c config) validate() error {
	switch {
	case c.ackWait <= 0:
		return errors.New("nats: AckWait must be positive")
	case c.maxAckPending < 1:
		return errors.New("nats: MaxAckPending must be at least 1")
	case c.fetchBatch < 1:
		return errors.New("nats: FetchBatch must be at least 1")
	case c.fetchExpiry < 200*time.Millisecond:
		return fmt.Errorf("nats: FetchExpiry %v is below 200 ms", c.fetchExpiry)
	}
	return nil
}

// fetchHeartbeat is the idle heartbeat asked of each pull request: a
// quarter of its expiry, at most a second; nats.go fails the fetch after
// two missed heartbeats, which is how a dead connection is noticed.
func (c config) fetchHeartbeat() time.Duration { return min(c.fetchExpiry/4, time.Second) }

// Option configures the transport beyond the connection's options.
type Option func(*config)

// ExpectStreams makes the transport use only streams that exist: a topic
// that no stream captures is an error (UNKNOWN_TOPIC_OR_PARTITION) on
// publish and consume. By default a missing stream is created.
func ExpectStreams() Option { return func(c *config) { c.createStreams = false } }

// StreamConfig sets what the transport creates for a topic that no stream
// captures (default: StreamName(topic) capturing the topic, file storage,
// limits retention, the server's limits).
func StreamConfig(fn func(topic string) jetstream.StreamConfig) Option {
	return func(c *config) { c.streamConfig = fn }
}

// AckWait is the durable consumers' ack wait (default 30 s): how long
// JetStream waits for a delivered message's ack before it redelivers it.
// The transport renews it (+WIP) every AckWait/3 for what it holds.
func AckWait(d time.Duration) Option { return func(c *config) { c.ackWait = d } }

// MaxAckPending bounds the messages delivered and not yet acknowledged,
// for all members of a group together (default 1024).
func MaxAckPending(n int) Option { return func(c *config) { c.maxAckPending = n } }

// FetchBatch bounds one pull request and what a topic keeps fetched
// ahead of the App (default 256).
func FetchBatch(n int) Option { return func(c *config) { c.fetchBatch = n } }

// FetchExpiry is how long one pull request waits for messages (default
// 5 s, at least 200 ms) before the next replaces it; its idle heartbeat
// (see fetchHeartbeat) bounds how long a lost connection goes unnoticed.
func FetchExpiry(d time.Duration) Option { return func(c *config) { c.fetchExpiry = d } }

// Logger sets where transient errors (a fetch that failed and is
// retried) are logged (default: discard).
func Logger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Transport connects to the NATS server(s) at url (comma-separated) with
// nats.go's options opts (credentials, TLS, ...). It reconnects forever
// unless opts say otherwise.
func Transport(url string, opts ...natsclient.Option) *NATS { return New(url, opts) }

// New is Transport with transport options. A failure to connect is
// returned by every later use (Consume, Publish, Close).
func New(url string, natsOpts []natsclient.Option, opts ...Option) *NATS {
	n := &NATS{cfg: defaultConfig(), streams: map[string]string{}}
	for _, o := range opts {
		o(&n.cfg)
	}
	if n.err = n.cfg.validate(); n.err != nil {
		return n
	}
	connectOpts := append([]natsclient.Option{
		natsclient.Name("sushka-stream"),
		natsclient.MaxReconnects(-1),
		natsclient.ReconnectWait(200 * time.Millisecond),
	}, natsOpts...)
	if n.nc, n.err = natsclient.Connect(url, connectOpts...); n.err != nil {
		n.err = fmt.Errorf("nats: connect %s: %w", url, n.err)
		return n
	}
	if n.js, n.err = jetstream.New(n.nc); n.err != nil {
		n.nc.Close()
		n.nc = nil
	}
	return n
}

// Conn returns the transport's connection, nil if it could not connect.
func (n *NATS) Conn() *natsclient.Conn { return n.nc }

// JetStream returns the transport's JetStream context (for managing
// streams and consumers), nil if it could not connect.
func (n *NATS) JetStream() jetstream.JetStream { return n.js }

// Close drains the connection (flushing acks and publishes) and closes it.
// The App calls it after its consumer is closed.
func (n *NATS) Close() error {
	if n.nc == nil {
		return n.err
	}
	closed := n.nc.StatusChanged(natsclient.CLOSED)
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
		return fmt.Errorf("nats: drain: %w", err)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // nats.go's own DrainTimeout closes it by then
		n.nc.Close()
		return errors.New("nats: drain did not finish within 30 s")
	}
	return nil
}

// streamFor returns the stream that captures topic, creating it if none
// does and creation is allowed. Answers are cached for the transport's
// life.
func (n *NATS) streamFor(ctx context.Context, topic string) (string, error) {
	n.mu.Lock()
	name, ok := n.streams[topic]
	n.mu.Unlock()
	if ok {
		return name, nil
	}
	if err := validSubject(topic); err != nil {
		return "", err
	}
	name, err := n.js.StreamNameBySubject(ctx, topic)
	switch {
	case err == nil:
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return "", fmt.Errorf("nats: looking up the stream of %q: %w", topic, err)
	case !n.cfg.createStreams:
		return "", fmt.Errorf("nats: no JetStream stream captures subject %q (create one, or do not use ExpectStreams): %w",
			topic, kerr.UnknownTopicOrPartition)
	default:
		cfg := n.cfg.streamConfig(topic)
		s, err := n.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = n.js.Stream(ctx, cfg.Name) // created meanwhile by another member
		}
		if err != nil {
			return "", fmt.Errorf("nats: creating stream %q for %q: %w", cfg.Name, topic, err)
		}
		name = s.CachedInfo().Config.Name
	}
	n.mu.Lock()
	n.streams[topic] = name
	n.mu.Unlock()
	return name, nil
}

// Producer returns the transport's producer.
func (n *NATS) Producer() stream.Producer { return producer{n} }

type producer struct{ n *NATS }

// Publish publishes rec to the subject rec.Topic and waits for JetStream's
// PubAck. The key and headers become NATS headers (see the package doc).
func (p producer) Publish(ctx context.Context, rec *stream.Record) error {
	if p.n.err != nil {
		return p.n.err
	}
	if rec.Partition != stream.AnyPartition && rec.Partition != 0 {
		return fmt.Errorf("nats: topic %q: partition %d: JetStream subjects have partition 0 only: %w",
			rec.Topic, rec.Partition, kerr.UnknownTopicOrPartition)
	}
	if _, err := p.n.streamFor(ctx, rec.Topic); err != nil {
		return err
	}
	header, err := encodeHeaders(rec)
	if err != nil {
		return err
	}
	// nats.go copies Data and Header into its write buffer before
	// PublishMsg returns: rec may be reused afterwards.
	_, err = p.n.js.PublishMsg(ctx, &natsclient.Msg{Subject: rec.Topic, Data: rec.Value, Header: header})
	if err != nil {
		return fmt.Errorf("nats: publish to %q: %w", rec.Topic, err)
	}
	return nil
}

// Consume creates (or updates) the group's durable consumer on each topic
// and starts fetching.
func (n *NATS) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	if n.err != nil {
		return nil, n.err
	}
	if cfg.Group == "" {
		return nil, errors.New("nats: a consumer group is required (stream.Group)")
	}
	c := &consumer{
		n:        n,
		topics:   make(map[string]*topicState, len(cfg.Topics)),
		pollWake: make(chan struct{}, 1),
		closedCh: make(chan struct{}),
	}
	c.fetchCtx, c.stopFetching = context.WithCancel(context.Background())
	for _, topic := range cfg.Topics {
		streamName, err := n.streamFor(ctx, topic)
		if err != nil {
			return nil, err
		}
		jc, err := n.js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
			Durable:       DurableName(cfg.Group, topic),
			FilterSubject: topic,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       n.cfg.ackWait,
			MaxAckPending: n.cfg.maxAckPending,
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("nats: durable consumer %q on stream %q: %w", DurableName(cfg.Group, topic), streamName, err)
		}
		ts := &topicState{topic: topic, jc: jc, wakeFetch: make(chan struct{}, 1)}
		c.topics[topic] = ts
		c.order = append(c.order, ts)
	}
	sort.Slice(c.order, func(i, j int) bool { return c.order[i].topic < c.order[j].topic })
	for _, ts := range c.order {
		c.loops.Add(1)
		go c.fetchLoop(ts)
	}
	c.loops.Add(1)
	go c.keepAlive()
	return c, nil
}

// consumer is one member's view of its group's durables, one topicState
// per topic.
//
// Invariants (under mu): a topic's held lists, in offset order, every
// message fetched by this member and not yet acked or nak'ed; its ready
// lists, in offset order, the records fetched (or queued again by Seek)
// and not yet returned by Poll, each of them held. Only fetchLoop adds to
// held, only Mark and Close remove from it.
type consumer struct {
	n      *NATS
	topics map[string]*topicState // written only by Consume
	order  []*topicState          // the same, sorted by topic: Poll's round robin

	mu       sync.Mutex
	next     int   // guarded by mu: where Poll's round robin starts
	closing  bool  // guarded by mu: Close has begun; new arrivals are nak'ed
	closed   bool  // guarded by mu
	fatal    error // guarded by mu: what stops Poll for good
	pollWake chan struct{}
	closedCh chan struct{}

	fetchCtx     context.Context // cancelled by Close: ends the fetches in flight
	stopFetching context.CancelFunc
	loops        sync.WaitGroup // fetchLoops and keepAlive
	closeOnce    sync.Once
	closeErr     error
}

type topicState struct {
	topic     string
	jc        jetstream.Consumer
	wakeFetch chan struct{} // signalled when the fetch loop may go on

	held   []heldMsg        // guarded by consumer.mu
	ready  []*stream.Record // guarded by consumer.mu
	paused bool             // guarded by consumer.mu
}

type heldMsg struct {
	offset int64
	msg    jetstream.Msg
	rec    *stream.Record // as first delivered; Seek queues copies
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fetchRoomLocked is how many messages ts may fetch now (0: wait).
func (c *consumer) fetchRoomLocked(ts *topicState) int {
	if c.closing || ts.paused || len(ts.ready) > c.n.cfg.fetchBatch/2 {
		return 0
	}
	return c.n.cfg.fetchBatch - len(ts.ready)
}

// fetchLoop keeps one pull request of ts outstanding while there is room.
func (c *consumer) fetchLoop(ts *topicState) {
	defer c.loops.Done()
	retry := 50 * time.Millisecond
	for {
		c.mu.Lock()
		room := c.fetchRoomLocked(ts)
		c.mu.Unlock()
		if room == 0 {
			select {
			case <-ts.wakeFetch:
				continue
			case <-c.fetchCtx.Done():
				return
			}
		}
		err := c.fetchOnce(ts, room)
		if c.fetchCtx.Err() != nil {
			return
		}
		if err == nil {
			retry = 50 * time.Millisecond
			continue
		}
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
			errors.Is(err, natsclient.ErrConnectionClosed) || c.n.nc.IsClosed() {
			c.fail(fmt.Errorf("nats: fetching %q: %w", ts.topic, err))
			return
		}
		// A lost connection (missed heartbeats), a server restarting: try
		// again, a little later each time, up to a second.
		c.n.cfg.logger.Warn("nats: fetch failed; retrying", "topic", ts.topic, "error", err, "retry_in", retry)
		select {
		case <-time.After(retry):
		case <-c.fetchCtx.Done():
			return
		}
		retry = min(2*retry, time.Second)
	}
}

func (c *consumer) fetchOnce(ts *topicState, room int) error {
	ctx, cancel := context.WithTimeout(c.fetchCtx, c.n.cfg.fetchExpiry)
	defer cancel()
	batch, err := ts.jc.Fetch(room, jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(c.n.cfg.fetchHeartbeat()))
	if err != nil {
		return err
	}
	for m := range batch.Messages() {
		c.received(ts, m)
	}
	err = batch.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil // the request expired (or Close ended it): not a failure
	}
	return err
}

// received makes m held and ready.
func (c *consumer) received(ts *topicState, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream delivery (no ack subject): nothing to ack either.
		c.n.cfg.logger.Warn("nats: a fetched message without metadata", "topic", ts.topic, "error", err)
		return
	}
	rec := &stream.Record{
		Topic:     ts.topic,
		Partition: 0,
		Offset:    int64(meta.Sequence.Stream) - 1,
		Value:     m.Data(),
		Timestamp: meta.Timestamp,
	}
	decodeHeaders(m.Headers(), rec)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		_ = m.Nak() // arrived as the member closes: let another member have it now
		return
	}
	i := sort.Search(len(ts.held), func(i int) bool { return ts.held[i].offset >= rec.Offset })
	if i < len(ts.held) && ts.held[i].offset == rec.Offset {
		// JetStream redelivered what we hold (its AckWait passed while we
		// could not renew it): the held delivery stands, and an ack of it
		// acks this one too.
		c.mu.Unlock()
		return
	}
	ts.held = append(ts.held, heldMsg{})
	copy(ts.held[i+1:], ts.held[i:])
	ts.held[i] = heldMsg{offset: rec.Offset, msg: m, rec: rec}
	ts.ready = append(ts.ready, rec)
	c.mu.Unlock()
	signal(c.pollWake)
}

func (c *consumer) fail(err error) {
	c.mu.Lock()
	if c.fatal == nil && !c.closing {
		c.fatal = err
	}
	c.mu.Unlock()
	signal(c.pollWake)
}

// Poll returns ready records of the topics that are not paused, taking
// them round robin over the topics.
func (c *consumer) Poll(ctx context.Context, buf []*stream.Record) ([]*stream.Record, error) {
	buf = buf[:0]
	limit := max(cap(buf), 1)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return buf, stream.ErrClosed
		}
		if c.fatal != nil {
			err := c.fatal
			c.mu.Unlock()
			return buf, err
		}
		for k := 0; k < len(c.order) && len(buf) < limit; k++ {
			ts := c.order[(c.next+k)%len(c.order)]
			if ts.paused || len(ts.ready) == 0 {
				continue
			}
			take := min(len(ts.ready), limit-len(buf))
			buf = append(buf, ts.ready[:take]...)
			rest := copy(ts.ready, ts.ready[take:])
			clear(ts.ready[rest:])
			ts.ready = ts.ready[:rest]
			if len(ts.ready) <= c.n.cfg.fetchBatch/2 {
				signal(ts.wakeFetch)
			}
		}
		c.next++
		c.mu.Unlock()
		if len(buf) > 0 {
			return buf, nil
		}
		select {
		case <-ctx.Done():
			return buf, ctx.Err()
		case <-c.closedCh:
		case <-c.pollWake:
		}
	}
}

// Mark acks every held message of tp below next.
func (c *consumer) Mark(tp stream.TopicPartition, next int64) {
	ts := c.topics[tp.Topic]
	if ts == nil || tp.Partition != 0 {
		return
	}
	c.mu.Lock()
	i := 0
	for ; i < len(ts.held) && ts.held[i].offset < next; i++ {
		// Fire and forget, as JetStream acks are: a lost ack means a
		// redelivery after AckWait (at least once), never a loss.
		_ = ts.held[i].msg.Ack()
	}
	clear(ts.held[:i])
	ts.held = ts.held[i:]
	c.mu.Unlock()
}

// Seek queues again, ahead of anything newer, every held message of tp
// from offset on (see the package doc: a local redelivery).
func (c *consumer) Seek(tp stream.TopicPartition, offset int64) {
	ts := c.topics[tp.Topic]
	if ts == nil || tp.Partition != 0 {
		return
	}
	c.mu.Lock()
	clear(ts.ready)
	ts.ready = ts.ready[:0]
	i := sort.Search(len(ts.held), func(i int) bool { return ts.held[i].offset >= offset })
	for _, h := range ts.held[i:] {
		again := *h.rec // a fresh Record: the old one may still be on its way to the dropped
		ts.ready = append(ts.ready, &again)
	}
	c.mu.Unlock()
	signal(c.pollWake)
}

// Pause stops fetching tp and holds back what was fetched.
func (c *consumer) Pause(tp stream.TopicPartition) {
	if ts := c.topics[tp.Topic]; ts != nil && tp.Partition == 0 {
		c.mu.Lock()
		ts.paused = true
		c.mu.Unlock()
	}
}

// Resume undoes Pause.
func (c *consumer) Resume(tp stream.TopicPartition) {
	if ts := c.topics[tp.Topic]; ts != nil && tp.Partition == 0 {
		c.mu.Lock()
		ts.paused = false
		c.mu.Unlock()
		signal(ts.wakeFetch)
		signal(c.pollWake)
	}
}

// keepAlive renews the ack deadline of every held message every AckWait/3.
func (c *consumer) keepAlive() {
	defer c.loops.Done()
	tick := time.NewTicker(c.n.cfg.ackWait / 3)
	defer tick.Stop()
	var msgs []jetstream.Msg
	for {
		select {
		case <-c.fetchCtx.Done():
			return
		case <-tick.C:
		}
		msgs = msgs[:0]
		c.mu.Lock()
		for _, ts := range c.order {
			for _, h := range ts.held {
				msgs = append(msgs, h.msg)
			}
		}
		c.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress() // fails only for a message acked meanwhile, or a closed connection
		}
		clear(msgs)
	}
}

// Close ends the fetches, naks what this member holds unfinished (the
// framework has marked, and so acked, everything it finished), and flushes
// the acks to the server. The connection stays for the transport's Close.
func (c *consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.stopFetching()
		c.loops.Wait()
		c.mu.Lock()
		for _, ts := range c.order {
			for _, h := range ts.held {
				_ = h.msg.Nak()
			}
			clear(ts.held)
			ts.held, ts.ready = nil, nil
		}
		c.closed = true
		close(c.closedCh)
		c.mu.Unlock()
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second) // FlushWithContext needs a deadline
			defer cancel()
		}
		if err := c.n.nc.FlushWithContext(ctx); err != nil {
			c.closeErr = fmt.Errorf("nats: flushing acks: %w", err)
		}
	})
	return c.closeErr
}
