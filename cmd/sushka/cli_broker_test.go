package main

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

// startCLIBroker starts a Sushka broker in-process on 127.0.0.1:0 with its
// data in t.TempDir() and returns its address.
func startCLIBroker(t *testing.T) string {
	t.Helper()
	b, err := broker.New(broker.Config{
		DataDir: t.TempDir(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
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
