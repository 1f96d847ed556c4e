package streamtest_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/nats"
	"github.com/sushka-io/sushka/stream/nats/natstest"
	"github.com/sushka-io/sushka/stream/streamtest"

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
		addr := streamtest.StartSushka(t, 3)
		return func() stream.Transport {
			return kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation()},
				kafka.ConsumerOpts(kgo.FetchMaxWait(200*time.Millisecond)),
				kafka.CommitInterval(100*time.Millisecond))
		}
	}, streamtest.Features{Redelivery: true, Resume: true, Headers: true, Timeout: 30 * time.Second})
}

// TestNATSTransport runs the suite over nats.go against a real nats-server
// with JetStream (test/natsserver, a child process on 127.0.0.1). One
// member per group, so offset order holds; Redelivery is the transport's
// local redelivery (see the stream/nats package doc).
func TestNATSTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	streamtest.TestTransport(t, func(t *testing.T) streamtest.Connect {
		url := natstest.Start(t)
		return func() stream.Transport {
			return nats.New(url, nil, nats.FetchExpiry(time.Second))
		}
	}, streamtest.Features{Redelivery: true, Resume: true, Headers: true, Timeout: 15 * time.Second})
}
