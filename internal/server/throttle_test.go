package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// throttlingHandler answers ApiVersions and throttles the connection for
// throttle after the request with correlation id 0, recording when each
// request's handler started and its Size.
type throttlingHandler struct {
	throttle time.Duration
	mu       sync.Mutex
	started  map[int32]time.Time
	sizes    map[int32]int32
}

func newThrottlingHandler(throttle time.Duration) *throttlingHandler {
	return &throttlingHandler{throttle: throttle, started: map[int32]time.Time{}, sizes: map[int32]int32{}}
}

// dialServer starts a server with h and returns its address and a
// connection to it, closed at the end of the test.
func dialServer(t *testing.T, h Handler) (string, net.Conn) {
	t.Helper()
	_, addr := startServer(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr, c
}

func (h *throttlingHandler) Versions(key int16) (int16, int16, bool) { return 0, 3, key == 18 }
func (h *throttlingHandler) Ordered(int16) bool                      { return false }
func (h *throttlingHandler) Handle(_ context.Context, req *Request) Response {
	h.mu.Lock()
	h.started[req.CorrelationID] = time.Now()
	h.sizes[req.CorrelationID] = req.Size
	h.mu.Unlock()
	r := req.Body.ResponseKind()
	r.SetVersion(req.Version)
	resp := Response{Body: r}
	if req.CorrelationID == 0 {
		resp.ThrottleFor = h.throttle
	}
	return resp
}

// TestThrottleMutesConnection: a response with ThrottleFor is written at
// once, the connection's next request is not started until the throttle
// has passed, and other connections are not slowed. (A request the reader
// had already started, pipelined before the throttle, is not recalled.)
func TestThrottleMutesConnection(t *testing.T) {
	h := newThrottlingHandler(400 * time.Millisecond)
	addr, c := dialServer(t, h)
	req := &kmsg.ApiVersionsRequest{Version: 0}
	first := frameOf(req, 0)
	sent := time.Now()
	c.Write(first)
	readCorr(t, c)
	c.Write(frameOf(req, 1))
	if took := time.Since(sent); took > 200*time.Millisecond {
		t.Fatalf("the throttled response took %v: it must be written at once", took)
	}
	// Another connection is served meanwhile.
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherSent := time.Now()
	other.Write(frameOf(req, 5))
	readCorr(t, other)
	if took := time.Since(otherSent); took > 200*time.Millisecond {
		t.Fatalf("another connection waited %v", took)
	}
	if corr := readCorr(t, c); corr != 1 {
		t.Fatalf("second response %d", corr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if gap := h.started[1].Sub(h.started[0]); gap < 400*time.Millisecond {
		t.Fatalf("the next request started %v after the throttled one, want ≥ 400ms", gap)
	}
	if want := int32(len(first) - 4); h.sizes[0] != want {
		t.Fatalf("Request.Size %d, want the frame's %d", h.sizes[0], want)
	}
}

// orderedMuter is an Ordered handler that, like Produce, knows its
// throttle early: request 0 mutes the connection (MuteFor), then lets the
// next ordered request start (Sequenced).
type orderedMuter struct {
	throttlingHandler
}

func (h *orderedMuter) Ordered(int16) bool { return true }
func (h *orderedMuter) Handle(_ context.Context, req *Request) Response {
	h.mu.Lock()
	h.started[req.CorrelationID] = time.Now()
	h.mu.Unlock()
	if req.CorrelationID == 0 {
		req.MuteFor(h.throttle)
	}
	req.Sequenced()
	r := req.Body.ResponseKind()
	r.SetVersion(req.Version)
	return Response{Body: r}
}

// TestThrottlePipelined: a request pipelined behind one that mutes the
// connection (already read when the throttle began) does not start until
// the throttle has passed, as in Kafka, which handles one request of a
// connection at a time.
func TestThrottlePipelined(t *testing.T) {
	h := &orderedMuter{*newThrottlingHandler(400 * time.Millisecond)}
	_, c := dialServer(t, h)
	req := &kmsg.ApiVersionsRequest{Version: 0}
	c.Write(append(frameOf(req, 0), frameOf(req, 1)...))
	readCorr(t, c)
	readCorr(t, c)
	h.mu.Lock()
	defer h.mu.Unlock()
	if gap := h.started[1].Sub(h.started[0]); gap < 400*time.Millisecond {
		t.Fatalf("the pipelined request started %v after the one that muted the connection, want ≥ 400ms", gap)
	}
}
