package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
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

// TestWriteFrameTCP: a frame of byte and file pieces written to a TCP
// connection (sendmsg with MSG_MORE before each file range, sendfile,
// writev) arrives byte for byte, with heads larger than the socket's
// buffers (partial sends, waits for the reader) and many small pieces.
func TestWriteFrameTCP(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	content := make([]byte, 4<<20)
	for i := range content {
		content[i] = byte(i * 13 / 7)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	var pieces []Piece
	for i := range 1500 { // more buffers than one sendmsg takes
		pieces = append(pieces, Piece{Bytes: []byte{byte(i), byte(i >> 8), 0xaa}})
	}
	pieces = append(pieces,
		Piece{File: f, Pos: 3, Len: 1_000_000},
		Piece{Bytes: bytes.Repeat([]byte{7}, 3<<20)},
		Piece{File: f, Pos: 2_000_000, Len: 700_000},
		Piece{Bytes: []byte("tail")})
	frame := &Frame{Pieces: pieces}
	head := bytes.Repeat([]byte("head"), 1<<19)
	want := bytes.Clone(head)
	for _, p := range frame.Pieces {
		if p.File != nil {
			want = append(want, content[p.Pos:p.Pos+p.Len]...)
		} else {
			want = append(want, p.Bytes...)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		time.Sleep(20 * time.Millisecond) // let the sender fill the socket first
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(progressWriter{nc: c, timeout: 10 * time.Second}, head, frame); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("received %d bytes, want the frame's %d (equal: %v)", len(b), len(want), bytes.Equal(b, want))
	}
}

// TestHandlersWriteTheirAnswers: a connection has no writer goroutine of
// its own (issue 12: waking one for every answer cost a wake-up per
// request); the handler goroutine whose answer is the oldest unwritten
// writes it, so a served, idle connection holds one goroutine, its reader.
func TestHandlersWriteTheirAnswers(t *testing.T) {
	_, addr := startServer(t, &stubHandler{})
	before := runtime.NumGoroutine()
	const conns = 8
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range 3 {
			if _, err := c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, int32(i))); err != nil {
				t.Fatal(err)
			}
			if corr := readCorr(t, c); corr != int32(i) {
				t.Fatalf("response %d has correlation id %d", i, corr)
			}
		}
	}
	// The handlers' goroutines end right after their answers are written.
	var held int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if held = runtime.NumGoroutine() - before; held <= conns {
			return
		}
	}
	t.Fatalf("%d served idle connections hold %d goroutines, want %d (a reader each)", conns, held, conns)
}
