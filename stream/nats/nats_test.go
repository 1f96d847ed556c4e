package nats_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/nats"
	"github.com/sushka-io/sushka/stream/nats/natstest"
	"github.com/sushka-io/sushka/test/testbroker"
)

// testTimeout bounds each wait of these tests; AckWait is 30 s, far above
// it, so a test passes only if nothing waited for JetStream's ack timer.
const testTimeout = 15 * time.Second

func newTransport(t *testing.T, url string, opts ...nats.Option) *nats.NATS {
	t.Helper()
	// A short pull expiry: every App's Close waits for its pull request to end.
	tr := nats.New(url, nil, append([]nats.Option{nats.FetchExpiry(300 * time.Millisecond)}, opts...)...)
	if tr.Conn() == nil {
		t.Fatalf("connect %s: %v", url, tr.Close())
	}
	return tr
}

func publish(t *testing.T, p stream.Producer, rec *stream.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.Publish(ctx, rec); err != nil {
		t.Fatalf("publish to %s: %v", rec.Topic, err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// running is an App started in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func run(app *stream.App) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- app.Run(ctx) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after its context ended")
	}
}

// tally counts what handlers did, by value.
type tally struct {
	mu       sync.Mutex
	started  map[string]int
	finished map[string]int
	order    []string // finished, in order
}

func newTally() *tally { return &tally{started: map[string]int{}, finished: map[string]int{}} }

func (c *tally) start(v string) {
	c.mu.Lock()
	c.started[v]++
	c.mu.Unlock()
}

func (c *tally) finish(v string) {
	c.mu.Lock()
	c.finished[v]++
	c.order = append(c.order, v)
	c.mu.Unlock()
}

func (c *tally) finishedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.finished)
}

func (c *tally) finishedSet() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.finished))
	for k, v := range c.finished {
		out[k] = v
	}
	return out
}

// consumerInfo is the server's view of the group's durable on topic.
func consumerInfo(t *testing.T, tr *nats.NATS, group, topic string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := tr.JetStream().Consumer(ctx, nats.StreamName(topic), nats.DurableName(group, topic))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// checkAllAcked fails t unless the server has every one of the n
// messages of topic acknowledged by group, and none pending.
func checkAllAcked(t *testing.T, tr *nats.NATS, group, topic string, n uint64) {
	t.Helper()
	info := consumerInfo(t, tr, group, topic)
	if info.NumAckPending != 0 || info.AckFloor.Stream != n {
		t.Fatalf("server: %d ack pending, ack floor %d; want 0 and %d", info.NumAckPending, info.AckFloor.Stream, n)
	}
}

// TestKeyAndHeadersRoundTrip: keys (binary, empty, absent, text, text that
// looks encoded) and header values (with newlines, leading spaces,
// repeated names) come back byte for byte, and the key travels in the
// documented header, readable by any NATS client.
func TestKeyAndHeadersRoundTrip(t *testing.T) {
	url := natstest.Start(t)
	tr := newTransport(t, url)
	defer tr.Close()
	const topic = "roundtrip"
	cases := []stream.Record{
		{Key: []byte("order-1"), Headers: []stream.Header{{Key: "trace", Value: []byte("00-abc-01")}}},
		{Key: []byte{0, 1, 2, 0xff, '\n'}},
		{Key: []byte{}},
		{Key: nil, Headers: []stream.Header{{Key: "error", Value: []byte("first line\nsecond line")}}},
		{Key: []byte("base64:AAAA"), Headers: []stream.Header{{Key: "lead", Value: []byte("  spaced")}}},
		{Key: []byte(" k"), Headers: []stream.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "b", Value: nil}}},
	}
	for i := range cases {
		rec := cases[i]
		rec.Topic, rec.Partition, rec.Value = topic, stream.AnyPartition, []byte(strconv.Itoa(i))
		publish(t, tr.Producer(), &rec)
	}

	// What a plain NATS client sees: the key in Sushka-Key.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := tr.JetStream().Stream(ctx, nats.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get(nats.KeyHeader); got != "order-1" {
		t.Fatalf("stored %s = %q, want order-1", nats.KeyHeader, got)
	}
	if raw, err = s.GetMsg(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Header[nats.KeyHeader]; ok {
		t.Fatalf("a record without a key was stored with %s", nats.KeyHeader)
	}

	c, err := tr.Consume(ctx, stream.ConsumerConfig{Group: "g", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var got []*stream.Record
	for len(got) < len(cases) {
		polled, err := c.Poll(ctx, make([]*stream.Record, 0, len(cases)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, polled...)
	}
	for i, want := range cases {
		r := got[i]
		if r.Offset != int64(i) || r.Partition != 0 || string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d: offset %d partition %d value %q", i, r.Offset, r.Partition, r.Value)
		}
		if !bytes.Equal(r.Key, want.Key) || (r.Key == nil) != (want.Key == nil) {
			t.Fatalf("record %d: key %q (nil %v), want %q (nil %v)", i, r.Key, r.Key == nil, want.Key, want.Key == nil)
		}
		if len(r.Headers) != len(want.Headers) {
			t.Fatalf("record %d: headers %q, want %q", i, r.Headers, want.Headers)
		}
		for k, h := range want.Headers {
			if r.Headers[k].Key != h.Key || !bytes.Equal(r.Headers[k].Value, h.Value) {
				t.Fatalf("record %d: header %d = %q:%q, want %q:%q", i, k, r.Headers[k].Key, r.Headers[k].Value, h.Key, h.Value)
			}
		}
		if r.Timestamp.IsZero() || time.Since(r.Timestamp) > time.Minute {
			t.Fatalf("record %d: timestamp %v", i, r.Timestamp)
		}
	}
}

// TestBadInput: what NATS cannot carry is refused with the Kafka error a
// client expects, and nothing is published.
func TestBadInput(t *testing.T) {
	url := natstest.Start(t)
	tr := newTransport(t, url)
	defer tr.Close()
	strict := newTransport(t, url, nats.ExpectStreams())
	defer strict.Close()
	cases := []struct {
		name string
		tr   *nats.NATS
		rec  stream.Record
		want error
	}{
		{"partition 1", tr, stream.Record{Topic: "bad", Partition: 1}, kerr.UnknownTopicOrPartition},
		{"wildcard topic", tr, stream.Record{Topic: "orders.*", Partition: stream.AnyPartition}, kerr.InvalidTopicException},
		{"empty token", tr, stream.Record{Topic: "orders..eu", Partition: stream.AnyPartition}, kerr.InvalidTopicException},
		{"space in topic", tr, stream.Record{Topic: "or ders", Partition: stream.AnyPartition}, kerr.InvalidTopicException},
		{"header name with a colon", tr, stream.Record{Topic: "bad", Partition: 0, Headers: []stream.Header{{Key: "a:b"}}}, kerr.InvalidRecord},
		{"header named like the key", tr, stream.Record{Topic: "bad", Partition: 0, Headers: []stream.Header{{Key: nats.KeyHeader}}}, kerr.InvalidRecord},
		{"no stream, ExpectStreams", strict, stream.Record{Topic: "nostream", Partition: 0}, kerr.UnknownTopicOrPartition},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tr.Producer().Publish(context.Background(), &tc.rec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Publish: %v, want %v", err, tc.want)
			}
		})
	}
	_, err := strict.Consume(context.Background(), stream.ConsumerConfig{Group: "g", Topics: []string{"nostream"}})
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("Consume without a stream under ExpectStreams: %v", err)
	}
	// The stream "bad" exists (created for the refused records' topic);
	// nothing is in it.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := tr.JetStream().Stream(ctx, nats.StreamName("bad"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("stream bad: %v messages, %v", info.State.Msgs, err)
	}
}

// TestRedeliveryAfterNack: a nacked message comes again to the member
// that nacked it, ahead of the messages after it that the member had
// already fetched (they come again too, in order), well before AckWait,
// and JetStream ends with everything acknowledged.
func TestRedeliveryAfterNack(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, n = "nack", "g", 40
	tr := newTransport(t, url)
	var mu sync.Mutex
	var order []string
	attempts := map[string][]int{}
	app := stream.New(tr, stream.Group(group), stream.RedeliveryBackoff(time.Millisecond))
	stream.Consume(app, topic, func(ctx context.Context, v string) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[v] = append(attempts[v], stream.Attempt(ctx))
		if i, _ := strconv.Atoi(v); i%10 == 3 && len(attempts[v]) == 1 {
			return errors.New("fail the first attempt")
		}
		order = append(order, v)
		return nil
	})
	// Published before the App starts, so that the first fetch brings the
	// failed messages together with those after them.
	input := newTransport(t, url)
	defer input.Close()
	for i := range n {
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))})
	}
	r := run(app)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == n }, "every message to succeed")
	r.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for i, v := range order {
		if v != strconv.Itoa(i) {
			t.Fatalf("handled out of order: %v", order)
		}
		want := []int{1}
		if i%10 == 3 {
			want = []int{1, 2}
		}
		if !slices.Equal(attempts[v], want) {
			t.Fatalf("message %s: attempts %v, want %v", v, attempts[v], want)
		}
	}
	checkAllAcked(t, input, group, topic, n)
}

// TestNackWithTwoMembers: two Apps share the group's durable and each
// fails the first attempt of some messages. A redelivery must not depend
// on JetStream handing the nacked message back to the same member (it
// hands a nak'ed message to any member): every message succeeds, within
// the timeout, and the group ends with nothing pending.
func TestNackWithTwoMembers(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, n = "nack2", "g", 200
	done := newTally()
	var mu sync.Mutex
	failedOnce := map[string]bool{}
	build := func() *stream.App {
		app := stream.New(newTransport(t, url, nats.FetchBatch(16)), stream.Group(group), stream.RedeliveryBackoff(time.Millisecond))
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			mu.Lock()
			fail := !failedOnce[v]
			if i, _ := strconv.Atoi(v); i%7 == 0 && fail {
				failedOnce[v] = true
				mu.Unlock()
				return errors.New("fail the first attempt")
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			done.finish(v)
			return nil
		})
		return app
	}
	a, b := run(build()), run(build())
	input := newTransport(t, url)
	defer input.Close()
	for i := range n {
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))})
	}
	waitFor(t, func() bool { return done.finishedCount() == n }, "every message to succeed on one of the members")
	a.stop(t)
	b.stop(t)
	info := consumerInfo(t, input, group, topic)
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("server: %d ack pending, %d pending after both members finished everything", info.NumAckPending, info.NumPending)
	}
}

// TestShutdownAcksWhatFinished: an App is stopped mid-run with messages
// fetched but not handled (and, with key lanes, finished out of offset
// order); another App of the group then gets exactly the messages the
// first did not acknowledge. Everything is handled at least once; every
// message the first App acknowledged had finished; what it acknowledged
// does not come again (the acks reached the server before Close
// returned); what it did not comes again at once (Close naks it rather
// than leave it to AckWait).
func TestShutdownAcksWhatFinished(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, n = "shutdown", "g", 120
	first, second := newTally(), newTally()
	var mu sync.Mutex
	ackedFirst := map[string]bool{}
	build := func(c *tally, opts ...stream.Option) *stream.App {
		app := stream.New(newTransport(t, url), append(opts, stream.Group(group), stream.ShutdownTimeout(5*time.Second))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			c.start(v)
			time.Sleep(5 * time.Millisecond)
			c.finish(v)
			return nil
		}, stream.KeyConcurrency(4), stream.MaxInFlight(16))
		return app
	}
	input := newTransport(t, url)
	defer input.Close()
	for i := range n {
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: []byte("k" + strconv.Itoa(i%5)), Value: []byte(strconv.Itoa(i))})
	}
	a := run(build(first, stream.Observe(func(e stream.Event) {
		if e.Kind == stream.EventAcked {
			mu.Lock()
			for _, r := range e.Records {
				ackedFirst[string(r.Value)] = true
			}
			mu.Unlock()
		}
	})))
	waitFor(t, func() bool { return first.finishedCount() >= n/4 }, "the first App to finish a quarter")
	a.stop(t)
	finishedFirst := first.finishedSet()
	mu.Lock()
	defer mu.Unlock()
	if len(ackedFirst) == n {
		t.Fatal("the first App acknowledged everything before it was stopped: nothing was in flight")
	}
	for v := range ackedFirst {
		if finishedFirst[v] == 0 {
			t.Fatalf("message %s acknowledged by the first App without its handler finishing", v)
		}
	}
	for v := range first.started {
		if first.finished[v] == 0 {
			t.Fatalf("message %s was started and not finished by a graceful shutdown", v)
		}
	}

	b := run(build(second))
	waitFor(t, func() bool { return second.finishedCount() >= n-len(ackedFirst) }, "the second App to handle what the first did not acknowledge")
	time.Sleep(200 * time.Millisecond) // room for a wrong extra delivery to show
	b.stop(t)
	finishedSecond := second.finishedSet()
	for i := range n {
		v := strconv.Itoa(i)
		switch {
		case ackedFirst[v] && finishedSecond[v] > 0:
			t.Fatalf("message %s came again although the first App acknowledged it", v)
		case !ackedFirst[v] && finishedSecond[v] == 0:
			t.Fatalf("message %s, not acknowledged by the first App, did not come to the second", v)
		}
	}
	checkAllAcked(t, input, group, topic, n)
}

// TestServerRestartUnderConsumer: the server stops and starts again (same
// port, same store) while an App consumes and another client publishes.
// The transport reconnects: every message published (PubAck received) is
// handled, and the group ends with everything acknowledged.
func TestServerRestartUnderConsumer(t *testing.T) {
	srv := natstest.StartServer(t)
	const topic, group, n = "restart", "g", 60
	handled := newTally()
	// The restart begins after 3 messages, while messages up to 9 are
	// being handled and acked (20 ms each: acks in flight as the server
	// goes); messages from 10 on wait until it is back, so some are
	// certainly held by the transport across the restart.
	restarted := make(chan struct{})
	app := stream.New(newTransport(t, srv.URL), stream.Group(group))
	stream.Consume(app, topic, func(ctx context.Context, v string) error {
		if i, _ := strconv.Atoi(v); i >= 10 {
			<-restarted
		}
		time.Sleep(20 * time.Millisecond)
		handled.finish(v)
		return nil
	})
	input := newTransport(t, srv.URL)
	defer input.Close()
	publishRetrying := func(i int) {
		rec := &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))}
		deadline := time.Now().Add(testTimeout)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := input.Producer().Publish(ctx, rec)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range n / 2 {
		publishRetrying(i)
	}
	r := run(app)
	waitFor(t, func() bool { return handled.finishedCount() >= 3 }, "the App to handle the first three")
	if err := srv.Restart(); err != nil {
		close(restarted)
		t.Fatal(err)
	}
	close(restarted)
	for i := n / 2; i < n; i++ {
		publishRetrying(i)
	}
	waitFor(t, func() bool { return handled.finishedCount() == n }, "every published message handled after the restart")
	r.stop(t)
	checkAllAcked(t, input, group, topic, n)
}

// TestHeldMessagesStayWithTheMember: a handler that runs for longer than
// AckWait keeps its message: the transport renews what it holds (+WIP),
// so JetStream does not hand the message to the group's other member.
func TestHeldMessagesStayWithTheMember(t *testing.T) {
	url := natstest.Start(t)
	const topic, group = "held", "g"
	const ackWait = time.Second
	handled := newTally()
	build := func() *stream.App {
		app := stream.New(newTransport(t, url, nats.AckWait(ackWait)), stream.Group(group))
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			handled.start(v)
			time.Sleep(3 * ackWait)
			handled.finish(v)
			return nil
		})
		return app
	}
	a, b := run(build()), run(build())
	input := newTransport(t, url)
	defer input.Close()
	publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte("slow")})
	waitFor(t, func() bool { return handled.finishedCount() == 1 }, "the slow message to be handled")
	time.Sleep(ackWait) // a redelivery to the other member would have started by now
	a.stop(t)
	b.stop(t)
	handled.mu.Lock()
	defer handled.mu.Unlock()
	if handled.started["slow"] != 1 {
		t.Fatalf("the message was handled %d times: JetStream redelivered it while its handler ran", handled.started["slow"])
	}
}

// TestServerGoneFailsClearly: when the connection is closed for good
// (reconnects exhausted), Run returns an error that says so instead of
// waiting forever.
func TestServerGoneFailsClearly(t *testing.T) {
	srv := natstest.StartServer(t)
	tr := nats.New(srv.URL, []natsclient.Option{natsclient.MaxReconnects(2), natsclient.ReconnectWait(50 * time.Millisecond)},
		nats.FetchExpiry(300*time.Millisecond))
	started := make(chan struct{})
	app := stream.New(tr, stream.Group("g"), stream.ShutdownTimeout(time.Second), stream.Observe(func(e stream.Event) {
		if e.Kind == stream.EventStarted {
			close(started)
		}
	}))
	stream.Consume(app, "gone", func(ctx context.Context, v string) error { return nil })
	r := run(app)
	select {
	case <-started:
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		if !errors.Is(err, natsclient.ErrConnectionClosed) {
			t.Fatalf("Run returned %v, want the closed connection", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("Run still running with its connection closed for good")
	}
}

// TestExpectedStreamOfSeveralTopics: with ExpectStreams the transport uses
// a stream it did not create, which captures two topics; each topic's
// group has its own durable, offsets are the stream's sequences (with
// gaps where the other topic's messages are) and every message is
// acknowledged.
func TestExpectedStreamOfSeveralTopics(t *testing.T) {
	url := natstest.Start(t)
	tr := newTransport(t, url, nats.ExpectStreams()) // the App's: closed when it stops
	admin := newTransport(t, url)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := admin.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}}); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		topic := []string{"orders.eu", "orders.us"}[i%2]
		publish(t, admin.Producer(), &stream.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))})
	}
	var mu sync.Mutex
	offsets := map[string][]int64{}
	app := stream.New(tr, stream.Group("billing"))
	for _, topic := range []string{"orders.eu", "orders.us"} {
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			mu.Lock()
			offsets[topic] = append(offsets[topic], stream.Current(ctx).Offset)
			mu.Unlock()
			return nil
		})
	}
	r := run(app)
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(offsets["orders.eu"])+len(offsets["orders.us"]) == n
	}, "both topics handled")
	r.stop(t)
	for k, topic := range []string{"orders.eu", "orders.us"} {
		for i, off := range offsets[topic] {
			if off != int64(2*i+k) {
				t.Fatalf("%s: offsets %v, want the stream's sequences minus one", topic, offsets[topic])
			}
		}
		c, err := admin.JetStream().Consumer(ctx, "ORDERS", nats.DurableName("billing", topic))
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Fatalf("%s: %d ack pending, %d pending", topic, info.NumAckPending, info.NumPending)
		}
	}
}

// TestDeletedStreamIsFoundAgain: a stream deleted after the transport
// looked it up is looked up (and created) again by the next publish,
// instead of every publish failing on a stale answer.
func TestDeletedStreamIsFoundAgain(t *testing.T) {
	url := natstest.Start(t)
	tr := newTransport(t, url)
	defer tr.Close()
	const topic = "deleted"
	publish(t, tr.Producer(), &stream.Record{Topic: topic, Partition: 0, Value: []byte("before")})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := tr.JetStream().DeleteStream(ctx, nats.StreamName(topic)); err != nil {
		t.Fatal(err)
	}
	publish(t, tr.Producer(), &stream.Record{Topic: topic, Partition: 0, Value: []byte("after")})
	s, err := tr.JetStream().Stream(ctx, nats.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := s.GetMsg(ctx, 1); err != nil || string(msg.Data) != "after" {
		t.Fatalf("the re-created stream's first message: %v %v", msg, err)
	}
}

// TestUnreachableServer: a transport that could not connect says so on
// every use, and the App's Run returns it.
func TestUnreachableServer(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t)) // nothing listens there
	tr := nats.Transport(url)
	err := tr.Producer().Publish(context.Background(), &stream.Record{Topic: "t", Partition: 0})
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Publish: %v, want the connect error naming %s", err, url)
	}
	app := stream.New(tr, stream.Group("g"))
	stream.Consume(app, "t", func(ctx context.Context, v string) error { return nil })
	if err := app.Run(context.Background()); err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Run: %v, want the connect error", err)
	}
}

// TestDurableDeletedFailsRun: a group's durable deleted under a running
// App (by an operator, say) stops Run with an error that names it,
// instead of the App waiting for messages that will never come.
func TestDurableDeletedFailsRun(t *testing.T) {
	url := natstest.Start(t)
	const topic, group = "deleted-durable", "g"
	started := make(chan struct{})
	app := stream.New(newTransport(t, url), stream.Group(group), stream.Observe(func(e stream.Event) {
		if e.Kind == stream.EventStarted {
			close(started)
		}
	}))
	stream.Consume(app, topic, func(ctx context.Context, v string) error { return nil })
	r := run(app)
	select {
	case <-started:
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	}
	admin := newTransport(t, url)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := admin.JetStream().DeleteConsumer(ctx, nats.StreamName(topic), nats.DurableName(group, topic)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("Run returned %v, want the deleted consumer", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(testTimeout):
		r.cancel()
		t.Fatal("Run still running after its durable was deleted")
	}
}

// TestMaxAckPendingOneKeepsOrderAcrossMembers: with MaxAckPending(1) the
// group has one message in flight at a time, so two members handle the
// stream strictly in order (at one message per round trip), and both get
// some of it.
func TestMaxAckPendingOneKeepsOrderAcrossMembers(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, n = "one-at-a-time", "g", 60
	var mu sync.Mutex
	var order []int
	byMember := map[string]int{}
	build := func(name string) *stream.App {
		app := stream.New(newTransport(t, url, nats.MaxAckPending(1)), stream.Group(group))
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			i, _ := strconv.Atoi(v)
			mu.Lock()
			order = append(order, i)
			byMember[name]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil
		})
		return app
	}
	a, b := run(build("a")), run(build("b"))
	input := newTransport(t, url)
	defer input.Close()
	for i := range n {
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))})
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == n }, "every message handled")
	a.stop(t)
	b.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for i, v := range order {
		if v != i {
			t.Fatalf("handled in the order %v", order)
		}
	}
	if byMember["a"] == 0 || byMember["b"] == 0 {
		t.Logf("one member handled everything (%v): the order held trivially this time", byMember)
	} else {
		t.Logf("handled by member: %v", byMember)
	}
	checkAllAcked(t, input, group, topic, n)
}

// TestStreamNameTakenByOtherSubjects: when the name the transport would
// give a topic's stream belongs to a stream of other subjects, publishing
// to the topic fails with an error that says so, and Close twice is fine.
func TestStreamNameTakenByOtherSubjects(t *testing.T) {
	url := natstest.Start(t)
	tr := newTransport(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := tr.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: nats.StreamName("taken"), Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	err := tr.Producer().Publish(ctx, &stream.Record{Topic: "taken", Partition: 0})
	if !errors.Is(err, kerr.InvalidTopicException) || !strings.Contains(err.Error(), "does not capture") {
		t.Fatalf("Publish: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestNothingLostWhileTheConnectionStalls: the App's connection (through
// a relay, paused) carries nothing for longer than nats.go's Fetch waits
// for idle heartbeats (twice a quarter of FetchExpiry), just after a pull
// request reached the server, while another client publishes a message
// that the server delivers into that request. When the relay goes on, the
// message is handled at once, not after AckWait. (A Fetch that gave up on
// missed heartbeats unsubscribed from a request the server still served,
// and what the server had delivered into it came back only after AckWait:
// TestServerRestartUnderConsumer's flake on a loaded machine, where the
// heartbeats came late.)
func TestNothingLostWhileTheConnectionStalls(t *testing.T) {
	srv := natstest.StartServer(t)
	relay := startRelay(t, strings.TrimPrefix(srv.URL, "nats://"))
	const topic, group, rounds = "stall", "g", 3
	handled := newTally()
	app := stream.New(newTransport(t, "nats://"+relay.addr()), stream.Group(group))
	stream.Consume(app, topic, func(ctx context.Context, v string) error { handled.finish(v); return nil })
	input := newTransport(t, srv.URL)
	defer input.Close()
	publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte("first")})
	pulls := make(chan *natsclient.Msg, 64)
	monitor, err := input.Conn().ChanSubscribe("$JS.API.CONSUMER.MSG.NEXT."+nats.StreamName(topic)+"."+nats.DurableName(group, topic), pulls)
	if err != nil {
		t.Fatal(err)
	}
	defer monitor.Unsubscribe()
	r := run(app)
	waitFor(t, func() bool { return handled.finishedCount() == 1 }, "the first message")
	for i := range rounds {
		for len(pulls) > 0 {
			<-pulls
		}
		select {
		case <-pulls: // a pull request has just reached the server: it waits there for FetchExpiry
		case <-time.After(testTimeout):
			t.Fatal("no pull request reached the server")
		}
		relay.pause()
		v := "stalled-" + strconv.Itoa(i)
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(v)})
		time.Sleep(250 * time.Millisecond) // > 2 × 75 ms of idle heartbeats, < the 300 ms expiry
		relay.resume()
		deadline := time.Now().Add(5 * time.Second) // AckWait is 30 s
		for handled.finishedSet()[v] == 0 {
			if time.Now().After(deadline) {
				info := consumerInfo(t, input, group, topic)
				t.Fatalf("round %d: %s not handled 5 s after the relay went on (server: %d delivered, %d ack pending): lost until AckWait",
					i, v, info.Delivered.Stream, info.NumAckPending)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.stop(t)
	checkAllAcked(t, input, group, topic, rounds+1)
}

// relay forwards TCP connections to a target; paused, it forwards nothing
// either way (what comes waits in its buffers and the kernel's).
type relay struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool // guarded by mu
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	r.cond = sync.NewCond(&r.mu)
	var conns sync.WaitGroup
	var open []net.Conn
	var openMu sync.Mutex
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			openMu.Lock()
			open = append(open, client, server)
			openMu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); r.forward(server, client) }()
			go func() { defer conns.Done(); r.forward(client, server) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.resume()
		openMu.Lock()
		for _, c := range open {
			c.Close()
		}
		openMu.Unlock()
		conns.Wait()
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) forward(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.paused {
				r.cond.Wait()
			}
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) pause() {
	r.mu.Lock()
	r.paused = true
	r.mu.Unlock()
}

func (r *relay) resume() {
	r.mu.Lock()
	r.paused = false
	r.cond.Broadcast()
	r.mu.Unlock()
}

// TestFetchedAheadIsBounded: with a backlog and several pull requests in
// flight, a member that does not poll, or has paused its topic, holds no
// more than FetchBatch beyond what it polled: the server's count of the
// durable's unacknowledged deliveries says so after several expiries.
func TestFetchedAheadIsBounded(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, batch, n = "bounded", "g", 16, 400
	tr := newTransport(t, url, nats.FetchBatch(batch))
	defer tr.Close()
	for i := range n {
		publish(t, tr.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := tr.Consume(ctx, stream.ConsumerConfig{Group: group, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	checkHeld := func(most int, what string) {
		t.Helper()
		time.Sleep(time.Second) // three FetchExpiry of 300 ms
		if info := consumerInfo(t, tr, group, topic); info.NumAckPending > most {
			t.Fatalf("%s: %d delivered and unacknowledged, want at most %d", what, info.NumAckPending, most)
		}
	}
	checkHeld(batch, "not polling")
	polled, err := c.Poll(ctx, make([]*stream.Record, 0, 2*batch))
	if err != nil {
		t.Fatal(err)
	}
	tp := stream.TopicPartition{Topic: topic}
	c.Pause(tp)
	checkHeld(len(polled)+batch, "paused after a poll")
	c.Mark(tp, polled[len(polled)-1].Offset+1)
	c.Resume(tp)
	var got int
	for got = len(polled); got < n; {
		recs, err := c.Poll(ctx, make([]*stream.Record, 0, 64))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Offset != int64(got) {
				t.Fatalf("offset %d after %d records", r.Offset, got)
			}
			got++
		}
		c.Mark(tp, int64(got))
	}
}

// TestDurableDeletedWhilePausedFailsRun: the durable is deleted while the
// member has no pull request outstanding (its handler holds the window
// full, so the topic is paused and its last request expired): no 409
// tells of the deletion. When the handler finishes and the topic resumes,
// the next request finds no durable (the server answers 503, no
// responders, as it does while JetStream starts), and Run fails with the
// deleted consumer instead of asking again forever.
func TestDurableDeletedWhilePausedFailsRun(t *testing.T) {
	url := natstest.Start(t)
	const topic, group = "deleted-paused", "g"
	gate := make(chan struct{})
	started := make(chan struct{}, 8)
	app := stream.New(newTransport(t, url), stream.Group(group))
	stream.Consume(app, topic, func(ctx context.Context, v string) error {
		started <- struct{}{}
		<-gate
		return nil
	}, stream.MaxInFlight(2))
	input := newTransport(t, url)
	defer input.Close()
	for i := range 4 {
		publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte(strconv.Itoa(i))})
	}
	r := run(app)
	select {
	case <-started:
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("no message handled")
	}
	// Paused (the window of 2 is full), the member's requests expire
	// (FetchExpiry 300 ms) and no new one is sent.
	waitFor(t, func() bool { return consumerInfo(t, input, group, topic).NumWaiting == 0 }, "no pull request outstanding")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := input.JetStream().DeleteConsumer(ctx, nats.StreamName(topic), nats.DurableName(group, topic)); err != nil {
		t.Fatal(err)
	}
	close(gate)
	select {
	case err := <-r.done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) || !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("Run returned %v, want the deleted consumer", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(testTimeout):
		r.cancel()
		<-r.done
		t.Fatal("Run still running after its durable was deleted")
	}
}

// TestCloseDoesNotWaitForPullRequests: a consumer's Close returns once it
// has naked what it holds and flushed, not when its outstanding pull
// request expires (it waited for FetchExpiry, which made the benchmark's
// adapter and framework loops take 5 s for 3,000 messages that the raw
// loop handled in 100 ms). What the server still delivers into that
// request after Close is naked once the request has ended (the
// transport's Close waits for it), so the next member gets it at once,
// not after AckWait.
func TestCloseDoesNotWaitForPullRequests(t *testing.T) {
	url := natstest.Start(t)
	const topic, group, expiry = "close-fast", "g", 3 * time.Second
	tr := newTransport(t, url, nats.FetchExpiry(expiry))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := tr.Consume(ctx, stream.ConsumerConfig{Group: group, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, tr.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte("before")})
	recs, err := c.Poll(ctx, make([]*stream.Record, 0, 8))
	if err != nil || len(recs) != 1 {
		t.Fatalf("Poll: %d records, %v", len(recs), err)
	}
	c.Mark(stream.TopicPartition{Topic: topic}, recs[0].Offset+1)
	waitFor(t, func() bool { return consumerInfo(t, tr, group, topic).NumWaiting > 0 }, "a pull request outstanding")
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > expiry/3 {
		t.Fatalf("Close took %v with a pull request of %v outstanding: it waited for the request", took, expiry)
	}
	if _, err := c.Poll(ctx, nil); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Poll after Close: %v, want ErrClosed", err)
	}
	// Delivered into the closed member's request, which is still waiting.
	input := newTransport(t, url)
	defer input.Close()
	publish(t, input.Producer(), &stream.Record{Topic: topic, Partition: stream.AnyPartition, Value: []byte("after")})
	waitFor(t, func() bool { return consumerInfo(t, input, group, topic).NumAckPending == 1 }, "the message delivered to the closed member")
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if info := consumerInfo(t, input, group, topic); info.NumWaiting != 0 {
		t.Fatalf("the transport's Close returned with %d pull requests waiting", info.NumWaiting)
	}
	next, err := input.Consume(ctx, stream.ConsumerConfig{Group: group, Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close(context.Background())
	recs, err = next.Poll(ctx, make([]*stream.Record, 0, 8))
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "after" {
		t.Fatalf("the next member polled %v, %v; want the message delivered after Close", recs, err)
	}
}
