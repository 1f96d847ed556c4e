package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMemoryBudget: reservations that fit are granted at once even while
// larger ones wait (first fit); a release lets waiters in in arrival order;
// a waiter whose context ends leaves nothing reserved.
func TestMemoryBudget(t *testing.T) {
	b := newMemoryBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() { big <- b.acquire(ctx, 80) }()
	waitWaiters(t, b, 1)
	if err := b.acquire(ctx, 40); err != nil { // fits beside the 60
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- b.acquire(cctx, 30) }()
	waitWaiters(t, b, 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire returned %v", err)
	}
	b.release(60)
	b.release(40)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if got := b.inUse.Load(); got != 80 {
		t.Fatalf("in use %d, want 80", got)
	}
	b.release(80)
	if got := b.inUse.Load(); got != 0 {
		t.Fatalf("in use %d after every release", got)
	}
}

func waitWaiters(t *testing.T, b *memoryBudget, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.waiters)
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// trickle returns its bytes a few at a time and records the largest buffer
// it was asked to fill.
type trickle struct {
	left    int
	maxRead int
}

func (r *trickle) Read(p []byte) (int, error) {
	r.maxRead = max(r.maxRead, len(p))
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left, 1000)
	r.left -= n
	return n, nil
}

// TestReadFrameGrowsAsBytesArrive: a frame announced large whose bytes stop
// early costs only the first chunk; a complete frame is read whole.
func TestReadFrameGrowsAsBytesArrive(t *testing.T) {
	r := &trickle{left: 10_000}
	if _, err := readFrame(r, 100<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v", err)
	}
	if r.maxRead > firstChunkBytes {
		t.Fatalf("a 100 MiB frame (never pooled) of which 10 kB arrived was given a %d-byte buffer", r.maxRead)
	}
	r = &trickle{left: 3 << 20}
	b, err := readFrame(r, 3<<20)
	if err != nil || len(b) != 3<<20 {
		t.Fatalf("full frame: %d bytes, %v", len(b), err)
	}
}

// TestBodyShapes: bodies without byte fields let go of their frame once
// decoded, with their unknown tags dropped; bodies with byte fields keep it.
func TestBodyShapes(t *testing.T) {
	shapes := bodyShapes()
	for key, wantAlias := range map[int16]bool{0: true, 1: false, 3: false, 11: true, 14: true, 18: false, 2: false} {
		if got := shapes[key].aliasesFrame; got != wantAlias {
			t.Errorf("%s: aliasesFrame %v, want %v", kmsg.NameForKey(key), got, wantAlias)
		}
	}
	// A flexible fetch with unknown tags at every level.
	f := kmsg.NewPtrFetchRequest()
	f.Version = 12
	f.UnknownTags.Set(99, []byte("top"))
	ft := kmsg.NewFetchRequestTopic()
	ft.UnknownTags.Set(98, []byte("topic"))
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.UnknownTags.Set(97, []byte("partition"))
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	req := &Request{Key: 1, Version: 12, Body: f}
	if !releaseBodyFromFrame(req) {
		t.Fatal("a fetch keeps its frame")
	}
	if f.UnknownTags.Len()+f.Topics[0].UnknownTags.Len()+f.Topics[0].Partitions[0].UnknownTags.Len() != 0 {
		t.Fatal("unknown tags, slices of the frame, were kept")
	}
}

// ignoringHandler answers after a fixed time whatever its context says (a
// handler stuck on a slow disk).
type ignoringHandler struct {
	stubHandler
	started chan struct{}
}

func (h *ignoringHandler) Handle(ctx context.Context, req *Request) Response {
	close(h.started)
	time.Sleep(3 * time.Second)
	return h.stubHandler.Handle(ctx, req)
}

// TestHostileShutdownBoundedByContext: a handler that ignores its context
// does not keep Shutdown past its deadline.
func TestHostileShutdownBoundedByContext(t *testing.T) {
	h := &ignoringHandler{started: make(chan struct{})}
	s, addr := startServer(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 1))
	<-h.started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown returned %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown with a 200ms deadline took %v", d)
	}
}

// flakyListener fails Accept with EMFILE a few times, as a process out of
// descriptors does, then accepts.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestHostileAcceptErrorsBackOff: running out of descriptors makes Serve
// back off and retry, not return.
func TestHostileAcceptErrorsBackOff(t *testing.T) {
	s := New(Config{Handler: &stubHandler{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &flakyListener{Listener: inner}
	l.failures.Store(5)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 7))
	if corr := readCorr(t, c); corr != 7 {
		t.Fatalf("correlation id %d", corr)
	}
	s.Shutdown(context.Background())
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
}

// TestGracefulShutdownUnderLoad: connections streaming requests while
// Shutdown starts still stop reading (the stop deadline is not overwritten
// by the reader's own deadlines), so a graceful Shutdown finishes quickly.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	for round := range 10 {
		s, addr := startServer(t, &stubHandler{})
		frame := frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 1)
		for range 8 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.Copy(io.Discard, c)
			go func() {
				for {
					if _, err := c.Write(frame); err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		err := s.Shutdown(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: graceful Shutdown under load: %v after %v", round, err, time.Since(start))
		}
	}
}
