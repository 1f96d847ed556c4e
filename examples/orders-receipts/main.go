// Command orders-receipts is the example service of the stream framework:
// it turns orders into receipts, and parks the orders it cannot bill in a
// dead-letter topic with the reason.
//
//	orders (JSON Order) --> bill --> receipts (JSON Receipt)
//	                          \--> orders.dlq (the original bytes + why)
//
// A failing order is retried three times with exponential backoff; an
// order that is invalid (or not JSON) fails at once and goes to the DLQ.
// Each order's offset is committed only after its receipt (or its dead
// letter) is published. SIGINT/SIGTERM shut it down gracefully.
//
// Usage:
//
//	sushka serve &
//	go run ./examples/orders-receipts -brokers 127.0.0.1:9092
//	echo 'c1|{"id":"o1","customer":"c1","items":[{"sku":"tea","quantity":2,"price_cents":350}]}' | sushka produce orders -K '|'
//	sushka consume receipts --offset start -n 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
)

// Order is what arrives on the orders topic.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Items    []Item `json:"items"`
}

// Item is one line of an order.
type Item struct {
	SKU        string `json:"sku"`
	Quantity   int    `json:"quantity"`
	PriceCents int    `json:"price_cents"`
}

// Receipt is what the service publishes for a billed order.
type Receipt struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int    `json:"total_cents"`
}

// Topics of the service.
const (
	OrdersTopic   = "orders"
	ReceiptsTopic = "receipts"
	DeadLetters   = "orders.dlq"
)

// ErrInvalidOrder marks an order that retrying cannot fix.
var ErrInvalidOrder = errors.New("invalid order")

// Bill computes an order's receipt. An invalid order is a permanent
// failure: Retry leaves it to the dead-letter topic at once.
func Bill(ctx context.Context, o Order) (Receipt, error) {
	if o.ID == "" || len(o.Items) == 0 {
		return Receipt{}, stream.Permanent(fmt.Errorf("%w: needs an id and at least one item", ErrInvalidOrder))
	}
	total := 0
	for _, it := range o.Items {
		if it.Quantity <= 0 || it.PriceCents < 0 {
			return Receipt{}, stream.Permanent(fmt.Errorf("%w: item %q has quantity %d, price %d", ErrInvalidOrder, it.SKU, it.Quantity, it.PriceCents))
		}
		total += it.Quantity * it.PriceCents
	}
	return Receipt{OrderID: o.ID, Customer: o.Customer, TotalCents: total}, nil
}

// NewApp is the service over any transport: main gives it Kafka, the tests
// the memory transport or an in-process Sushka.
func NewApp(tr stream.Transport, logger *slog.Logger, reg prometheus.Registerer, opts ...stream.Option) (*stream.App, error) {
	metrics, err := stream.Metrics(reg)
	if err != nil {
		return nil, err
	}
	app := stream.New(tr, append([]stream.Option{
		stream.Group("billing"),
		stream.Logger(logger),
		stream.Use(stream.Recover(), stream.Logging(logger), metrics),
	}, opts...)...)
	stream.Handle(app, OrdersTopic, Bill,
		stream.PublishTo(ReceiptsTopic),
		stream.WithMiddleware(
			stream.DeadLetter(app.Producer(), DeadLetters),
			stream.Retry(stream.RetryPolicy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond}),
		),
		// Orders of different customers are billed concurrently within a
		// partition; one customer's orders stay in order.
		stream.KeyConcurrency(8),
	)
	return app, nil
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	metricsAddr := flag.String("metrics", "127.0.0.1:9108", "address for /metrics and /asyncapi.json (empty: none)")
	printAsyncAPI := flag.Bool("asyncapi", false, "print the service's AsyncAPI 3.0 document and exit")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	tr := kafka.Transport(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.AllowAutoTopicCreation())
	app, err := NewApp(tr, logger, reg)
	if err != nil {
		logger.Error("orders-receipts: start", "error", err)
		os.Exit(1)
	}
	info := stream.AsyncAPIInfo{Title: "orders-receipts", Version: "1.0.0",
		Description: "Bills orders into receipts; dead letters in " + DeadLetters, Server: strings.Split(*brokers, ",")[0]}
	if *printAsyncAPI {
		doc, err := app.AsyncAPI(info)
		if err != nil {
			logger.Error("orders-receipts: asyncapi", "error", err)
			os.Exit(1)
		}
		fmt.Println(string(doc))
		return
	}
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/asyncapi.json", app.AsyncAPIHandler(info))
		srv := &http.Server{Addr: *metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("orders-receipts: metrics", "error", err)
			}
		}()
		defer srv.Close()
	}
	logger.Info("orders-receipts: billing", "brokers", *brokers, "orders", OrdersTopic, "receipts", ReceiptsTopic, "dead_letters", DeadLetters)
	if err := app.Run(ctx); err != nil {
		logger.Error("orders-receipts: run", "error", err)
		os.Exit(1)
	}
}
