package streamproc_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/proc"
	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamproc"
)

// ledger is a test entity: it keeps the values of its key in the order it
// handled them, and fails the values in failOnce the first time.
type ledger struct {
	key    string
	values []int
	seen   *sync.Map // key -> []int, what every incarnation handled, for the test
	fail   func(key string, v int) error
}

func (l *ledger) Receive(ctx *proc.Context, message any) error {
	m := message.(streamproc.Message[int])
	if m.Key != l.key || string(m.Record.Key) != l.key {
		return errors.New("routed to the wrong entity: " + m.Key + " at " + l.key)
	}
	if err := l.fail(m.Key, m.Value); err != nil {
		return err
	}
	l.values = append(l.values, m.Value)
	l.seen.Store(l.key, append([]int(nil), l.values...))
	return nil
}

func (l *ledger) State() any { return l.values }

type fixture struct {
	store  *memory.Transport
	app    *stream.App
	seen   sync.Map
	cancel context.CancelFunc
	ran    chan error
}

// start runs a proc runtime with a router of ledgers and an App whose
// handler routes topic "in" to them.
func start(t *testing.T, fail func(key string, v int) error) *fixture {
	t.Helper()
	f := &fixture{store: memory.New(), ran: make(chan error, 2)}
	rt, err := proc.New(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := rt.Spawn("", proc.NewEntities(streamproc.Options(proc.EntityOptions{
		New: func(key string, state any) proc.Entity {
			values, _ := state.([]int)
			return &ledger{key: key, values: values, seen: &f.seen, fail: fail}
		},
	})), proc.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.ran <- rt.Run(ctx) }()
	f.app = stream.New(f.store.Connect(), stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond))
	stream.Consume(f.app, "in", streamproc.Route[int](rt, router), stream.KeyConcurrency(4))
	go func() { f.ran <- f.app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-f.ran
		<-f.ran
	})
	return f
}

func (f *fixture) publish(t *testing.T, key string, v int) {
	t.Helper()
	rec := stream.Record{Topic: "in", Partition: 0, Key: []byte(key), Value: []byte(strconv.Itoa(v))}
	if err := f.store.Publish(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRouteGivesEachKeyItsEntityInOrder: interleaved keys over key lanes;
// every entity sees exactly its key's values, in the partition's order,
// and the offsets are committed to the end.
func TestRouteGivesEachKeyItsEntityInOrder(t *testing.T) {
	f := start(t, func(string, int) error { return nil })
	keys := []string{"alice", "bob", "carol", "dave", "erin"}
	const perKey = 40
	for i := range perKey * len(keys) {
		f.publish(t, keys[i%len(keys)], i/len(keys))
	}
	tp := stream.TopicPartition{Topic: "in", Partition: 0}
	waitFor(t, func() bool { return f.store.Committed("g", tp) == int64(perKey*len(keys)) }, "every offset committed")
	for _, key := range keys {
		v, _ := f.seen.Load(key)
		values, _ := v.([]int)
		if len(values) != perKey {
			t.Fatalf("%s's entity handled %d values, want %d", key, len(values), perKey)
		}
		for i, got := range values {
			if got != i {
				t.Fatalf("%s's entity handled %v: out of order", key, values)
			}
		}
	}
}

// TestRouteAcknowledgesAfterTheEntity: a message is committed only after
// its entity handled it; an entity's failure is the handler's (a nack
// redelivers the message to the key's next incarnation), and a panic too.
func TestRouteAcknowledgesAfterTheEntity(t *testing.T) {
	var mu sync.Mutex
	failures := map[int]int{}
	release := make(chan struct{})
	f := start(t, func(key string, v int) error {
		switch v {
		case 1: // blocks until released
			<-release
		case 2: // fails once
			mu.Lock()
			defer mu.Unlock()
			if failures[v]++; failures[v] == 1 {
				return errors.New("transient")
			}
		case 3: // panics once
			mu.Lock()
			first := failures[v] == 0
			failures[v]++
			mu.Unlock()
			if first {
				panic("boom")
			}
		}
		return nil
	})
	tp := stream.TopicPartition{Topic: "in", Partition: 0}
	f.publish(t, "k", 0)
	f.publish(t, "k", 1)
	waitFor(t, func() bool { return f.store.Committed("g", tp) == 1 }, "offset 1 committed")
	time.Sleep(50 * time.Millisecond)
	if got := f.store.Committed("g", tp); got != 1 {
		t.Fatalf("committed %d while the entity still handles offset 1", got)
	}
	close(release)
	f.publish(t, "k", 2)
	f.publish(t, "k", 3)
	waitFor(t, func() bool { return f.store.Committed("g", tp) == 4 }, "every offset committed after the failures")
	v, _ := f.seen.Load("k")
	// The failure and the panic crashed the entity: each new incarnation
	// starts from the last handed-over state (none: no passivation here),
	// so what the last one handled is the retried values.
	if values, _ := v.([]int); len(values) == 0 || values[len(values)-1] != 3 {
		t.Fatalf("the key's entity handled %v, want 3 last", values)
	}
	mu.Lock()
	defer mu.Unlock()
	if failures[2] != 2 || failures[3] != 2 {
		t.Fatalf("attempts %v: the failed and the panicked message must each come again once", failures)
	}
}
