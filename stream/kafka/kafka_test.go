package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

func newTransport(addr string) *kafka.Kafka {
	return kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation()},
		kafka.ConsumerOpts(kgo.FetchMaxWait(100*time.Millisecond)),
		kafka.CommitInterval(50*time.Millisecond))
}

// TestRebalanceHandsOverFinishedPartitions: a second App joins the group
// while the first is handling; the first finishes the in-flight messages
// of the partitions it gives up and commits them before the second gets
// them. Every message is handled, the group's committed offsets reach the
// end of every partition, and a message is handled twice only if it was
// not committed when its partition moved (at least once, not at most).
func TestRebalanceHandsOverFinishedPartitions(t *testing.T) {
	addr := streamtest.StartSushka(t, 3)
	const topic, group = "orders", "billing"

	var mu sync.Mutex
	handled := map[string]int{}
	byApp := map[string]int{}
	build := func(name string) *stream.App {
		app := stream.New(newTransport(addr), stream.Group(group), stream.ShutdownTimeout(5*time.Second))
		stream.Consume(app, topic, func(ctx context.Context, v string) error {
			time.Sleep(10 * time.Millisecond) // in flight long enough to meet the rebalance
			mu.Lock()
			handled[v]++
			byApp[name]++
			mu.Unlock()
			return nil
		})
		return app
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	run := func(app *stream.App) (context.CancelFunc, <-chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- app.Run(ctx) }()
		return cancel, done
	}

	producer := newTransport(addr)
	defer producer.Close()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			rec := &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
			if err := producer.Producer().Publish(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, 30)
	stop1, done1 := run(build("first"))
	waitFor(t, func() bool { return count() >= 10 }, "the first App to handle 10")
	stop2, done2 := run(build("second"))
	// Keep the first App busy until the group has moved partitions to the
	// second (the join takes a while), then a little longer.
	n := 30
	secondHandled := func() int { mu.Lock(); defer mu.Unlock(); return byApp["second"] }
	for deadline := time.Now().Add(30 * time.Second); secondHandled() < 10; n += 3 {
		if time.Now().After(deadline) {
			t.Fatal("the second App never got a partition")
		}
		publish(n, n+3)
		time.Sleep(5 * time.Millisecond)
	}
	publish(n, n+30)
	n += 30
	waitFor(t, func() bool { return count() == n }, "every message to be handled")
	stop1()
	if err := <-done1; err != nil {
		t.Fatalf("first App: %v", err)
	}
	stop2()
	if err := <-done2; err != nil {
		t.Fatalf("second App: %v", err)
	}

	adm := kadm.NewClient(producer.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.At != o.Offset {
			t.Errorf("partition %d: committed %v, end %d", o.Partition, c.At, o.Offset)
		}
		total += o.Offset
	})
	if total != int64(n) {
		t.Fatalf("%d records in the topic, want %d", total, n)
	}
	mu.Lock()
	defer mu.Unlock()
	duplicates := 0
	for _, times := range handled {
		duplicates += times - 1
	}
	t.Logf("%d of %d messages handled twice across the rebalance; handled by App: %v", duplicates, n, byApp)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExplicitPartition: a record with a partition goes there; one
// without, keyed, goes where the key hashes, the same every time.
func TestExplicitPartition(t *testing.T) {
	addr := streamtest.StartSushka(t, 3)
	tr := newTransport(addr)
	defer tr.Close()
	ctx := context.Background()
	for range 3 {
		if err := tr.Producer().Publish(ctx, &stream.Record{Topic: "t", Partition: 2, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Producer().Publish(ctx, &stream.Record{Topic: "t", Partition: stream.AnyPartition, Key: []byte("same"), Value: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := kadm.NewClient(tr.Client()).ListEndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	byPartition := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { byPartition[o.Partition] = o.Offset })
	if byPartition[2] < 3 {
		t.Fatalf("partition 2 has %d records, want at least the 3 sent there (%v)", byPartition[2], byPartition)
	}
	nonEmpty := 0
	for _, n := range byPartition {
		if n > 0 {
			nonEmpty++
		}
	}
	if nonEmpty > 2 || byPartition[0]+byPartition[1]+byPartition[2] != 6 {
		t.Fatalf("records per partition %v: the keyed ones must share one partition", byPartition)
	}
}
