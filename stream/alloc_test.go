package stream_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

// A scenario of the cost-of-code measurement: a service as a user writes
// it, over the memory transport. register adds its handler to app and
// calls handled once per message it completes.
type allocScenario struct {
	name string
	// floor is the declared allocations per delivery in steady state; the
	// framework's own code allocates nothing, so a floor above zero is
	// what the codec or the broker takes (named in note).
	floor    float64
	note     string
	register func(app *stream.App, handled func(n int))
}

type small struct {
	ID    int `json:"id"`
	Count int `json:"count"`
}

var allocScenarios = []allocScenario{
	{name: "consume []byte, ack each", floor: 0, register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v []byte) error {
			handled(1)
			return nil
		})
	}},
	{name: "consume []byte, 4 key lanes", floor: 0, register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v []byte) error {
			handled(1)
			return nil
		}, stream.KeyConcurrency(4))
	}},
	{name: "batch of []byte, up to 100", floor: 0, register: func(app *stream.App, handled func(int)) {
		stream.HandleBatch(app, "in", func(ctx context.Context, vs [][]byte) error {
			handled(len(vs))
			return nil
		}, stream.BatchMaxCount(100))
	}},
	{name: "consume []byte under Recover, Logging (Info) and Metrics", floor: 0, register: func(app *stream.App, handled func(int)) {
		metrics, err := stream.Metrics(prometheus.NewRegistry())
		if err != nil {
			panic(err)
		}
		quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		stream.Consume(app, "in", func(ctx context.Context, v []byte) error {
			handled(1)
			return nil
		}, stream.WithMiddleware(stream.Recover(), stream.Logging(quiet), metrics))
	}},
	{name: "consume JSON into a small struct", floor: jsonDecodeAllocs(), note: "encoding/json's own allocations per Unmarshal", register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v small) error {
			handled(1)
			return nil
		})
	}},
	{name: "handle []byte and publish the result", floor: 2, note: "the memory broker's copy of the published record (a Record and one block of bytes)", register: func(app *stream.App, handled func(int)) {
		stream.Handle(app, "in", func(ctx context.Context, v []byte) ([]byte, error) {
			handled(1)
			return v, nil
		}, stream.PublishTo("out"))
	}},
}

func jsonDecodeAllocs() float64 {
	data := []byte(`{"id":1,"count":2}`)
	var v small
	return testing.AllocsPerRun(100, func() { _ = json.Unmarshal(data, &v) })
}

// runDeliveries publishes n records before the measured region (as the
// seed's method fills the queue first), then starts an App, waits until it
// has handled all n and shuts it down; it returns the allocations of the
// App's part: start, n deliveries, shutdown.
func runDeliveries(t testing.TB, sc allocScenario, n int) float64 {
	tr := memory.New()
	for i := range n {
		// Eight keys, so that key lanes all have work.
		rec := stream.Record{Topic: "in", Partition: stream.AnyPartition, Key: []byte{byte('a' + i%8)},
			Value: []byte(`{"id":` + strconv.Itoa(i) + `,"count":2}`)}
		if err := tr.Publish(context.Background(), &rec); err != nil {
			t.Fatal(err)
		}
	}
	// AllocsPerRun calls f once more as a warm-up: each call consumes the
	// prefilled topic from the start in a group of its own.
	groups := 0
	return testing.AllocsPerRun(1, func() {
		var count atomic.Int64
		done := make(chan struct{})
		groups++
		app := stream.New(tr.Connect(), stream.Group("g"+strconv.Itoa(groups))) // the App closes its connection, not the store
		sc.register(app, func(k int) {
			if count.Add(int64(k)) == int64(n) {
				close(done)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- app.Run(ctx) }()
		select {
		case <-done:
		case err := <-ran:
			t.Fatalf("Run returned before the deliveries: %v", err)
		}
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
}

// TestDeliveryAllocations is the gate on allocations per delivery: the
// difference between runs of 2,000 and 1,000 deliveries divided by 1,000,
// so that start-up and shutdown cancel out, must not exceed the
// scenario's declared floor.
func TestDeliveryAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	for _, sc := range allocScenarios {
		t.Run(sc.name, func(t *testing.T) {
			// The first run warms what is lazily initialised once per
			// process (the runtime's and the codec's caches).
			runDeliveries(t, sc, 100)
			short := runDeliveries(t, sc, 1000)
			long := runDeliveries(t, sc, 2000)
			perMessage := (long - short) / 1000
			cold := runDeliveries(t, sc, 1)
			t.Logf("%.3f allocations per delivery (1000: %.0f, 2000: %.0f), cold start with one delivery: %.0f; floor %.2f %s",
				perMessage, short, long, cold, sc.floor, sc.note)
			// A hundredth of an allocation per message of slack: a
			// goroutine's sudog or a grown stack record may land in either
			// run; a real allocation on the path is 1.0.
			if perMessage > sc.floor+0.01 {
				t.Fatalf("%.3f allocations per delivery, above the declared floor %.2f", perMessage, sc.floor)
			}
		})
	}
}
