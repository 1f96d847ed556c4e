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
	js            jetstream.JetStream
}

// NewJetStream returns the target at url; describe is the passport's line.
func NewJetStream(url, describe string) (*JetStream, error) {
	nc, err := natsclient.Connect(url, natsConnectOpts()...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &JetStream{url: url, describe: describe, nc: nc, js: js}, nil
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

// RunLoop runs one loop on a fresh stream and durable consumer.
func (j *JetStream) RunLoop(ctx context.Context, loop Loop, run *Run) (Result, error) {
	if run.Partitions != 1 {
		return Result{}, fmt.Errorf("a JetStream subject has one partition, not %d", run.Partitions)
	}
	topic := run.Name
	group := run.Name + "-group"
	streamName := streamnats.StreamName(topic)
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{topic},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy}); err != nil {
		return Result{}, fmt.Errorf("create stream %s: %w", streamName, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = j.js.DeleteStream(dctx, streamName)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := newMeter()
	var res Result
	var err error
	switch loop {
	case Raw:
		res, err = j.raw(ctx, run, streamName, topic, group, m)
	case Adapter:
		tr := j.transport()
		defer tr.Close()
		res, err = adapterLoop(ctx, run, topic, group, m, tr, nil)
	case Framework:
		res, err = frameworkLoop(ctx, run, topic, group, m, j.transport(), nil)
	default:
		err = fmt.Errorf("unknown loop %d", loop)
	}
	if err == nil {
		err = res.Check(run)
	}
	return res, err
}

func (j *JetStream) transport() *streamnats.NATS {
	return streamnats.New(j.url, natsConnectOpts(), streamnats.AckWait(natsAckWait), streamnats.MaxAckPending(natsMaxAckPending),
		streamnats.FetchBatch(natsFetchBatch), streamnats.FetchExpiry(natsFetchExpiry))
}

// raw is nats.go's own pull consumer loop: the same durable consumer
// configuration as stream/nats creates, Messages() with at most
// natsFetchBatch buffered, the key from the same header, the shared
// handler side (keyLanes), and an ack of each message once the handler
// has finished it (Mark's acks), flushed at the end as the transport's
// Close flushes. A poll is one Next: nats.go's iterator has no batch.
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
	jc, err := js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
		Durable: streamnats.DurableName(group, topic), FilterSubject: topic, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: natsAckWait, MaxAckPending: natsMaxAckPending, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
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
	polling := make(chan error, 1)
	go func() {
		polling <- func() error {
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
			}
		}()
	}()
	producer := js
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	published := publish(pubCtx, run, m, func(ctx context.Context, key, value []byte) error {
		_, err := producer.PublishMsg(ctx, &natsclient.Msg{Subject: topic, Data: value, Header: natsclient.Header{streamnats.KeyHeader: {string(key)}}})
		return err
	})
	// The last message handled ends Next's wait: stop the iterator.
	go func() {
		select {
		case <-m.done:
		case <-ctx.Done():
		}
		iter.Stop()
	}()
	pollErr := <-polling
	if pollErr != nil {
		stopPublishing()
	}
	pollErr = errors.Join(pollErr, loop.close())
	iter.Stop()
	stopped = true
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	flushErr := nc.FlushWithContext(fctx)
	cancel()
	res := m.finished()
	return res, errors.Join(pollErr, flushErr, <-published)
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
