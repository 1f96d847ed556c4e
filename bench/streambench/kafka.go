package streambench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
	// generator is the one producer that publishes every run's backlog
	// (ClientOpts: the same payloads in the same order for every loop).
	generator  *kgo.Client
	keepTopics bool
	cpu        cpuClock
}

// NewKafka returns the target named name at seeds; describe is what the
// passport says about the broker (how it runs, its durability). The
// broker's CPU is measured when a process of this machine listens on the
// first seed.
func NewKafka(name string, seeds []string, describe string, keepTopics bool) (*Kafka, error) {
	cl, err := kgo.NewClient(ClientOpts(seeds)...)
	if err != nil {
		return nil, err
	}
	gen, err := kgo.NewClient(ClientOpts(seeds)...)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &Kafka{name: name, describe: describe, seeds: seeds, adminClient: cl, admin: kadm.NewClient(cl), generator: gen,
		keepTopics: keepTopics, cpu: cpuClock{brokerPID: bench.ListenerPID(seeds[0])}}, nil
}

func (k *Kafka) Name() string     { return k.name }
func (k *Kafka) Describe() string { return k.describe }
func (k *Kafka) Client() string {
	return "github.com/twmb/franz-go " + bench.ModuleVersion("github.com/twmb/franz-go") + " (kgo)"
}

func (k *Kafka) Partitions(requested int32) int32 { return requested }

func (k *Kafka) Close() error {
	k.generator.Close()
	k.adminClient.Close()
	return nil
}

// RunLoop runs one loop on a fresh topic and group: the group's position
// is committed at the start of every partition, the generator publishes
// the backlog, and only then does the loop's consumer start.
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
	var res Result
	if run.Scenario.Publish {
		res, err = k.publishLoop(ctx, loop, run, topic)
	} else {
		res, err = k.consumeLoop(ctx, loop, run, topic, group)
	}
	if err == nil {
		err = res.Check(run)
	}
	return res, err
}

func (k *Kafka) consumeLoop(ctx context.Context, loop Loop, run *Run, topic, group string) (Result, error) {
	if err := k.startAtZero(ctx, group, topic, run.Partitions); err != nil {
		return Result{}, err
	}
	if err := k.fill(ctx, topic, run); err != nil {
		return Result{}, err
	}
	m, stopProfile, err := consumerMeter(k.cpu, run)
	if err != nil {
		return Result{}, err
	}
	defer stopProfile()
	switch loop {
	case Raw:
		return k.raw(ctx, run, topic, group, m)
	case Adapter:
		tr := k.transport()
		defer tr.Close()
		return adapterLoop(ctx, run, topic, group, m, tr)
	case Framework:
		return frameworkLoop(ctx, run, topic, group, m, k.transport())
	}
	return Result{}, fmt.Errorf("unknown loop %d", loop)
}

// startAtZero commits offset 0 of every partition for group before the
// first publish: the group's position is fixed at the start of the topic,
// so nothing the generator publishes can be missed, whatever the
// consumer's reset policy.
func (k *Kafka) startAtZero(ctx context.Context, group, topic string, partitions int32) error {
	offsets := kadm.Offsets{}
	for p := range partitions {
		offsets.Add(kadm.Offset{Topic: topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	resp, err := k.admin.CommitOffsets(ctx, group, offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit the start of %s for group %s: %w", topic, group, err)
	}
	return nil
}

// fill publishes the run's backlog, messages 0..run.Messages-1, through
// the shared generator, and waits for every acknowledgement.
func (k *Kafka) fill(ctx context.Context, topic string, run *Run) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range run.Messages {
		key, value := run.Payloads.Message(i)
		wg.Add(1)
		k.generator.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				once.Do(func() { first = fmt.Errorf("publish the backlog's message %d: %w", i, err) })
			}
			wg.Done()
		})
	}
	wg.Wait()
	return first
}

// publishLoop is the publish scenario on a Kafka broker: each loop's own
// publisher (kgo ProduceSync, the transport's Producer.Publish, the
// App's Producer().Publish), then the topic's end offsets counted.
func (k *Kafka) publishLoop(ctx context.Context, loop Loop, run *Run, topic string) (Result, error) {
	var res Result
	var err error
	switch loop {
	case Raw:
		var producer *kgo.Client
		if producer, err = kgo.NewClient(ClientOpts(k.seeds)...); err != nil {
			return Result{}, err
		}
		defer producer.Close()
		res, err = publishFor(ctx, run, k.cpu, func(ctx context.Context, key, value []byte) error {
			return producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}).FirstErr()
		})
	case Adapter, Framework:
		tr := k.transport()
		defer tr.Close()
		res, err = publishThrough(ctx, run, k.cpu, loop, tr, topic)
	default:
		return Result{}, fmt.Errorf("unknown loop %d", loop)
	}
	if err != nil {
		return res, err
	}
	ends, err := k.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return res, fmt.Errorf("count what %s holds: %w", topic, err)
	}
	ends.Each(func(o kadm.ListedOffset) { res.Received += int(o.Offset) })
	return res, nil
}

// publishThrough is the adapter's and the framework's publish loop over
// any transport: the transport's Producer, or an App's Producer().
func publishThrough(ctx context.Context, run *Run, cpu cpuClock, loop Loop, tr stream.Transport, topic string) (Result, error) {
	producer := tr.Producer()
	if loop == Framework {
		producer = stream.New(tr).Producer()
	}
	return publishFor(ctx, run, cpu, func(ctx context.Context, key, value []byte) error {
		return producer.Publish(ctx, &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: key, Value: value})
	})
}

// consumerMeter is the meter of a consumer loop whose backlog was just
// published, after the garbage its publishing left is collected (so that
// no loop's window pays for it), with the run's CPU profile started.
func consumerMeter(cpu cpuClock, run *Run) (*meter, func() error, error) {
	m := newMeter(cpu)
	m.backlog(run.Messages)
	runtime.GC()
	stopProfile, err := startCPUProfile(run.CPUProfile)
	return m, stopProfile, err
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
func (k *Kafka) raw(ctx context.Context, run *Run, topic, group string, m *meter) (Result, error) {
	c := &rawCommitter{marks: map[partitionKey]int64{}, committed: map[partitionKey]int64{}}
	opts := append(ClientOpts(k.seeds), rawConsumerOpts(group, topic, func(ctx context.Context) { _ = c.commit(ctx) })...)
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
	pollErr := func() error {
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
			loop.flush()
		}
	}()
	pollErr = errors.Join(pollErr, loop.close())
	stopCommits()
	commitErr := c.commit(ctx)
	cl.Close()
	closed = true
	return m.finished(), errors.Join(pollErr, commitErr)
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
// ClientOpts and the shared commit interval.
func (k *Kafka) transport() *kafka.Kafka {
	return kafka.New(ClientOpts(k.seeds), kafka.CommitInterval(CommitInterval))
}

// adapterLoop runs the adapter loop over any transport: the transport's
// own Consumer (Poll, Mark, Close) driven by the shared handler side,
// without the App.
func adapterLoop(ctx context.Context, run *Run, topic, group string, m *meter, tr stream.Transport) (Result, error) {
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
	pollErr := func() error {
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
			loop.flush()
			buf = records
		}
	}()
	pollErr = errors.Join(pollErr, loop.close())
	closeErr := consumer.Close(ctx)
	closed = true
	return m.finished(), errors.Join(pollErr, closeErr)
}

// frameworkLoop runs the service as a user writes it over any transport.
// The App owns (and closes) tr.
func frameworkLoop(ctx context.Context, run *Run, topic, group string, m *meter, tr stream.Transport) (Result, error) {
	timed := &timedTransport{Transport: tr, m: m}
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
	go func() {
		select {
		case <-m.done:
			stopRun()
		case <-runCtx.Done():
		}
	}()
	runErr := app.Run(runCtx)
	if _, err := endOfPolling(ctx, m); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return timed.result(), runErr
}

// timedTransport wraps the framework loop's transport to take the same
// measurements the other loops take around their own calls: the poll's
// wait and the window's end when the consumer's close (the commit of the
// last offset) returns. It adds one interface call per poll and mark.
type timedTransport struct {
	stream.Transport
	m *meter

	mu     sync.Mutex
	res    Result // guarded by mu
	closed bool   // guarded by mu
}

func (t *timedTransport) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	c, err := t.Transport.Consume(ctx, cfg)
	if err != nil {
		return nil, err
	}
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
