// Package streamtest runs a stream.App in a test: on the in-memory
// transport by default (publish, wait for the handler, assert what was
// published and acknowledged, in milliseconds), or, with the Real option
// or STREAMTEST_REAL=1 in the environment, against an in-process Sushka
// broker over the Kafka transport, unchanged (FastStream's with_real).
//
// An App under test is built by a function of the transport and of extra
// options, which the service's own constructor can be:
//
//	func NewApp(t stream.Transport, opts ...stream.Option) *stream.App
//
// TestTransport is the conformance suite every transport must pass.
package streamtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/test/testbroker"
)

// Build makes the App under test over transport, adding opts (the
// harness's observer) to its own options.
type Build func(transport stream.Transport, opts ...stream.Option) *stream.App

// Option configures a Harness.
type Option func(*config)

type config struct {
	real      bool
	transport stream.Transport
	timeout   time.Duration
}

// Real runs the App against an in-process Sushka broker (Kafka transport)
// instead of the memory transport.
func Real() Option { return func(c *config) { c.real = true } }

// WithTransport runs the App over transport (it is closed by the App).
func WithTransport(t stream.Transport) Option { return func(c *config) { c.transport = t } }

// Timeout bounds every Wait (default 10 s; a real broker's group join
// takes a few seconds).
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// RealFromEnv reports whether STREAMTEST_REAL asks for a real broker.
func RealFromEnv() bool { return os.Getenv("STREAMTEST_REAL") == "1" }

// Harness runs one App and records what it did.
type Harness struct {
	t         testing.TB
	App       *stream.App
	Transport stream.Transport
	// Memory is the memory transport, nil when running for real.
	Memory *memory.Transport
	// BrokerAddr is the in-process broker's address when running for real.
	BrokerAddr string
	timeout    time.Duration
	input      stream.Producer // publishes test input without the App's observer

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	events  map[stream.EventKind]map[string][]stream.Record
	errs    []error
	started bool

	cancel context.CancelFunc
	done   chan struct{}
	runErr error
}

// New builds the App on the chosen transport and starts it; it stops when
// the test ends (and a Run error then fails the test).
func New(t testing.TB, build Build, opts ...Option) *Harness {
	t.Helper()
	cfg := config{real: RealFromEnv(), timeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	h := &Harness{
		t:       t,
		timeout: cfg.timeout,
		changed: make(chan struct{}),
		events:  map[stream.EventKind]map[string][]stream.Record{},
		done:    make(chan struct{}),
	}
	switch {
	case cfg.transport != nil:
		h.Transport = cfg.transport
	case cfg.real:
		h.BrokerAddr = StartSushka(t, 1) // one partition per topic, as the memory transport by default
		h.Transport = kafka.New([]kgo.Opt{kgo.SeedBrokers(h.BrokerAddr), kgo.AllowAutoTopicCreation()},
			kafka.ConsumerOpts(kgo.FetchMaxWait(200*time.Millisecond)),
			kafka.CommitInterval(100*time.Millisecond))
	default:
		h.Memory = memory.New()
		h.Transport = h.Memory
	}
	h.input = h.Transport.Producer()
	h.App = build(h.Transport, stream.Observe(h.observe), stream.ShutdownTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		h.runErr = h.App.Run(ctx)
	}()
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Errorf("streamtest: Run: %v", err)
		}
	})
	return h
}

func (h *Harness) observe(e stream.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Kind == stream.EventStarted {
		h.started = true
	}
	byTopic := h.events[e.Kind]
	if byTopic == nil {
		byTopic = map[string][]stream.Record{}
		h.events[e.Kind] = byTopic
	}
	for _, r := range e.Records {
		byTopic[r.Topic] = append(byTopic[r.Topic], copyRecord(r))
	}
	if e.Err != nil {
		h.errs = append(h.errs, e.Err)
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

func copyRecord(r *stream.Record) stream.Record {
	c := *r
	c.Key = append([]byte(nil), r.Key...)
	c.Value = append([]byte(nil), r.Value...)
	c.Headers = nil
	for _, hd := range r.Headers {
		c.Headers = append(c.Headers, stream.Header{Key: hd.Key, Value: append([]byte(nil), hd.Value...)})
	}
	return c
}

// Stop ends Run (graceful shutdown) and returns its error; later calls
// return the same.
func (h *Harness) Stop() error {
	h.cancel()
	<-h.done
	return h.runErr
}

// Publish encodes v with T's default codec and publishes it to topic with
// key (nil for none), as a producer outside the App would.
func Publish[T any](h *Harness, topic string, key []byte, v T) {
	h.t.Helper()
	value, err := stream.DefaultCodec[T]().Encode(nil, v)
	if err != nil {
		h.t.Fatalf("streamtest: encode %T: %v", v, err)
	}
	h.PublishRecord(&stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: key, Value: value})
}

// PublishRecord publishes rec as a producer outside the App would.
func (h *Harness) PublishRecord(rec *stream.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	if err := h.input.Publish(ctx, rec); err != nil {
		h.t.Fatalf("streamtest: publish to %s: %v", rec.Topic, err)
	}
}

// Records returns copies of the records of topic that the App reported
// with kind so far, in the order reported.
func (h *Harness) Records(kind stream.EventKind, topic string) []stream.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]stream.Record(nil), h.events[kind][topic]...)
}

// Published returns what the App published to topic (handler results and
// its Publishers).
func (h *Harness) Published(topic string) []stream.Record {
	return h.Records(stream.EventPublished, topic)
}

// Acked returns the records of topic the App acknowledged.
func (h *Harness) Acked(topic string) []stream.Record { return h.Records(stream.EventAcked, topic) }

// Handled returns the records of topic whose handler succeeded.
func (h *Harness) Handled(topic string) []stream.Record { return h.Records(stream.EventHandled, topic) }

// Failed returns the records of topic whose handler failed.
func (h *Harness) Failed(topic string) []stream.Record { return h.Records(stream.EventFailed, topic) }

// Errors returns the handler errors reported so far.
func (h *Harness) Errors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// Wait waits until at least n records of topic were reported with kind,
// failing the test at the harness's timeout, and returns them.
func (h *Harness) Wait(kind stream.EventKind, topic string, n int) []stream.Record {
	h.t.Helper()
	if err := h.waitFor(func() bool { return len(h.events[kind][topic]) >= n }); err != nil {
		h.t.Fatalf("streamtest: %d records of %s reported as %v: %v", len(h.Records(kind, topic)), topic, kindName(kind), err)
	}
	return h.Records(kind, topic)
}

// WaitAcked waits for n acknowledged records of topic.
func (h *Harness) WaitAcked(topic string, n int) []stream.Record {
	h.t.Helper()
	return h.Wait(stream.EventAcked, topic, n)
}

// WaitPublished waits for n records published to topic.
func (h *Harness) WaitPublished(topic string, n int) []stream.Record {
	h.t.Helper()
	return h.Wait(stream.EventPublished, topic, n)
}

// WaitStarted waits until Run is consuming.
func (h *Harness) WaitStarted() {
	h.t.Helper()
	if err := h.waitFor(func() bool { return h.started }); err != nil {
		h.t.Fatalf("streamtest: the App did not start: %v", err)
	}
}

// waitFor waits until cond (called under h.mu) holds, Run ends or the
// timeout passes.
func (h *Harness) waitFor(cond func() bool) error {
	deadline := time.NewTimer(h.timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		ok, changed := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-h.done:
			h.mu.Lock()
			ok := cond()
			h.mu.Unlock()
			if ok {
				return nil
			}
			//lint:ignore ST1005 Run is the method's name
			return fmt.Errorf("Run returned: %w", errors.Join(h.runErr, errors.New("stopped")))
		case <-deadline.C:
			return fmt.Errorf("timed out after %v", h.timeout)
		}
	}
}

func kindName(k stream.EventKind) string {
	return [...]string{"started", "handled", "failed", "acked", "published", "stopped"}[k]
}

// StartSushka starts a Sushka broker in this process on 127.0.0.1:0, with
// its data in t.TempDir(), auto-created topics of the given partitions and
// its log discarded, and returns its address; it shuts down when the test
// ends. It is test/testbroker.StartInProcess with the partition count
// (several, so that partitions are handled concurrently).
func StartSushka(t testing.TB, partitions int32) string {
	t.Helper()
	return testbroker.StartInProcessWith(t, broker.Config{DefaultPartitions: partitions})
}
