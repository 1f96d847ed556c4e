package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

// stubHandler serves ApiVersions (18) and Metadata (3, ordered) with a
// configurable delay, recording the order handlers start in.
type stubHandler struct {
	delay func() time.Duration
	mu    sync.Mutex
	order []int32
}

func (h *stubHandler) Versions(key int16) (int16, int16, bool) {
	switch key {
	case 18:
		return 0, 3, true
	case 3:
		return 0, 12, true
	}
	return 0, 0, false
}
func (h *stubHandler) Ordered(key int16) bool { return key == 3 }
func (h *stubHandler) Handle(ctx context.Context, req *Request) Response {
	h.mu.Lock()
	h.order = append(h.order, req.CorrelationID)
	h.mu.Unlock()
	if h.delay != nil {
		time.Sleep(h.delay())
	}
	r := req.Body.ResponseKind()
	r.SetVersion(req.Version)
	return Response{Body: r}
}

func frameOf(req kmsg.Request, corr int32) []byte {
	buf := make([]byte, 4)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	buf = binary.BigEndian.AppendUint16(buf, 0xffff) // null client id
	if req.IsFlexible() {
		buf = append(buf, 0)
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

func startServer(t *testing.T, h Handler) (*Server, string) {
	t.Helper()
	s := New(Config{Handler: h, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxInFlight: 4})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, l.Addr().String()
}

func readCorr(t *testing.T, c net.Conn) int32 {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return int32(binary.BigEndian.Uint32(body))
}

// TestOrderAndBoundedInFlight: requests with random handling times are
// answered in request order, and ordered keys start in arrival order.
func TestOrderAndBoundedInFlight(t *testing.T) {
	h := &stubHandler{delay: func() time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond }}
	_, addr := startServer(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 40
	go func() {
		for i := range n {
			c.Write(frameOf(&kmsg.MetadataRequest{Version: 12}, int32(i)))
		}
	}()
	for i := range n {
		if corr := readCorr(t, c); corr != int32(i) {
			t.Fatalf("response %d has correlation id %d", i, corr)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, corr := range h.order {
		if corr != int32(i) {
			t.Fatalf("ordered requests started as %v", h.order)
		}
	}
}

// TestShutdownFinishesInFlight: a request being handled when Shutdown
// starts is still answered.
func TestShutdownFinishesInFlight(t *testing.T) {
	h := &stubHandler{delay: func() time.Duration { return 200 * time.Millisecond }}
	s, addr := startServer(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 42))
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if corr := readCorr(t, c); corr != 42 {
		t.Fatalf("correlation id %d", corr)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

// TestSendFileRange sends ranges of one file to many TCP connections at
// once (sendfile with explicit offsets) and through a non-TCP connection
// (pread + write fallback).
func TestSendFileRange(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	content := make([]byte, 3<<20)
	for i := range content {
		content[i] = byte(i * 7 / 5)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var wg sync.WaitGroup
	for i := range 6 {
		pos, n := int64(i*300_000+i), int64(1<<20+i*1000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			client, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer client.Close()
			got := make([]byte, n)
			if _, err := io.ReadFull(client, got); err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(got, content[pos:pos+n]) {
				t.Errorf("range %d+%d differs", pos, n)
			}
		}()
		server, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer server.Close()
			if err := sendFileRange(progressWriter{nc: server}, f, pos, n); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	a, b := net.Pipe()
	go func() {
		defer a.Close()
		if err := sendFileRange(progressWriter{nc: a}, f, 5, 100_000); err != nil {
			t.Error(err)
		}
	}()
	got, _ := io.ReadAll(b)
	if !bytes.Equal(got, content[5:100_005]) {
		t.Fatal("fallback copy differs")
	}
	// A range past the end of the file fails instead of spinning.
	c, s := net.Pipe()
	go io.Copy(io.Discard, s)
	if err := sendFileRange(progressWriter{nc: c}, f, int64(len(content))-10, 100); err == nil {
		t.Fatal("short file accepted")
	}
	c.Close()
}

// FuzzParseRequest: no input makes the header and body parser panic.
func FuzzParseRequest(f *testing.F) {
	f.Add(frameOf(&kmsg.MetadataRequest{Version: 12}, 1)[4:])
	f.Add(frameOf(&kmsg.ApiVersionsRequest{Version: 3}, 1)[4:])
	f.Add([]byte{0, 18, 0, 9, 0, 0, 0, 1, 0xff, 0xff})
	h := &stubHandler{}
	f.Fuzz(func(t *testing.T, frame []byte) {
		ParseRequest(frame, h)
	})
}

// sequencedHandler serves Metadata (ordered): each request calls Sequenced
// and then blocks until the next request has started, which deadlocks
// unless Sequenced really lets the next ordered request start.
type sequencedHandler struct {
	stubHandler
	started [3]chan struct{}
}

func (h *sequencedHandler) Handle(ctx context.Context, req *Request) Response {
	i := req.CorrelationID
	close(h.started[i])
	req.Sequenced()
	req.Sequenced() // idempotent
	if int(i)+1 < len(h.started) {
		select {
		case <-h.started[i+1]:
		case <-time.After(5 * time.Second):
			return Response{None: true, Close: true}
		}
	}
	r := req.Body.ResponseKind()
	r.SetVersion(req.Version)
	return Response{Body: r}
}

// TestSequencedStartsNextOrderedRequest: an ordered request that calls
// Sequenced lets the next ordered request start before it returns
// (pipelined produce), and responses still leave in request order.
func TestSequencedStartsNextOrderedRequest(t *testing.T) {
	h := &sequencedHandler{}
	for i := range h.started {
		h.started[i] = make(chan struct{})
	}
	_, addr := startServer(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range h.started {
		c.Write(frameOf(&kmsg.MetadataRequest{Version: 12}, int32(i)))
	}
	for i := range h.started {
		if corr := readCorr(t, c); corr != int32(i) {
			t.Fatalf("response %d has correlation id %d", i, corr)
		}
	}
}
