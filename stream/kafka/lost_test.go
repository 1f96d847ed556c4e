package kafka_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// partitionableNetwork dials TCP until cut: then every connection it made
// fails and new dials are refused, as a network partition between one
// client and the broker; heal reconnects.
type partitionableNetwork struct {
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

var errCut = errors.New("test network: cut")

func (n *partitionableNetwork) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if n.cut.Load() {
		return nil, errCut
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c, nil
}

func (n *partitionableNetwork) partition() {
	n.cut.Store(true)
	n.mu.Lock()
	for _, c := range n.conns {
		_ = c.Close()
	}
	n.conns = nil
	n.mu.Unlock()
}

func (n *partitionableNetwork) heal() { n.cut.Store(false) }

// TestLostPartitionsAreDropped: a member cut off from the broker loses its
// partition (kgo's OnPartitionsLost: its heartbeat fails), while its
// handler is in the middle of a message. The framework must cancel that
// handler at once rather than wait for it (the partition is another
// member's by now), and nothing the dropped work finishes later may be
// committed: the new owner's committed offset stands.
func TestLostPartitionsAreDropped(t *testing.T) {
	addr := streamtest.StartSushka(t, 1)
	const topic, group, records, stallAt = "lost", "lost-group", 10, 5
	admin := newTransport(addr)
	defer admin.Close()
	for i := range records {
		rec := &stream.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))}
		if err := admin.Producer().Publish(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offsets, err := kadm.NewClient(admin.Client()).FetchOffsets(ctx, group)
		if err != nil {
			return -1
		}
		o, ok := offsets.Lookup(topic, 0)
		if !ok {
			return -1
		}
		return o.At
	}

	// The first App: 0..4 pass, 5 stalls until released, ignoring its
	// context (a handler may), and reports when its context ends.
	var network partitionableNetwork
	stalled := make(chan struct{})
	release := make(chan struct{})
	cancelled := make(chan time.Time, 1)
	var stallOnce sync.Once
	first := stream.New(kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.Dialer(network.dial)},
		kafka.ConsumerOpts(kgo.FetchMaxWait(100*time.Millisecond),
			// Broker minimum session; a short rebalance timeout, so that
			// the group gives up on the cut member quickly; a heartbeat
			// that fails fast when the network is cut.
			kgo.SessionTimeout(6*time.Second), kgo.RebalanceTimeout(2*time.Second),
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.RetryTimeout(time.Second)),
		kafka.CommitInterval(50*time.Millisecond)),
		stream.Group(group), stream.ShutdownTimeout(30*time.Second))
	stream.Consume(first, topic, func(ctx context.Context, v string) error {
		if v != strconv.Itoa(stallAt) {
			return nil
		}
		stallOnce.Do(func() {
			close(stalled)
			go func() { <-ctx.Done(); cancelled <- time.Now() }()
			<-release
		})
		return nil
	})
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { done1 <- first.Run(ctx1) }()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		network.heal()
		stop1()
		<-done1
	}()
	<-stalled
	waitFor(t, func() bool { return committed() == stallAt }, "the first App to commit the messages before the stalled one")

	cutAt := time.Now()
	network.partition()
	select {
	case at := <-cancelled:
		t.Logf("the stalled handler's context ended %v after the cut", at.Sub(cutAt).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the partition was lost, and the handler still runs under a live context (waited for, not dropped)")
	}

	// A second App takes the partition over from the committed offset and
	// finishes it.
	var secondHandled atomic.Int64
	second := stream.New(newTransport(addr), stream.Group(group), stream.ShutdownTimeout(5*time.Second))
	stream.Consume(second, topic, func(ctx context.Context, v string) error {
		secondHandled.Add(1)
		return nil
	})
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- second.Run(ctx2) }()
	defer func() { stop2(); <-done2 }()
	waitFor(t, func() bool { return committed() == records }, "the second App to commit the end of the partition")
	if n := secondHandled.Load(); n != records-stallAt {
		t.Fatalf("the second App handled %d messages, want the %d from the committed offset", n, records-stallAt)
	}

	// The dropped handler now returns success, and the first App comes
	// back into the group and then shuts down (its Close commits every
	// mark it holds): what its dropped work finished is not its to commit.
	close(release)
	network.heal()
	waitFor(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		described, err := kadm.NewClient(admin.Client()).DescribeGroups(ctx, group)
		return err == nil && len(described[group].Members) == 2
	}, "the cut member to rejoin the group")
	time.Sleep(500 * time.Millisecond) // many commit intervals
	if got := committed(); got != records {
		t.Fatalf("committed offset %d once the cut member was back, want %d (the new owner's): the lost partition's dropped work was committed", got, records)
	}
	stop1()
	if err := <-done1; err != nil {
		t.Fatalf("first App: %v", err)
	}
	done1 <- nil // for the deferred stop
	if got := committed(); got != records {
		t.Fatalf("committed offset %d after the cut member shut down, want %d (the new owner's): the lost partition's dropped work was committed", got, records)
	}
}
