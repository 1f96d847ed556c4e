package streamtest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamtest"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/stream"
)

func TestMemoryTransport(t *testing.T) {
	streamtest.TestTransport(t, func(t *testing.T) streamtest.Connect {
		store := memory.New(memory.Partitions(3))
		return store.Connect
	}, streamtest.Features{Redelivery: true, Resume: true, Headers: true, Timeout: 5 * time.Second})
}

// TestKafkaTransportOnSushka runs the suite over franz-go against an
// in-process Sushka broker on 127.0.0.1.
func TestKafkaTransportOnSushka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	streamtest.TestTransport(t, func(t *testing.T) streamtest.Connect {
		addr := startSushka(t, 3)
		return func() stream.Transport {
			return kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation()},
				kafka.ConsumerOpts(kgo.FetchMaxWait(200*time.Millisecond)),
				kafka.CommitInterval(100*time.Millisecond))
		}
	}, streamtest.Features{Redelivery: true, Resume: true, Headers: true, Timeout: 30 * time.Second})
}

// startSushka is testbroker.StartInProcess with auto-created topics of
// several partitions, so that the suite exercises partitions handled
// concurrently.
func startSushka(t *testing.T, partitions int32) string {
	t.Helper()
	b, err := broker.New(broker.Config{
		DataDir:           t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		DefaultPartitions: partitions,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, broker.ErrServerClosed) {
			t.Errorf("broker serve: %v", err)
		}
	})
	return l.Addr().String()
}
