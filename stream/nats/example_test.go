package nats_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/nats"
	"github.com/sushka-io/sushka/stream/nats/natstest"
)

type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type Receipt struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

// A service over NATS JetStream: the same handlers as over Kafka. The
// streams "orders" and "receipts" are created on first use; the group
// "billing" is a durable consumer on each. The example starts its own
// nats-server (natstest.Launch) as a benchmark command would; a service
// connects to its cluster's URL instead.
func Example() {
	dir, err := os.MkdirTemp("", "stream-nats-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natstest.Launch(natstest.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	app := stream.New(nats.Transport(srv.URL), stream.Group("billing"))
	stream.Handle(app, "orders", func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{OrderID: o.ID, Total: o.Amount * 2}, nil
	}, stream.PublishTo("receipts"))
	done := make(chan struct{})
	stream.Consume(app, "receipts", func(ctx context.Context, r Receipt) error {
		rec := stream.Current(ctx)
		fmt.Printf("receipt for %s: %d (key %s, offset %d)\n", r.OrderID, r.Total, rec.Key, rec.Offset)
		close(done)
		return nil
	})

	input := nats.Transport(srv.URL)
	defer input.Close()
	order := &stream.Record{Topic: "orders", Partition: stream.AnyPartition, Key: []byte("customer-7"), Value: []byte(`{"id":"o1","amount":21}`)}
	if err := input.Producer().Publish(context.Background(), order); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	<-done
	cancel()
	if err := <-ran; err != nil {
		panic(err)
	}
	// Output:
	// receipt for o1: 42 (key customer-7, offset 0)
}
