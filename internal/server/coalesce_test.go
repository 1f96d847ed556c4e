package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// writeCountingListener counts the writes to the connections it accepts.
type writeCountingListener struct {
	net.Listener
	writes *atomic.Int32
}

func (l writeCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeCountingConn{Conn: c, writes: l.writes}, nil
}

type writeCountingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// lastFirstHandler answers ApiVersions; the first request's answer is done
// only after every other one's, so all of them are ready when the writer
// gets to the first.
type lastFirstHandler struct {
	others sync.WaitGroup
}

func (h *lastFirstHandler) Versions(key int16) (int16, int16, bool) { return 0, 3, key == 18 }
func (h *lastFirstHandler) Ordered(int16) bool                      { return false }
func (h *lastFirstHandler) Handle(ctx context.Context, req *Request) Response {
	if req.CorrelationID == 0 {
		h.others.Wait()
		time.Sleep(50 * time.Millisecond) // their slots marked done after Handle returns
	} else {
		defer h.others.Done()
	}
	r := req.Body.ResponseKind()
	r.SetVersion(req.Version)
	return Response{Body: r}
}

// TestReadyResponsesShareOneWrite: answers that are done when the writer
// gets to them leave in one write, in request order.
func TestReadyResponsesShareOneWrite(t *testing.T) {
	const n = 4 // startServer's MaxInFlight
	h := &lastFirstHandler{}
	h.others.Add(n - 1)
	var writes atomic.Int32
	s := New(Config{Handler: h, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxInFlight: n})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(writeCountingListener{Listener: l, writes: &writes})
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var frames []byte
	for i := range n {
		frames = append(frames, frameOf(&kmsg.ApiVersionsRequest{Version: 0}, int32(i))...)
	}
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if corr := readCorr(t, c); corr != int32(i) {
			t.Fatalf("response %d has correlation id %d", i, corr)
		}
	}
	if got := writes.Load(); got != 1 {
		t.Fatalf("%d answers done together took %d writes, want 1", n, got)
	}
}
