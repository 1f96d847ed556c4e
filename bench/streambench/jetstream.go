package streambench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sushka-io/sushka/bench"
	streamnats "github.com/sushka-io/sushka/stream/nats"
)

// The JetStream loops' shared settings: stream/nats's defaults, given to
// the transport explicitly so that the raw loop cannot drift from them.
const (
	natsAckWait       = 30 * time.Second
	natsMaxAckPending = 1024
	// natsFetchBatch bounds the messages a member holds fetched: the
	// transport's FetchBatch and the raw loop's PullMaxMessages.
	natsFetchBatch  = 256
	natsFetchExpiry = 5 * time.Second
)

// natsConnectOpts are the connection options of every loop's client: the
// ones stream/nats's New sets before the caller's.
func natsConnectOpts() []natsclient.Option {
	return []natsclient.Option{natsclient.Name("sushka-stream"), natsclient.MaxReconnects(-1),
		natsclient.ReconnectWait(200 * time.Millisecond)}
}

// JetStream is the target of a NATS JetStream server. A topic is a
// subject with a stream of its own (created per run, file storage, as
// stream/nats creates it), a group a durable pull consumer; there is one
// partition.
type JetStream struct {
	url, describe string
	nc            *natsclient.Conn
	// js is the admin and the one generator that publishes every run's
	// backlog (asynchronously, at most natsFillPending unacknowledged).
	js  jetstream.JetStream
	cpu cpuClock
}

// natsFillPending bounds the generator's unacknowledged publishes.
const natsFillPending = 4096

// NewJetStream returns the target at url; describe is the passport's line.
// The server's CPU is measured when a process of this machine listens on
// url's port.
func NewJetStream(url, describe string) (*JetStream, error) {
	nc, err := natsclient.Connect(url, natsConnectOpts()...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natsFillPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &JetStream{url: url, describe: describe, nc: nc, js: js, cpu: cpuClock{brokerPID: bench.ListenerPID(nc.ConnectedAddr())}}, nil
}

func (j *JetStream) Name() string     { return "jetstream" }
func (j *JetStream) Describe() string { return j.describe }
func (j *JetStream) Client() string {
	return "github.com/nats-io/nats.go " + bench.ModuleVersion("github.com/nats-io/nats.go") + " (jetstream)"
}

func (j *JetStream) Partitions(int32) int32 { return 1 }

func (j *JetStream) Close() error {
	j.nc.Close()
	return nil
}

// natsConsumerConfig is the durable consumer of group on topic, as
// stream/nats's Consume creates it; the run creates it before the first
// publish, so the group's position is the stream's start.
func natsConsumerConfig(group, topic string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: streamnats.DurableName(group, topic), FilterSubject: topic, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: natsAckWait, MaxAckPending: natsMaxAckPending, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// RunLoop runs one loop on a fresh stream and durable consumer: the
// durable is created, the generator publishes the backlog, and only then
// does the loop's consumer start.
func (j *JetStream) RunLoop(ctx context.Context, loop Loop, run *Run) (Result, error) {
	if run.Partitions != 1 {
		return Result{}, fmt.Errorf("a JetStream subject has one partition, not %d", run.Partitions)
	}
	topic := run.Name
	group := run.Name + "-group"
	streamName := streamnats.StreamName(topic)
	st, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{topic},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy})
	if err != nil {
		return Result{}, fmt.Errorf("create stream %s: %w", streamName, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = j.js.DeleteStream(dctx, streamName)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res Result
	if run.Scenario.Publish {
		res, err = j.publishLoop(ctx, loop, run, topic, st)
	} else {
		res, err = j.consumeLoop(ctx, loop, run, streamName, topic, group)
	}
	if err == nil {
		err = res.Check(run)
	}
	return res, err
}

func (j *JetStream) consumeLoop(ctx context.Context, loop Loop, run *Run, streamName, topic, group string) (Result, error) {
	if _, err := j.js.CreateOrUpdateConsumer(ctx, streamName, natsConsumerConfig(group, topic)); err != nil {
		return Result{}, fmt.Errorf("durable consumer of %s on %s: %w", group, streamName, err)
	}
	if err := j.fill(ctx, topic, run); err != nil {
		return Result{}, err
	}
	m, stopProfile, err := consumerMeter(j.cpu, run)
	if err != nil {
		return Result{}, err
	}
	defer stopProfile()
	switch loop {
	case Raw:
		return j.raw(ctx, run, streamName, topic, group, m)
	case Adapter:
		tr := j.transport()
		defer tr.Close()
		return adapterLoop(ctx, run, topic, group, m, tr)
	case Framework:
		return frameworkLoop(ctx, run, topic, group, m, j.transport())
	}
	return Result{}, fmt.Errorf("unknown loop %d", loop)
}

// natsMessage is message i of run as every JetStream publisher sends it:
// the key in stream/nats's header.
func natsMessage(topic string, key, value []byte) *natsclient.Msg {
	return &natsclient.Msg{Subject: topic, Data: value, Header: natsclient.Header{streamnats.KeyHeader: {string(key)}}}
}

// fill publishes the run's backlog through the shared generator and waits
// for every acknowledgement.
func (j *JetStream) fill(ctx context.Context, topic string, run *Run) error {
	futures := make([]jetstream.PubAckFuture, 0, run.Messages)
	for i := range run.Messages {
		key, value := run.Payloads.Message(i)
		f, err := j.js.PublishMsgAsync(natsMessage(topic, key, value))
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// natsFillPending acknowledgements outstanding for longer than
			// nats.go's stall wait (a loaded host): wait for them, then
			// publish the same message again.
			select {
			case <-j.js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
			f, err = j.js.PublishMsgAsync(natsMessage(topic, key, value))
		}
		if err != nil {
			return fmt.Errorf("publish the backlog's message %d: %w", i, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish the backlog's message %d: %w", i, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// publishLoop is the publish scenario on JetStream: each loop's own
// publisher (jetstream PublishMsg, the transport's Producer.Publish, the
// App's Producer().Publish), then the stream's messages counted.
func (j *JetStream) publishLoop(ctx context.Context, loop Loop, run *Run, topic string, st jetstream.Stream) (Result, error) {
	var res Result
	var err error
	switch loop {
	case Raw:
		nc, cerr := natsclient.Connect(j.url, natsConnectOpts()...)
		if cerr != nil {
			return Result{}, cerr
		}
		defer nc.Close()
		js, jerr := jetstream.New(nc)
		if jerr != nil {
			return Result{}, jerr
		}
		res, err = publishFor(ctx, run, j.cpu, func(ctx context.Context, key, value []byte) error {
			_, err := js.PublishMsg(ctx, natsMessage(topic, key, value))
			return err
		})
	case Adapter, Framework:
		tr := j.transport()
		defer tr.Close()
		res, err = publishThrough(ctx, run, j.cpu, loop, tr, topic)
	default:
		return Result{}, fmt.Errorf("unknown loop %d", loop)
	}
	if err != nil {
		return res, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("count what %s holds: %w", topic, err)
	}
	res.Received = int(info.State.Msgs)
	return res, nil
}

func (j *JetStream) transport() *streamnats.NATS {
	return streamnats.New(j.url, natsConnectOpts(), streamnats.AckWait(natsAckWait), streamnats.MaxAckPending(natsMaxAckPending),
		streamnats.FetchBatch(natsFetchBatch), streamnats.FetchExpiry(natsFetchExpiry))
}

// raw is nats.go's own pull consumer loop: the durable consumer the run
// created (the same configuration as stream/nats creates), Messages() with
// at most natsFetchBatch buffered, the key from the same header, the
// shared handler side (keyLanes), and an ack of each message once the
// handler has finished it (Mark's acks), flushed at the end as the
// transport's Close flushes. A poll is one Next: nats.go's iterator has
// no batch.
func (j *JetStream) raw(ctx context.Context, run *Run, streamName, topic, group string, m *meter) (Result, error) {
	nc, err := natsclient.Connect(j.url, natsConnectOpts()...)
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	jc, err := js.Consumer(ctx, streamName, streamnats.DurableName(group, topic))
	if err != nil {
		return Result{}, err
	}
	iter, err := jc.Messages(jetstream.PullMaxMessages(natsFetchBatch), jetstream.PullExpiry(natsFetchExpiry),
		jetstream.PullHeartbeat(min(natsFetchExpiry/4, time.Second)))
	if err != nil {
		return Result{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			iter.Stop()
		}
	}()
	acks := &natsAcks{}
	loop := newConsumeLoop(run.Scenario, m, acks.mark)
	// The last message handled ends Next's wait: stop the iterator.
	go func() {
		select {
		case <-m.done:
		case <-ctx.Done():
		}
		iter.Stop()
	}()
	pollErr := func() error {
		for {
			start := time.Now()
			msg, err := iter.Next()
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				continue // a busy host missed a heartbeat: nats.go pulls again, as the transport retries its fetch
			}
			if err != nil {
				if stop, endErr := endOfPolling(ctx, m); stop {
					return endErr // Stop at the end of the run
				}
				return fmt.Errorf("the message iterator stopped: %w", err)
			}
			m.polled(start, 1)
			meta, err := msg.Metadata()
			if err != nil {
				return err
			}
			offset := int64(meta.Sequence.Stream) - 1
			acks.hold(offset, msg)
			loop.dispatch(item{topic, 0, offset, []byte(msg.Headers().Get(streamnats.KeyHeader)), msg.Data()})
			// nats.go's iterator hands over one message and cannot tell
			// whether the next is already here: hand each over at once
			// (a batch held back could wait for a message never sent).
			loop.flush()
		}
	}()
	pollErr = errors.Join(pollErr, loop.close())
	iter.Stop()
	stopped = true
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	flushErr := nc.FlushWithContext(fctx)
	cancel()
	return m.finished(), errors.Join(pollErr, flushErr)
}

// natsAcks is the raw JetStream loop's Mark: it holds each fetched
// message until the handler side marks past it, then acks it.
type natsAcks struct {
	mu   sync.Mutex
	held []heldNATS // guarded by mu: in offset order
}

type heldNATS struct {
	offset int64
	msg    jetstream.Msg
}

func (a *natsAcks) hold(offset int64, msg jetstream.Msg) {
	a.mu.Lock()
	a.held = append(a.held, heldNATS{offset, msg})
	a.mu.Unlock()
}

func (a *natsAcks) mark(_ string, _ int32, next int64) {
	a.mu.Lock()
	i := 0
	for ; i < len(a.held) && a.held[i].offset < next; i++ {
		_ = a.held[i].msg.Ack()
	}
	clear(a.held[:i])
	a.held = a.held[i:]
	a.mu.Unlock()
}
