package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// TestBacklogIsNotPacedByPauses: a backlog on one partition while the
// others are idle, consumed with the transport's defaults. The App pauses
// the partition whenever MaxInFlight records wait for its worker; when
// that pause reached kgo, kgo dropped what it had fetched for the
// partition, and after the resume refetched it only once its in-flight
// fetch, a long poll of the idle partitions, had waited out FetchMaxWait
// (5 s by default): 1 537 to 11 777 of 20 001 records were handled after
// 5 s in three runs (one run in four finished). Held in the transport
// instead, they go on at the consumer's pace.
func TestBacklogIsNotPacedByPauses(t *testing.T) {
	addr := streamtest.StartSushka(t, 2)
	const topic, group, backlog = "backlog", "g", 20000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gen, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	value := make([]byte, 512)
	records := make([]*kgo.Record, 0, backlog+1)
	for range backlog {
		records = append(records, &kgo.Record{Topic: topic, Partition: 0, Value: value})
	}
	records = append(records, &kgo.Record{Topic: topic, Partition: 1, Value: value})
	if err := gen.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	app := stream.New(kafka.Transport(kgo.SeedBrokers(addr)), stream.Group(group))
	var handled atomic.Int64
	done := make(chan struct{})
	var first atomic.Int64
	stream.Consume(app, topic, func(context.Context, []byte) error {
		first.CompareAndSwap(0, time.Now().UnixNano())
		if handled.Add(1) == backlog+1 {
			close(done)
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()
	const bound = 5 * time.Second
	select {
	case <-done:
		t.Logf("%d records in %v after the first", backlog+1, time.Since(time.Unix(0, first.Load())))
	case <-time.After(bound):
		t.Errorf("%d of %d records handled after %v: the backlog is paced by pauses", handled.Load(), backlog+1, bound)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}
