package streambench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
)

// ClientOpts are the kgo options of every client in every loop: the raw
// loop's producer and consumer, and the Kafka transport's (which adds the
// consumer's group options itself, as rawConsumerOpts does for the raw
// loop). kgo's defaults otherwise: acks=all, idempotent producer.
func ClientOpts(seeds []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("sushka-bench-stream")}
}

// rawConsumerOpts are the consumer options stream/kafka's Consume adds to
// ClientOpts, set the same way for the raw loop: the group, the topic, no
// auto-commit, a group without commits starting at the start, and a commit
// of what is marked when partitions are revoked.
func rawConsumerOpts(group, topic string, commit func(context.Context)) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, _ map[string][]int32) { commit(ctx) }),
	}
}

// Kafka is the target of a Kafka-protocol broker: Sushka or any Kafka.
type Kafka struct {
	name, describe string
	seeds          []string
	adminClient    *kgo.Client
	admin          *kadm.Client
	keepTopics     bool
}

// NewKafka returns the target named name at seeds; describe is what the
// passport says about the broker (how it runs, its durability).
func NewKafka(name string, seeds []string, describe string, keepTopics bool) (*Kafka, error) {
	cl, err := kgo.NewClient(ClientOpts(seeds)...)
	if err != nil {
		return nil, err
	}
	return &Kafka{name: name, describe: describe, seeds: seeds, adminClient: cl, admin: kadm.NewClient(cl), keepTopics: keepTopics}, nil
}

func (k *Kafka) Name() string     { return k.name }
func (k *Kafka) Describe() string { return k.describe }
func (k *Kafka) Client() string {
	return "github.com/twmb/franz-go " + bench.ModuleVersion("github.com/twmb/franz-go") + " (kgo)"
}

func (k *Kafka) Partitions(requested int32) int32 { return requested }

func (k *Kafka) Close() error {
	k.adminClient.Close()
	return nil
}

// RunLoop runs one loop on a fresh topic and group.
func (k *Kafka) RunLoop(ctx context.Context, loop Loop, run *Run) (Result, error) {
	topic := run.Name
	group := run.Name + "-group"
	resp, err := k.admin.CreateTopic(ctx, run.Partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return Result{}, fmt.Errorf("create topic %s: %w", topic, err)
	}
	if !k.keepTopics {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = k.admin.DeleteTopics(dctx, topic)
		}()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := newMeter()
	assigned := make(chan struct{})
	onAssigned := kgo.OnPartitionsAssigned(assignedHook(topic, run.Partitions, assigned))
	var res Result
	switch loop {
	case Raw:
		res, err = k.raw(ctx, run, topic, group, m, onAssigned, assigned)
	case Adapter:
		res, err = k.adapter(ctx, run, topic, group, m, onAssigned, assigned)
	case Framework:
		res, err = k.framework(ctx, run, topic, group, m, onAssigned, assigned)
	default:
		err = fmt.Errorf("unknown loop %d", loop)
	}
	if err == nil {
		err = res.Check(run)
	}
	return res, err
}

// assignedHook closes assigned once every partition of topic is assigned
// to the member: the group is joined and the consumer subscribed.
func assignedHook(topic string, partitions int32, assigned chan struct{}) func(context.Context, *kgo.Client, map[string][]int32) {
	var mu sync.Mutex
	seen := map[int32]bool{}
	return func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range a[topic] {
			seen[p] = true
		}
		if len(seen) == int(partitions) && assigned != nil {
			close(assigned)
			assigned = nil
		}
	}
}

// waitAssigned waits for the subscription, or for failed (a loop whose
// consumer stopped early) or ctx.
func waitAssigned(ctx context.Context, assigned <-chan struct{}, failed <-chan error) error {
	select {
	case <-assigned:
		return nil
	case err := <-failed:
		return fmt.Errorf("consumer stopped before it was assigned its partitions: %v", err)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the group's assignment: %w", ctx.Err())
	}
}

// pollUntilDone derives the polling context: cancelled when the last
// message was handled, so that a poll waiting for more returns.
func pollUntilDone(ctx context.Context, m *meter) (context.Context, context.CancelFunc) {
	pollCtx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case <-m.done:
		case <-pollCtx.Done():
		}
		stop()
	}()
	return pollCtx, stop
}

// endOfPolling is the loops' reason to stop polling: nil once every
// message was handled, else the context's end as errNotDelivered.
func endOfPolling(ctx context.Context, m *meter) (stop bool, err error) {
	select {
	case <-m.done:
		return true, nil
	default:
	}
	if ctx.Err() != nil {
		return true, fmt.Errorf("%w: %d of %d", errNotDelivered, m.received.Load(), m.total.Load())
	}
	return false, nil
}

// raw is the raw client's loop: kgo's PollRecords, the shared handler
// side (keyLanes: a goroutine per partition, as the framework's workers),
// marks committed every CommitInterval by a goroutine of its own and on
// close, as the transport does.
func (k *Kafka) raw(ctx context.Context, run *Run, topic, group string, m *meter, onAssigned kgo.Opt, assigned <-chan struct{}) (Result, error) {
	producer, err := kgo.NewClient(ClientOpts(k.seeds)...)
	if err != nil {
		return Result{}, err
	}
	defer producer.Close()
	c := &rawCommitter{marks: map[partitionKey]int64{}, committed: map[partitionKey]int64{}}
	opts := append(append(ClientOpts(k.seeds), rawConsumerOpts(group, topic, func(ctx context.Context) { _ = c.commit(ctx) })...), onAssigned)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return Result{}, err
	}
	c.cl = cl
	stopCommits := c.start()
	closed := false
	defer func() {
		if !closed {
			stopCommits()
			cl.Close()
		}
	}()
	loop := newConsumeLoop(run.Scenario, m, c.mark)
	pollCtx, stopPoll := pollUntilDone(ctx, m)
	defer stopPoll()
	polling := make(chan error, 1)
	go func() {
		polling <- func() error {
			for {
				start := time.Now()
				fetches := cl.PollRecords(pollCtx, PollRecords)
				m.polled(start, fetches.NumRecords())
				if fetches.IsClientClosed() {
					return errors.New("client closed")
				}
				if stop, err := endOfPolling(pollCtx, m); stop {
					return err
				}
				fetches.EachRecord(func(r *kgo.Record) {
					loop.dispatch(item{r.Topic, r.Partition, r.Offset, r.Key, r.Value})
				})
			}
		}()
	}()
	if err := waitAssigned(ctx, assigned, polling); err != nil {
		return Result{}, err
	}
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	published := publish(pubCtx, run, m, func(ctx context.Context, key, value []byte) error {
		return producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}).FirstErr()
	})
	pollErr := <-polling
	if pollErr != nil {
		stopPublishing()
	}
	pollErr = errors.Join(pollErr, loop.close())
	stopCommits()
	commitErr := c.commit(ctx)
	cl.Close()
	closed = true
	res := m.finished()
	return res, errors.Join(pollErr, commitErr, <-published)
}

// rawCommitter is the raw loop's commit of marks: the same bookkeeping
// as stream/kafka's consumer (marks under a mutex, a commit sends only
// what moved since the last one).
type rawCommitter struct {
	cl        *kgo.Client
	mu        sync.Mutex
	marks     map[partitionKey]int64 // guarded by mu
	committed map[partitionKey]int64 // guarded by mu
}

func (c *rawCommitter) mark(topic string, partition int32, next int64) {
	k := partitionKey{topic, partition}
	c.mu.Lock()
	if next > c.marks[k] {
		c.marks[k] = next
	}
	c.mu.Unlock()
}

// start commits every CommitInterval until the returned function is called
// (which waits for a commit in progress).
func (c *rawCommitter) start() (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(CommitInterval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = c.commit(ctx) // retried at the next tick
				cancel()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-stopped }) }
}

func (c *rawCommitter) commit(ctx context.Context) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	sent := map[partitionKey]int64{}
	c.mu.Lock()
	for k, next := range c.marks {
		if next <= c.committed[k] {
			continue
		}
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: next}
		sent[k] = next
	}
	c.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	var commitErr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		commitErr = err
		if err != nil {
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("commit %s[%d]: %w", t.Topic, p.Partition, e)
				}
			}
		}
	})
	if commitErr != nil {
		return commitErr
	}
	c.mu.Lock()
	for k, next := range sent {
		c.committed[k] = max(c.committed[k], next)
	}
	c.mu.Unlock()
	return nil
}

// transport is the Kafka transport every adapter and framework run uses:
// ClientOpts, the subscription hook, the shared commit interval.
func (k *Kafka) transport(onAssigned kgo.Opt) *kafka.Kafka {
	return kafka.New(ClientOpts(k.seeds), kafka.ConsumerOpts(onAssigned), kafka.CommitInterval(CommitInterval))
}

// adapter is the transport's own Consumer (Poll, Mark, Close) and
// Producer (Publish) driven by the shared handler, without the App.
func (k *Kafka) adapter(ctx context.Context, run *Run, topic, group string, m *meter, onAssigned kgo.Opt, assigned <-chan struct{}) (Result, error) {
	tr := k.transport(onAssigned)
	defer tr.Close()
	return adapterLoop(ctx, run, topic, group, m, tr, assigned)
}

// adapterLoop runs the adapter loop over any transport whose consumer
// closes assigned once subscribed; a nil assigned means subscribed when
// Consume returns (JetStream: the durable consumer exists).
func adapterLoop(ctx context.Context, run *Run, topic, group string, m *meter, tr stream.Transport, assigned <-chan struct{}) (Result, error) {
	consumer, err := tr.Consume(ctx, stream.ConsumerConfig{Group: group, Topics: []string{topic}})
	if err != nil {
		return Result{}, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = consumer.Close(context.Background())
		}
	}()
	loop := newConsumeLoop(run.Scenario, m, func(topic string, partition int32, next int64) {
		consumer.Mark(stream.TopicPartition{Topic: topic, Partition: partition}, next)
	})
	pollCtx, stopPoll := pollUntilDone(ctx, m)
	defer stopPoll()
	polling := make(chan error, 1)
	go func() {
		polling <- func() error {
			buf := make([]*stream.Record, 0, PollRecords)
			for {
				start := time.Now()
				records, err := consumer.Poll(pollCtx, buf)
				m.polled(start, len(records))
				if stop, err := endOfPolling(pollCtx, m); stop {
					return err
				}
				if err != nil {
					return err
				}
				for _, r := range records {
					loop.dispatch(item{r.Topic, r.Partition, r.Offset, r.Key, r.Value})
				}
				buf = records
			}
		}()
	}()
	if assigned != nil {
		if err := waitAssigned(ctx, assigned, polling); err != nil {
			return Result{}, err
		}
	}
	producer := tr.Producer()
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	published := publish(pubCtx, run, m, func(ctx context.Context, key, value []byte) error {
		return producer.Publish(ctx, &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: key, Value: value})
	})
	pollErr := <-polling
	if pollErr != nil {
		stopPublishing()
	}
	pollErr = errors.Join(pollErr, loop.close())
	closeErr := consumer.Close(ctx)
	closed = true
	res := m.finished()
	return res, errors.Join(pollErr, closeErr, <-published)
}

// framework is the service as a user writes it, on the Kafka transport.
func (k *Kafka) framework(ctx context.Context, run *Run, topic, group string, m *meter, onAssigned kgo.Opt, assigned <-chan struct{}) (Result, error) {
	return frameworkLoop(ctx, run, topic, group, m, k.transport(onAssigned), assigned)
}

// frameworkLoop runs the framework loop over any transport whose consumer
// closes assigned once subscribed; a nil assigned means subscribed when
// the App's Consume returns. The App owns (and closes) tr.
func frameworkLoop(ctx context.Context, run *Run, topic, group string, m *meter, tr stream.Transport, assigned <-chan struct{}) (Result, error) {
	timed := &timedTransport{Transport: tr, m: m, consuming: make(chan struct{})}
	if assigned == nil {
		assigned = timed.consuming
	}
	app := stream.New(timed, stream.Group(group))
	handle := func(_ context.Context, o Order) error {
		m.handled(o.ID)
		return nil
	}
	switch sc := run.Scenario; {
	case sc.BatchMaxCount > 0:
		stream.HandleBatch(app, topic, func(_ context.Context, orders []Order) error {
			for i := range orders {
				m.handled(orders[i].ID)
			}
			return nil
		}, stream.BatchMaxCount(sc.BatchMaxCount), stream.BatchMaxWait(0))
	case sc.KeyLanes > 1:
		stream.Consume(app, topic, handle, stream.KeyConcurrency(sc.KeyLanes), stream.MaxInFlight(MaxInFlight))
	default:
		stream.Consume(app, topic, handle)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	running := make(chan error, 1)
	go func() { running <- app.Run(runCtx) }()
	go func() {
		select {
		case <-m.done:
			stopRun()
		case <-runCtx.Done():
		}
	}()
	if err := waitAssigned(ctx, assigned, running); err != nil {
		stopRun()
		return Result{}, err
	}
	producer := app.Producer()
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	published := publish(pubCtx, run, m, func(ctx context.Context, key, value []byte) error {
		return producer.Publish(ctx, &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: key, Value: value})
	})
	runErr := <-running
	if runErr != nil {
		stopPublishing()
	}
	if _, err := endOfPolling(ctx, m); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return timed.result(), errors.Join(runErr, <-published)
}

// timedTransport wraps the framework loop's transport to take the same
// measurements the other loops take around their own calls: the poll's
// wait and the window's end when the consumer's close (the commit of the
// last offset) returns. It adds one interface call per poll and mark.
type timedTransport struct {
	stream.Transport
	m *meter
	// consuming is closed when Consume has returned a consumer.
	consuming chan struct{}

	mu     sync.Mutex
	res    Result // guarded by mu
	closed bool   // guarded by mu
}

func (t *timedTransport) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	c, err := t.Transport.Consume(ctx, cfg)
	if err != nil {
		return nil, err
	}
	close(t.consuming)
	return &timedConsumer{Consumer: c, t: t}, nil
}

func (t *timedTransport) result() Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		return t.m.finished()
	}
	return t.res
}

type timedConsumer struct {
	stream.Consumer
	t *timedTransport
}

func (c *timedConsumer) Poll(ctx context.Context, buf []*stream.Record) ([]*stream.Record, error) {
	start := time.Now()
	records, err := c.Consumer.Poll(ctx, buf)
	c.t.m.polled(start, len(records))
	return records, err
}

func (c *timedConsumer) Close(ctx context.Context) error {
	err := c.Consumer.Close(ctx)
	res := c.t.m.finished()
	c.t.mu.Lock()
	if !c.t.closed {
		c.t.res, c.t.closed = res, true
	}
	c.t.mu.Unlock()
	return err
}
