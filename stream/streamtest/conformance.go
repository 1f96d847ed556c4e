package streamtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/stream"
)

// Features says what a transport can do; TestTransport skips the tests of
// what it cannot, so a transport is supported for exactly the features it
// declares and passes.
type Features struct {
	// Redelivery: Seek makes a partition deliver again from an offset.
	Redelivery bool
	// Resume: a group's committed offsets outlive its consumer, so a new
	// consumer continues after the last acknowledged message.
	Resume bool
	// Headers: record headers survive the trip.
	Headers bool
	// Timeout bounds each wait (a real broker's group join takes seconds).
	Timeout time.Duration
}

// Connect returns a fresh transport to one broker each time it is called:
// the suite restarts Apps (each closes its transport) over the same data.
type Connect func() stream.Transport

// TestTransport is the conformance suite (in the style of Watermill's
// pubsub/tests): newBroker starts a broker for one test and returns how to
// connect to it. Every test uses topics and groups of its own.
func TestTransport(t *testing.T, newBroker func(t *testing.T) Connect, features Features) {
	if features.Timeout == 0 {
		features.Timeout = 10 * time.Second
	}
	tests := []struct {
		name string
		need bool
		run  func(t *testing.T, s *suite)
	}{
		{"PublishConsume", true, testPublishConsume},
		{"OrderPerKey", true, testOrderPerKey},
		{"ResultPublishedBeforeAck", true, testResultPublished},
		{"Batch", true, testBatch},
		{"KeyConcurrency", true, testKeyConcurrency},
		{"Backpressure", true, testBackpressure},
		{"NackRedelivers", features.Redelivery, testNackRedelivers},
		{"NackTheOnlyMessage", features.Redelivery, testNackTheOnlyMessage},
		{"ResumeFromCommitted", features.Resume, testResume},
		{"UnacknowledgedIsDeliveredAgain", features.Resume, testUnacknowledgedAgain},
		{"ShutdownFinishesInFlight", features.Resume, testShutdownFinishesInFlight},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.need {
				t.Skip("the transport does not declare this feature")
			}
			tc.run(t, &suite{connect: newBroker(t), features: features, prefix: tc.name})
		})
	}
}

type suite struct {
	connect  Connect
	features Features
	prefix   string
}

func (s *suite) name(what string) string { return s.prefix + "-" + what }

func (s *suite) start(t *testing.T, build Build) *Harness {
	t.Helper()
	return New(t, build, WithTransport(s.connect()), Timeout(s.features.Timeout))
}

// collector keeps what handlers saw, safe for concurrent handlers.
type collector struct {
	mu   sync.Mutex
	seen []stream.Record
}

func (c *collector) add(ctx context.Context) {
	r := copyRecord(stream.Current(ctx))
	c.mu.Lock()
	c.seen = append(c.seen, r)
	c.mu.Unlock()
}

func (c *collector) records() []stream.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

func keyOf(i, keys int) []byte { return []byte("key-" + strconv.Itoa(i%keys)) }

func testPublishConsume(t *testing.T, s *suite) {
	topic := s.name("in")
	var seen collector
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Consume(app, topic, func(ctx context.Context, v []byte) error {
			seen.add(ctx)
			return nil
		})
		return app
	})
	const n = 50
	for i := range n {
		rec := &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: keyOf(i, 7), Value: []byte("value-" + strconv.Itoa(i))}
		if s.features.Headers {
			rec.Headers = []stream.Header{{Key: "i", Value: []byte(strconv.Itoa(i))}}
		}
		h.PublishRecord(rec)
	}
	h.WaitAcked(topic, n)
	got := seen.records()
	if len(got) != n {
		t.Fatalf("handled %d records, want %d (no duplicates in a run without failures)", len(got), n)
	}
	values := map[string]bool{}
	for _, r := range got {
		values[string(r.Value)] = true
		if s.features.Headers {
			i, _ := (&r).Header("i")
			if string(r.Value) != "value-"+string(i) {
				t.Fatalf("record %q has header i=%q", r.Value, i)
			}
		}
		if string(r.Key) == "" {
			t.Fatalf("record %q lost its key", r.Value)
		}
	}
	for i := range n {
		if !values["value-"+strconv.Itoa(i)] {
			t.Fatalf("value-%d never handled", i)
		}
	}
}

func testOrderPerKey(t *testing.T, s *suite) {
	topic := s.name("in")
	var seen collector
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			seen.add(ctx)
			return nil
		})
		return app
	})
	const n, keys = 200, 5
	for i := range n {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: keyOf(i, keys), Value: []byte(strconv.Itoa(i))})
	}
	h.WaitAcked(topic, n)
	checkOrderPerKey(t, seen.records())
}

func checkOrderPerKey(t *testing.T, records []stream.Record) {
	t.Helper()
	last := map[string]int{}
	for _, r := range records {
		v, _ := strconv.Atoi(string(r.Value))
		if prev, ok := last[string(r.Key)]; ok && v <= prev {
			t.Fatalf("key %s: %d handled after %d", r.Key, v, prev)
		}
		last[string(r.Key)] = v
	}
}

func testResultPublished(t *testing.T, s *suite) {
	in, out := s.name("orders"), s.name("receipts")
	var mu sync.Mutex
	var receipts []string
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Handle(app, in, func(ctx context.Context, v string) (string, error) {
			return "receipt-" + v, nil
		}, stream.PublishTo(out))
		stream.Consume(app, out, func(ctx context.Context, v string) error {
			mu.Lock()
			receipts = append(receipts, v+"@"+string(stream.Current(ctx).Key))
			mu.Unlock()
			return nil
		})
		return app
	})
	const n = 20
	for i := range n {
		publishString(h, in, keyOf(i, 3), strconv.Itoa(i))
	}
	acked := h.WaitAcked(in, n)
	// Every acknowledged order's receipt was published by the time it was
	// acknowledged: the published events precede the ack events.
	if published := h.Published(out); len(published) < len(acked) {
		t.Fatalf("%d receipts published for %d acknowledged orders", len(published), len(acked))
	}
	h.WaitAcked(out, n)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(receipts)
	for i := range n {
		want := fmt.Sprintf("receipt-%d@%s", i, keyOf(i, 3))
		if _, found := slices.BinarySearch(receipts, want); !found {
			t.Fatalf("receipt %q not consumed from %s (got %v)", want, out, receipts)
		}
	}
}

func publishString(h *Harness, topic string, key []byte, v string) {
	h.PublishRecord(&stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: key, Value: []byte(v)})
}

func testBatch(t *testing.T, s *suite) {
	topic := s.name("in")
	var mu sync.Mutex
	var sizes []int
	var values []string
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.HandleBatch(app, topic, func(ctx context.Context, batch []string) error {
			records := stream.Batch(ctx)
			if len(records) != len(batch) {
				return fmt.Errorf("%d records for %d values", len(records), len(batch))
			}
			mu.Lock()
			sizes = append(sizes, len(batch))
			values = append(values, batch...)
			mu.Unlock()
			return nil
		}, stream.BatchMaxCount(10), stream.BatchMaxWait(50*time.Millisecond))
		return app
	})
	const n = 25
	for i := range n {
		publishString(h, topic, []byte("one-key"), strconv.Itoa(i))
	}
	h.WaitAcked(topic, n)
	mu.Lock()
	defer mu.Unlock()
	for _, size := range sizes {
		if size < 1 || size > 10 {
			t.Fatalf("batch sizes %v: each must be 1..10", sizes)
		}
	}
	if len(values) != n {
		t.Fatalf("%d values in batches %v", len(values), sizes)
	}
	for i, v := range values {
		if v != strconv.Itoa(i) {
			t.Fatalf("batches out of order: %v", values)
		}
	}
}

// testKeyConcurrency: in one partition, a key whose handler is blocked
// does not hold back the other keys, each key stays in order, and the
// acknowledgements follow offset order. The slow key's first message waits
// (up to the timeout) for a message of another key to finish: with
// sequential handling that never happens. Ten other keys over eight lanes
// make it practically certain that one of them does not share the slow
// key's lane ((1/8)^10 that all do).
func testKeyConcurrency(t *testing.T, s *suite) {
	topic := s.name("in")
	var seen collector
	var fastDone atomic.Int32
	fastFinished := make(chan struct{})
	var once sync.Once
	overtaken := make(chan bool, 1)
	const fast, slow, lanes, fastKeys = 30, 3, 8, 10
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			if string(stream.Current(ctx).Key) == "slow" {
				if v == "0" {
					select {
					case <-fastFinished:
						overtaken <- true
					case <-time.After(s.features.Timeout / 3):
						overtaken <- false
					}
				}
			} else if fastDone.Add(1) == 1 {
				once.Do(func() { close(fastFinished) })
			}
			seen.add(ctx)
			return nil
		}, stream.KeyConcurrency(lanes))
		return app
	})
	for i := range slow {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: 0, Key: []byte("slow"), Value: []byte(strconv.Itoa(i))})
	}
	for i := range fast {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: 0, Key: []byte("fast-" + strconv.Itoa(i%fastKeys)), Value: []byte(strconv.Itoa(slow + i))})
	}
	acked := h.WaitAcked(topic, fast+slow)
	if !<-overtaken {
		t.Fatal("no other key finished while the slow key's first message was being handled: keys were not handled concurrently")
	}
	checkOrderPerKey(t, seen.records())
	for i := 1; i < len(acked); i++ {
		if acked[i].Offset <= acked[i-1].Offset {
			t.Fatalf("acknowledged out of offset order: %d after %d", acked[i].Offset, acked[i-1].Offset)
		}
	}
	if acked[0].Offset != 0 {
		t.Fatalf("first acknowledgement at offset %d", acked[0].Offset)
	}
}

func testNackRedelivers(t *testing.T, s *suite) {
	topic := s.name("in")
	var mu sync.Mutex
	attempts := map[string][]int{}
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")), stream.RedeliveryBackoff(time.Millisecond))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			mu.Lock()
			attempts[v] = append(attempts[v], stream.Attempt(ctx))
			first := len(attempts[v]) == 1
			mu.Unlock()
			if i, _ := strconv.Atoi(v); i%3 == 1 && first {
				return errors.New("fail the first attempt")
			}
			return nil
		})
		return app
	})
	const n = 9
	for i := range n {
		publishString(h, topic, []byte("k"), strconv.Itoa(i))
	}
	h.WaitAcked(topic, n)
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		got := attempts[strconv.Itoa(i)]
		if i%3 == 1 && !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("message %d attempts %v, want [1 2]", i, got)
		}
		if len(got) == 0 || got[len(got)-1] != len(got) {
			t.Fatalf("message %d attempts %v", i, got)
		}
	}
}

func consumeInto(s *suite, topic string, seen *collector, opts ...stream.HandlerOption) Build {
	return func(tr stream.Transport, appOpts ...stream.Option) *stream.App {
		app := stream.New(tr, append(appOpts, stream.Group(s.name("g")))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			seen.add(ctx)
			if v == "leave" {
				return nil
			}
			stream.Ack(ctx) // only heard under Manual
			return nil
		}, opts...)
		return app
	}
}

func testResume(t *testing.T, s *suite) {
	topic := s.name("in")
	var first, second collector
	h := s.start(t, consumeInto(s, topic, &first))
	for i := range 10 {
		publishString(h, topic, nil, strconv.Itoa(i))
	}
	h.WaitAcked(topic, 10)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h2 := s.start(t, consumeInto(s, topic, &second))
	for i := 10; i < 15; i++ {
		publishString(h2, topic, nil, strconv.Itoa(i))
	}
	h2.WaitAcked(topic, 5)
	if err := h2.Stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range second.records() {
		got = append(got, string(r.Value))
	}
	slices.SortFunc(got, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	if !slices.Equal(got, []string{"10", "11", "12", "13", "14"}) {
		t.Fatalf("the restarted App handled %v, want exactly 10..14 (what was acknowledged before must not come again)", got)
	}
}

func testUnacknowledgedAgain(t *testing.T, s *suite) {
	topic := s.name("in")
	var first, second collector
	h := s.start(t, consumeInto(s, topic, &first, stream.WithAckPolicy(stream.Manual)))
	for _, v := range []string{"a", "b", "leave"} {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: 0, Value: []byte(v)})
	}
	h.Wait(stream.EventHandled, topic, 3)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h2 := s.start(t, consumeInto(s, topic, &second))
	h2.WaitAcked(topic, 1)
	got := second.records()
	if len(got) != 1 || string(got[0].Value) != "leave" || got[0].Offset != 2 {
		t.Fatalf("after a restart: %d records, first %q: want the unacknowledged one (offset 2) only", len(got), valueOf(got))
	}
}

func valueOf(rs []stream.Record) string {
	if len(rs) == 0 {
		return ""
	}
	return string(rs[0].Value)
}

// testShutdownFinishesInFlight: a handler still running when Run's context
// ends finishes, publishes its result and is committed before the
// transport closes; a restarted App does not see the message again.
func testShutdownFinishesInFlight(t *testing.T, s *suite) {
	in, out := s.name("in"), s.name("out")
	entered := make(chan struct{})
	var once sync.Once
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Handle(app, in, func(ctx context.Context, v string) (string, error) {
			once.Do(func() { close(entered) })
			time.Sleep(300 * time.Millisecond)
			return "done-" + v, nil
		}, stream.PublishTo(out))
		return app
	})
	publishString(h, in, nil, "x")
	select {
	case <-entered:
	case <-time.After(s.features.Timeout):
		t.Fatal("the handler never ran")
	}
	if err := h.Stop(); err != nil { // cancels Run while the handler sleeps
		t.Fatal(err)
	}
	if len(h.Published(out)) != 1 || len(h.Acked(in)) != 1 {
		t.Fatalf("after shutdown: %d published, %d acknowledged; want the in-flight message finished: 1 and 1",
			len(h.Published(out)), len(h.Acked(in)))
	}
	var again collector
	h2 := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Consume(app, in, func(ctx context.Context, v string) error { again.add(ctx); return nil })
		return app
	})
	publishString(h2, in, nil, "y")
	h2.WaitAcked(in, 1)
	if got := again.records(); len(got) != 1 || string(got[0].Value) != "y" {
		t.Fatalf("restarted App handled %d records (first %q): the finished message came again", len(got), valueOf(got))
	}
}

// countingTransport wraps a transport to watch what its consumer does.
type countingTransport struct {
	stream.Transport
	polled, pauses, resumes atomic.Int64
}

func (c *countingTransport) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	inner, err := c.Transport.Consume(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &countingConsumer{Consumer: inner, t: c}, nil
}

type countingConsumer struct {
	stream.Consumer
	t *countingTransport
}

func (c *countingConsumer) Poll(ctx context.Context, buf []*stream.Record) ([]*stream.Record, error) {
	records, err := c.Consumer.Poll(ctx, buf)
	c.t.polled.Add(int64(len(records)))
	return records, err
}

func (c *countingConsumer) Pause(tp stream.TopicPartition) {
	c.t.pauses.Add(1)
	c.Consumer.Pause(tp)
}

func (c *countingConsumer) Resume(tp stream.TopicPartition) {
	c.t.resumes.Add(1)
	c.Consumer.Resume(tp)
}

// testBackpressure: a partition whose handler is blocked is paused at
// MaxInFlight; what is published meanwhile is not fetched; once the
// handler goes on, the partition resumes and everything is handled.
func testBackpressure(t *testing.T, s *suite) {
	topic := s.name("in")
	release := make(chan struct{})
	tr := &countingTransport{Transport: s.connect()}
	h := New(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			<-release
			return nil
		}, stream.MaxInFlight(4))
		return app
	}, WithTransport(tr), Timeout(s.features.Timeout))
	for i := range 20 {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))})
	}
	deadline := time.Now().Add(s.features.Timeout)
	for tr.pauses.Load() == 0 {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the partition was never paused while its handler was blocked")
		}
		time.Sleep(time.Millisecond)
	}
	// The client may still hand over what it had fetched before the
	// pause took effect: wait for that, then publish more.
	time.Sleep(300 * time.Millisecond)
	polledAtPause := tr.polled.Load()
	for i := 20; i < 60; i++ {
		h.PublishRecord(&stream.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))})
	}
	time.Sleep(300 * time.Millisecond)
	if polled := tr.polled.Load(); polled != polledAtPause {
		close(release)
		t.Fatalf("%d records polled from a paused partition", polled-polledAtPause)
	}
	close(release)
	h.WaitAcked(topic, 60)
	if tr.resumes.Load() == 0 {
		t.Fatal("acknowledged everything without resuming the partition")
	}
}

// testNackTheOnlyMessage: a nack on an idle partition (nothing after the
// failed message) still redelivers: the seek must not wait for a record.
func testNackTheOnlyMessage(t *testing.T, s *suite) {
	topic := s.name("in")
	var calls atomic.Int32
	h := s.start(t, func(tr stream.Transport, opts ...stream.Option) *stream.App {
		app := stream.New(tr, append(opts, stream.Group(s.name("g")), stream.RedeliveryBackoff(time.Millisecond))...)
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			if calls.Add(1) == 1 {
				return errors.New("fail the first attempt")
			}
			return nil
		})
		return app
	})
	publishString(h, topic, nil, "only")
	h.WaitAcked(topic, 1)
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2", calls.Load())
	}
}
