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
//     stream. Nothing is divided among members, so there are no
//     rebalances: ConsumerConfig.OnRevoked is never called.
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
//     by two members: per-key order across members is not kept
//     (TestMaxAckPendingOneKeepsOrderAcrossMembers shows both sides),
//     unless MaxAckPending(1) allows the group one message in flight at a
//     time, at one message per round trip. Nor
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
// what the member holds unfinished, so that JetStream redelivers it at
// once to the next member instead of after AckWait, flushes, and returns
// without waiting for its pull requests still outstanding. What the server
// delivers into those is held and naked once they have ended (at most
// FetchExpiry; twice that for one whose end the server's answer, lost, did
// not tell); the transport's Close waits for that before it drains the
// connection (TestCloseDoesNotWaitForPullRequests). Acks are fire and forget; after a
// reconnect the consumer sends its recent acks again and waits for the
// server's answers (see maintain), because a restarting server was seen to
// lose acks it had read.
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
// and JetStream's delivery count does not move (TestNackWithTwoMembers
// fails with nak-based seeks).
//
// Flow control: each topic pipelines its pull requests, as nats.go's
// Consume does, over one subscription (see pull.go): a request is sent
// while the topic is not paused and what it has fetched and not yet
// polled, plus what it has asked for and not yet received, is at most
// FetchBatch/2, for the rest up to FetchBatch. Pause stops asking and
// holds back what was already fetched; Resume lets it go. What a member
// holds is thus bounded by FetchBatch plus the framework's in-flight
// window, and the group's by MaxAckPending.
//
// Producer.Publish returns after JetStream's PubAck: the message is stored
// (per the stream's storage and replicas) before a handler's message is
// acknowledged. The connection reconnects forever by default (nats.go
// options given to Transport override that); while it is down, Publish
// fails with nats.go's timeout after the publish deadline, no pull
// request is sent (after the reconnect, new ones at once), and acks wait
// in nats.go's reconnect buffer. A consumer whose
// durable is deleted, or whose connection is closed for good, makes Poll
// (and so App.Run) fail: a durable deleted while a pull request is
// outstanding by the server's 409, one deleted while none is (a paused
// topic, a full window) by the next request's 503 (no responders), after
// which the transport looks the durable up (TestDurableDeletedWhilePausedFailsRun).
package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
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
	// lingering, guarded by mu: each closed consumer whose pull requests
	// have not all ended yet, closed when they have (see consumer.linger).
	lingering map[*consumer]chan struct{}
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
		fetchExpiry:   time.Second,
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

// FetchBatch bounds what a topic keeps fetched ahead of the App, and
// asked of the server but not yet delivered, together (default 256); the
// next pull request is sent when that falls to FetchBatch/2.
func FetchBatch(n int) Option { return func(c *config) { c.fetchBatch = n } }

// FetchExpiry is how long one pull request waits for messages (default
// 1 s, at least 200 ms) before the next replaces it. It bounds how long
// the transport's Close waits for the pull requests of its closed
// consumers to end (twice FetchExpiry for a request whose end was lost; a
// consumer's Close does not wait), and an idle topic costs one pull
// request per FetchExpiry.
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
	n := &NATS{cfg: defaultConfig(), streams: map[string]string{}, lingering: map[*consumer]chan struct{}{}}
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

// Close waits for the pull requests of the consumers closed before it to
// end (at most FetchExpiry, twice that for one whose end was lost; see
// consumer.Close), then drains the connection (flushing acks, naks and
// publishes) and closes it. The App calls it after its consumer is
// closed.
func (n *NATS) Close() error {
	if n.nc == nil {
		return n.err
	}
	if n.nc.IsClosed() {
		return nil // closed before
	}
	n.mu.Lock()
	lingering := make([]chan struct{}, 0, len(n.lingering))
	for _, done := range n.lingering {
		lingering = append(lingering, done)
	}
	n.mu.Unlock()
	for _, done := range lingering {
		<-done
	}
	closed := n.nc.StatusChanged(natsclient.CLOSED)
	defer n.nc.RemoveStatusListener(closed)
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
		switch {
		case err == nil:
			name = s.CachedInfo().Config.Name
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			// Created meanwhile by another member, or the name is taken
			// by a stream of other subjects: only the first captures topic.
			if name, err = n.js.StreamNameBySubject(ctx, topic); err != nil {
				return "", fmt.Errorf("nats: stream name %q is taken by a stream that does not capture %q (see StreamConfig): %w",
					cfg.Name, topic, kerr.InvalidTopicException)
			}
		default:
			return "", fmt.Errorf("nats: creating stream %q for %q: %w", cfg.Name, topic, err)
		}
	}
	n.mu.Lock()
	n.streams[topic] = name
	n.mu.Unlock()
	return name, nil
}

func (n *NATS) forgetStream(topic string) {
	n.mu.Lock()
	delete(n.streams, topic)
	n.mu.Unlock()
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
	msg := &natsclient.Msg{Subject: rec.Topic, Data: rec.Value, Header: header}
	_, err = p.n.js.PublishMsg(ctx, msg)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		// Nobody received it (no responders: nothing was stored). The
		// stream looked up before may have been deleted since: look again
		// (creating it, unless ExpectStreams) and publish once more.
		p.n.forgetStream(rec.Topic)
		if _, lookupErr := p.n.streamFor(ctx, rec.Topic); lookupErr != nil {
			return lookupErr
		}
		_, err = p.n.js.PublishMsg(ctx, msg)
	}
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
	c.connClosed = n.nc.StatusChanged(natsclient.CLOSED)
	c.reconnected = n.nc.StatusChanged(natsclient.CONNECTED)
	for _, topic := range cfg.Topics {
		streamName, err := n.streamFor(ctx, topic)
		if err != nil {
			c.abandon()
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
			c.abandon()
			return nil, fmt.Errorf("nats: durable consumer %q on stream %q: %w", DurableName(cfg.Group, topic), streamName, err)
		}
		ts := &topicState{topic: topic, durable: DurableName(cfg.Group, topic), jc: jc, wakeFetch: make(chan struct{}, 1), inbox: n.nc.NewInbox(),
			nextSubject: "$JS.API.CONSUMER.MSG.NEXT." + streamName + "." + DurableName(cfg.Group, topic)}
		if ts.sub, err = n.nc.Subscribe(ts.inbox+".*", c.onMessage(ts)); err != nil {
			c.abandon()
			return nil, fmt.Errorf("nats: subscribing to the pull requests' replies: %w", err)
		}
		// What waits for the handler is bounded by the pull requests (at
		// most FetchBatch ahead, plus a lost request's), not by nats.go's
		// default pending limits (64 MiB would drop a batch of 1 MiB
		// messages as a slow consumer).
		if err = ts.sub.SetPendingLimits(-1, -1); err != nil {
			c.abandon()
			return nil, err
		}
		c.topics[topic] = ts
		c.order = append(c.order, ts)
	}
	sort.Slice(c.order, func(i, j int) bool { return c.order[i].topic < c.order[j].topic })
	for _, ts := range c.order {
		c.fetches.Add(1)
		go c.fetchLoop(ts)
	}
	c.loops.Add(1)
	go c.maintain()
	return c, nil
}

// consumer is one member's view of its group's durables, one topicState
// per topic.
//
// Invariants (under mu): a topic's held lists, in offset order, every
// message fetched by this member and not yet acked or nak'ed; its ready
// lists, in offset order, the records fetched (or queued again by Seek)
// and not yet returned by Poll, each of them held (none once closed).
// Only the subscription's handler (received) adds to held, only Mark,
// Close and the topic's fetchLoop at its end (nakLate) remove from it.
type consumer struct {
	n      *NATS
	topics map[string]*topicState // written only by Consume
	order  []*topicState          // the same, sorted by topic: Poll's round robin

	mu         sync.Mutex
	next       int      // guarded by mu: where Poll's round robin starts
	closing    bool     // guarded by mu: Close has begun; no new fetch starts
	closed     bool     // guarded by mu
	fatal      error    // guarded by mu: what stops Poll for good
	recent     []string // guarded by mu: the last recentAcks acks' subjects, a ring
	recentNext int      // guarded by mu: where the ring writes next once full
	pollWake   chan struct{}
	closedCh   chan struct{}

	connClosed   chan natsclient.Status // reports the connection's CLOSED
	reconnected  chan natsclient.Status // reports CONNECTED (after a reconnect)
	fetchCtx     context.Context        // cancelled by Close: no new fetch; the loops end
	stopFetching context.CancelFunc
	loops        sync.WaitGroup // maintain and resyncs
	fetches      sync.WaitGroup // fetchLoops: they end once Close began and their requests ended
	closeOnce    sync.Once
	closeErr     error
}

type topicState struct {
	topic       string
	durable     string
	jc          jetstream.Consumer
	nextSubject string                   // the durable's $JS.API.CONSUMER.MSG.NEXT subject
	inbox       string                   // reply subjects are inbox.<request id>
	sub         *natsclient.Subscription // on inbox.*, for the consumer's life
	wakeFetch   chan struct{}            // signalled when the fetch loop may go on

	held   []heldMsg        // guarded by consumer.mu
	ready  []*stream.Record // guarded by consumer.mu
	paused bool             // guarded by consumer.mu
	// drained, guarded by consumer.mu: the consumer is closed and every
	// request of the topic has ended (fetchLoop returned): a message
	// still coming is naked as it arrives.
	drained bool

	// The pull requests (see pull.go), guarded by consumer.mu.
	pulls     []pullRequest // outstanding, in the order sent
	asked     int           // messages asked for and not yet delivered (see settleLocked)
	pullsSent uint64        // requests sent, the last one's id
	failed    error         // the server refused a request: fetchLoop retries later
	answered  bool          // the server answered since fetchLoop last looked: the retry interval resets
	retryAt   time.Time     // no request before then
}

type heldMsg struct {
	offset int64
	msg    *natsclient.Msg // JetStream's ack methods: Ack, InProgress, Nak
	rec    *stream.Record  // as first delivered; Seek queues copies
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// received makes m, a message of one of ts's requests, held and ready.
func (c *consumer) received(ts *topicState, m *natsclient.Msg) {
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
		Value:     m.Data,
		Timestamp: meta.Timestamp,
	}
	decodeHeaders(m.Header, rec)
	c.mu.Lock()
	deliveredLocked(ts)
	ts.answered = true
	if ts.drained {
		// Close has naked what it held and its requests have ended (one
		// taken as lost delivered late): nak this one too, so that the
		// next member gets it at once.
		c.mu.Unlock()
		_ = m.Nak()
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
	if c.closed {
		// Delivered into a request still outstanding after Close: held
		// until the requests have ended, then naked (nakLate). Naked at
		// once, it could come back into the same request, again and
		// again while the request lasts.
		c.mu.Unlock()
		return
	}
	ts.ready = append(ts.ready, rec)
	c.mu.Unlock()
	signal(c.pollWake)
}

// errConnectionGone stops a consumer whose connection is closed for good.
var errConnectionGone = fmt.Errorf("nats: the connection is closed for good (reconnects exhausted?): %w", natsclient.ErrConnectionClosed)

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
			if len(ts.ready)+ts.asked <= c.n.cfg.fetchBatch/2 {
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
	// The acks are sent after the lock is released: the subscription's
	// handler (received) and Poll wait for it, and an ack waits for the
	// connection's lock.
	var stack [256]*natsclient.Msg
	acks := stack[:0]
	c.mu.Lock()
	i := 0
	for ; i < len(ts.held) && ts.held[i].offset < next; i++ {
		acks = append(acks, ts.held[i].msg)
		c.rememberAckLocked(ts.held[i].msg.Reply)
	}
	clear(ts.held[:i])
	ts.held = ts.held[i:]
	c.mu.Unlock()
	for _, m := range acks {
		// Fire and forget, as JetStream acks are: a lost ack means a
		// redelivery after AckWait (at least once), never a loss.
		_ = m.Ack()
	}
}

func (c *consumer) rememberAckLocked(reply string) {
	if len(c.recent) < recentAcks {
		c.recent = append(c.recent, reply)
		return
	}
	c.recent[c.recentNext] = reply
	c.recentNext = (c.recentNext + 1) % recentAcks
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

// recentAcks is how many of the last acks a consumer remembers, to send
// them again after a reconnect (see maintain).
const recentAcks = 4096

// resyncAttempts bounds how often an ack is retried after a reconnect
// while the server does not answer it (its consumer still loading), 100
// ms apart.
const resyncAttempts = 20

// maintain runs beside the fetches until Close. It renews the ack
// deadline of every held message every AckWait/3. After a reconnect it
// sends the recent acks again, each as a request the server answers once
// it has applied it: acks are fire and forget, and those in flight when
// the connection broke, or read by a server that was shutting down, are
// lost (a restarted server was seen to keep a message pending whose ack
// it had read before it stopped), which would turn a finished message
// into a redelivery after AckWait; acking a message again is a no-op. An
// ack older than the last recentAcks is left to that redelivery: at
// least once. And it stops the consumer when its connection closes for
// good (a paused consumer has no fetch that would notice).
func (c *consumer) maintain() {
	defer c.loops.Done()
	renew := time.NewTicker(c.n.cfg.ackWait / 3)
	defer renew.Stop()
	var msgs []*natsclient.Msg
	for {
		select {
		case <-c.fetchCtx.Done():
			return
		case <-c.connClosed:
			c.fail(errConnectionGone)
			return
		case <-c.reconnected:
			c.lostPulls()
			c.mu.Lock()
			replies := slices.Clone(c.recent)
			c.mu.Unlock()
			c.loops.Add(1) // while maintain holds its own: Close's Wait covers it
			go c.resync(replies)
		case <-renew.C:
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
}

// resyncParallel is how many acks resync has in flight: a round trip
// each, so that a far server does not make the resync take minutes.
const resyncParallel = 32

// resync sends replies' acks again, resyncParallel at a time; Close stops it.
func (c *consumer) resync(replies []string) {
	defer c.loops.Done()
	work := make(chan string)
	var workers sync.WaitGroup
	for range resyncParallel {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for reply := range work {
				c.resyncAck(reply)
			}
		}()
	}
	for _, reply := range replies {
		select {
		case work <- reply:
		case <-c.fetchCtx.Done():
		}
	}
	close(work)
	workers.Wait()
}

// resyncAck sends an ack again and waits for the server's answer,
// retrying while it has none.
func (c *consumer) resyncAck(reply string) {
	for range resyncAttempts {
		if c.fetchCtx.Err() != nil {
			return
		}
		if _, err := c.n.nc.Request(reply, ackBody, time.Second); err == nil || c.n.nc.IsClosed() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ackBody is JetStream's ack (jetstream.Msg.Ack sends the same).
var ackBody = []byte("+ACK")

// abandon undoes a Consume that failed before its goroutines started.
func (c *consumer) abandon() {
	c.stopFetching()
	c.removeListeners()
	c.unsubscribe()
}

func (c *consumer) unsubscribe() {
	for _, ts := range c.topics {
		if ts.sub != nil {
			_ = ts.sub.Unsubscribe()
		}
	}
}

func (c *consumer) removeListeners() {
	c.n.nc.RemoveStatusListener(c.connClosed)
	c.n.nc.RemoveStatusListener(c.reconnected)
}

// Close naks what this member holds unfinished (the framework has
// marked, and so acked, everything it finished) and flushes the acks and
// naks to the server; it does not wait for the pull requests still
// outstanding. Those end by the server's expiry (FetchExpiry; twice that
// for one whose end was lost: see pull.go) or when filled; until then the
// topic's subscription stays, holds what they still deliver, and naks it
// once they have ended (see linger), so the next member gets everything
// at once. The transport's Close waits for that. The connection stays for
// the transport's Close.
func (c *consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.stopFetching() // no new request; maintain and resyncs end
		c.loops.Wait()
		c.removeListeners()
		c.mu.Lock()
		for _, ts := range c.order {
			nakHeldLocked(ts)
			clear(ts.ready)
			ts.ready = nil
		}
		c.closed = true // a message still coming is held, then naked (received, nakLate)
		close(c.closedCh)
		c.mu.Unlock()
		c.linger()
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

// nakHeldLocked naks every message ts holds.
func nakHeldLocked(ts *topicState) {
	for _, h := range ts.held {
		_ = h.msg.Nak()
	}
	clear(ts.held)
	ts.held = nil
}

// nakLate is a fetchLoop's end: once the consumer is closed, what the
// topic's requests delivered after Close is naked, and anything later as
// it arrives (drained).
func (c *consumer) nakLate(ts *topicState) {
	c.mu.Lock()
	if c.closing {
		nakHeldLocked(ts)
		ts.drained = c.closed
	}
	c.mu.Unlock()
}

// linger registers the closed consumer with its transport until every
// fetchLoop has ended (each once the topic's requests have: at most
// lostAfter after Close), then unsubscribes: the transport's Close waits
// for it, so that nothing the server delivers into a request of a closed
// member waits for AckWait.
func (c *consumer) linger() {
	done := make(chan struct{})
	n := c.n
	n.mu.Lock()
	n.lingering[c] = done
	n.mu.Unlock()
	go func() {
		c.fetches.Wait()
		c.mu.Lock()
		for _, ts := range c.order {
			nakHeldLocked(ts) // (a fetchLoop that ended before closed was set)
			ts.drained = true
		}
		c.mu.Unlock()
		c.unsubscribe()
		n.mu.Lock()
		delete(n.lingering, c)
		n.mu.Unlock()
		close(done)
	}()
}
