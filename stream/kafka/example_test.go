package kafka_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
)

type Order struct{ ID string }
type Receipt struct{ OrderID string }

// A service over Sushka (or any Kafka), shut down gracefully on SIGTERM.
func ExampleTransport() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := stream.New(kafka.Transport(kgo.SeedBrokers("127.0.0.1:9092")), stream.Group("billing"))
	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{OrderID: o.ID}, nil
	}, stream.PublishTo("receipts"))
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
}

// The same service, exactly once: the option alone makes each receipt
// part of the transaction that commits its order's offset. Give each
// instance its own transactional id (here the host name).
func ExampleExactlyOnce() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	host, _ := os.Hostname()
	tr := kafka.New([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}, kafka.ExactlyOnce("billing-"+host))
	app := stream.New(tr, stream.Group("billing"))
	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{OrderID: o.ID}, nil
	}, stream.PublishTo("receipts"))
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
}
