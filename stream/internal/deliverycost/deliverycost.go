// Package deliverycost is the one table of the framework's cost-of-code
// scenarios (issue 9): services as a user writes them over the memory
// transport, each with its declared allocation floors. Two instruments read
// it: stream's TestDeliveryAllocations (Go's allocation counters, a gate in
// `go test`) and stream/internal/costbench (callgrind's instruction counts
// and the comparison against main), so both measure the same services and
// declare each floor once.
package deliverycost

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
)

// A Scenario is one service. Register adds its handler to app and calls
// handled once per message it completes (with the count of a batch).
type Scenario struct {
	Name string
	// Floor is the declared allocations per delivery in steady state. The
	// framework's own code allocates nothing on the delivery path, so a
	// floor above zero is what the codec or the broker takes (named in
	// Note).
	Floor float64
	// ColdFloor is the declared allocations of a cold start in a warm
	// process (New, Run, one delivery and the shutdown; what is lazily
	// initialised once per process is not the App's): the measured figure
	// plus about a tenth of headroom for the runtime (a grown stack, a
	// timer), so that a new allocation per App or per handler fails.
	ColdFloor float64
	Note      string
	Register  func(app *stream.App, handled func(n int))
}

type small struct {
	ID    int `json:"id"`
	Count int `json:"count"`
}

// Scenarios is the table. Names are stable: the results document and the
// comparison against main match rows by name.
var Scenarios = []Scenario{
	{Name: "consume []byte, ack each", Floor: 0, ColdFloor: 80, Register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v []byte) error {
			handled(1)
			return nil
		})
	}},
	{Name: "consume JSON into a small struct", Floor: JSONDecodeAllocs(), ColdFloor: 85, Note: "encoding/json's own allocations per Unmarshal", Register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v small) error {
			handled(1)
			return nil
		})
	}},
	{Name: "consume []byte, 4 key lanes", Floor: 0, ColdFloor: 100, Register: func(app *stream.App, handled func(int)) {
		stream.Consume(app, "in", func(ctx context.Context, v []byte) error {
			handled(1)
			return nil
		}, stream.KeyConcurrency(4))
	}},
	{Name: "batch of []byte, up to 100", Floor: 0, ColdFloor: 85, Register: func(app *stream.App, handled func(int)) {
		// A wait no run meets: batches flush by count (the runs' lengths
		// are multiples of 100), not by a timer on the wall clock, which
		// under valgrind on a loaded machine fired now and then and split
		// batches (1 % spread); the cold run's one record waits it out.
		stream.HandleBatch(app, "in", func(ctx context.Context, vs [][]byte) error {
			handled(len(vs))
			return nil
		}, stream.BatchMaxCount(100), stream.BatchMaxWait(time.Second))
	}},
	{Name: "consume []byte under Recover, Logging (Info) and Metrics", Floor: 0, ColdFloor: 225, Register: func(app *stream.App, handled func(int)) {
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
	{Name: "handle []byte and publish the result", Floor: 2, ColdFloor: 85, Note: "the memory broker's copy of the published record (a Record and one block of bytes)", Register: func(app *stream.App, handled func(int)) {
		stream.Handle(app, "in", func(ctx context.Context, v []byte) ([]byte, error) {
			handled(1)
			return v, nil
		}, stream.PublishTo("out"))
	}},
}

// JSONDecodeAllocs is encoding/json's own allocations per Unmarshal of the
// scenarios' record into their struct: the JSON scenario's floor is what
// the codec takes, measured rather than guessed (it changes with Go).
func JSONDecodeAllocs() float64 {
	data := []byte(`{"id":1,"count":2}`)
	var v small
	return testing.AllocsPerRun(100, func() { _ = json.Unmarshal(data, &v) })
}

// Fill publishes n records to the topic "in" of store, with a JSON value
// every scenario can decode and 256 one-byte keys, which load 4 key lanes
// alike (64 keys each). The first version had eight keys while lanes were
// chosen with a per-process hash seed: a run could give one lane most of
// them, and instructions per message spread 5.6 % over five processes.
func Fill(store *memory.Transport, n int) error {
	for i := range n {
		rec := stream.Record{Topic: "in", Partition: stream.AnyPartition, Key: []byte{byte(i)},
			Value: []byte(`{"id":` + strconv.Itoa(i) + `,"count":2}`)}
		if err := store.Publish(context.Background(), &rec); err != nil {
			return err
		}
	}
	return nil
}

// Deliver runs sc once over a connection to store, as group: it starts an
// App, waits until the handler has completed n messages (store holds at
// least n, see Fill), cancels it and waits for the graceful shutdown. A
// fresh group consumes the topic from the start, so one filled store serves
// several runs.
func Deliver(store *memory.Transport, sc Scenario, n int, group string) error {
	var count atomic.Int64
	done := make(chan struct{})
	app := stream.New(store.Connect(), stream.Group(group)) // the App closes its connection, not the store
	sc.Register(app, func(k int) {
		if count.Add(int64(k)) == int64(n) {
			close(done)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	select {
	case <-done:
	case err := <-ran:
		return errors.Join(errors.New("deliverycost: Run returned before the deliveries"), err)
	}
	cancel()
	return <-ran
}
