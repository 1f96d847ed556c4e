package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// measureEnv enables TestMeasureExactlyOnceCost (it takes ~30 s).
const measureEnv = "SUSHKA_STREAM_EOS_MEASURE"

type measuredOrder struct {
	ID   int    `json:"id"`
	Note string `json:"note"`
}

// TestMeasureExactlyOnceCost compares the throughput of one workload
// (1 KiB JSON orders, Handle with PublishTo, 3 partitions, 1 or 16 key
// lanes) at least once
// and exactly once, interleaved A B A B after a discarded warm-up round:
// messages per second from the App's start until a read_committed reader
// has every result. A same-process smoke measurement (broker, App and
// reader share the process), closed loop; only the ratio carries over.
//
//	SUSHKA_STREAM_EOS_MEASURE=1 go test -run TestMeasureExactlyOnceCost -v ./stream/kafka
func TestMeasureExactlyOnceCost(t *testing.T) {
	if os.Getenv(measureEnv) == "" {
		t.Skip("set " + measureEnv + "=1 to measure")
	}
	addr := streamtest.StartSushka(t, 3)
	const n, rounds = 3000, 3
	note := strings.Repeat("x", 1024-len(`{"id":0000,"note":""}`))
	run := func(mode deliveryMode, lanes, round int) float64 {
		in, out := fmt.Sprintf("in-%s-%d-%d", mode.name, lanes, round), fmt.Sprintf("out-%s-%d-%d", mode.name, lanes, round)
		tr := kafka.Transport(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation())
		for i := range n {
			v, _ := json.Marshal(measuredOrder{ID: i, Note: note})
			rec := &stream.Record{Topic: in, Partition: stream.AnyPartition, Key: []byte(fmt.Sprint(i)), Value: v}
			if err := tr.Producer().Publish(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
		}
		tr.Close()
		app := stream.New(modeTransport(addr, mode, "measure-"+in, 50*time.Millisecond), stream.Group("g-"+in))
		stream.Handle(app, in, func(ctx context.Context, o measuredOrder) (measuredOrder, error) {
			o.ID += n
			return o, nil
		}, stream.PublishTo(out), stream.KeyConcurrency(lanes))
		start := time.Now()
		stop := runApp(app)
		got := readCommitted(t, addr, out, n, 0)
		elapsed := time.Since(start)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%s: %d results, want %d", mode.name, len(got), n)
		}
		return float64(n) / elapsed.Seconds()
	}
	run(deliveryModes[1], 1, -1) // warm-up, discarded
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
	}
	// One lane per partition (at least once then waits for each result's
	// produce in turn) and 16 key lanes (its produces overlap).
	for _, lanes := range []int{1, 16} {
		rates := map[string][]float64{}
		for round := range rounds {
			for _, mode := range []deliveryMode{deliveryModes[1], deliveryModes[0]} {
				r := run(mode, lanes, round)
				rates[mode.name] = append(rates[mode.name], r)
				t.Logf("lanes %2d round %d %-13s %7.0f msg/s", lanes, round, mode.name, r)
			}
		}
		for _, name := range []string{"at-least-once", "exactly-once"} {
			rs := rates[name]
			t.Logf("lanes %2d %-13s best %7.0f median %7.0f worst %7.0f msg/s", lanes, name, slices.Max(rs), median(rs), slices.Min(rs))
		}
		t.Logf("lanes %2d exactly-once / at-least-once (medians): %.2f", lanes, median(rates["exactly-once"])/median(rates["at-least-once"]))
	}
}
