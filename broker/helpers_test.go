package broker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testBroker is a broker serving on 127.0.0.1:0 for one test.
type testBroker struct {
	*Broker
	t    *testing.T
	dir  string
	done chan error
}

func testLogger() *slog.Logger {
	if os.Getenv("SUSHKA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startBroker(t *testing.T, cfg Config) *testBroker {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBroker{Broker: b, t: t, dir: cfg.DataDir, done: make(chan error, 1)}
	go func() { tb.done <- b.Serve(l) }()
	for b.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() { tb.stop() })
	return tb
}

func (tb *testBroker) stop() {
	if tb.Broker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.Shutdown(ctx); err != nil {
		tb.t.Errorf("shutdown: %v", err)
	}
	if err := <-tb.done; err != ErrServerClosed {
		tb.t.Errorf("serve returned %v", err)
	}
	tb.Broker = nil
}

func (tb *testBroker) client(opts ...kgo.Opt) *kgo.Client {
	tb.t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(tb.AdvertisedAddr())}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Cleanup(cl.Close)
	return cl
}

func (tb *testBroker) admin() *kadm.Client {
	return kadm.NewClient(tb.client())
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
