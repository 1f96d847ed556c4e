package testbroker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/sushka-io/sushka/broker"
)

// StartInProcess starts a Sushka broker in this process (broker.New, then
// Serve on 127.0.0.1:0) with its data in t.TempDir() and its log discarded,
// and returns its address. The broker shuts down when the test ends; a
// failed shutdown or Serve error fails the test. Use Start instead to test
// the sushka binary as users run it.
func StartInProcess(t testing.TB) string {
	t.Helper()
	return StartInProcessWith(t, broker.Config{})
}

// StartInProcessWith is StartInProcess with cfg; an empty DataDir is a
// t.TempDir() and a nil Logger discards.
func StartInProcessWith(t testing.TB, cfg broker.Config) string {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b, err := broker.New(cfg)
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
