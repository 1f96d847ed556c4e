package api

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/vfs"
)

// testBroker is the broker's protocol stack (the server over this package's
// Handler, as broker.New assembles them) serving on 127.0.0.1:0, with its
// data in t.TempDir(). cfg may set any Handler option (limits under test);
// FS, DataDir, Catalog and Logger are filled in.
type testBroker struct {
	*Handler
	addr string
}

func startTestBroker(t testing.TB, cfg Config) *testBroker {
	t.Helper()
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Defaults.SegmentBytes == 0 { // not set by the test: Kafka's
		cfg.Defaults = KafkaDefaults()
	}
	cfg.DataDir = t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	catalog, err := meta.Open(cfg.FS, filepath.Join(cfg.DataDir, "meta"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = catalog
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Handler: h, Logger: cfg.Logger})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	h.SetAdvertised(Endpoint{Listener: "PLAINTEXT", Host: addr.IP.String(), Port: int32(addr.Port)})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("handler close: %v", err)
		}
	})
	return &testBroker{Handler: h, addr: l.Addr().String()}
}

// createTopic creates topic with n partitions (no request involved).
func (tb *testBroker) createTopic(t testing.TB, name string, n int32) *topic {
	t.Helper()
	tb.adminMu.Lock()
	defer tb.adminMu.Unlock()
	tp, err := tb.createTopicLocked(name, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// rawConn is a hand-driven Kafka connection: the requests a careless or
// hostile client sends, which no well-behaved client library would.
type rawConn struct {
	t    testing.TB
	nc   net.Conn
	corr int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// encodeRequest frames req with a request header (v1, or v2 for flexible
// versions) and correlation ID corr.
func encodeRequest(req kmsg.Request, corr int32) []byte {
	buf := make([]byte, 4, 64)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	buf = kbin.AppendNullableString(buf, ptr("hostile"))
	if req.IsFlexible() {
		buf = append(buf, 0) // header tags
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

func ptr[T any](v T) *T { return &v }

// send writes req and returns its correlation ID.
func (c *rawConn) send(req kmsg.Request) int32 {
	c.t.Helper()
	c.corr++
	c.sendFrame(encodeRequest(req, c.corr))
	return c.corr
}

func (c *rawConn) sendFrame(frame []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.nc.Write(frame); err != nil {
		c.t.Fatal(err)
	}
}

// readFrame returns the next response frame: its correlation ID and the
// bytes after it (the header tags of flexible responses included).
func (c *rawConn) readFrame(timeout time.Duration) (int32, []byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return 0, nil, err
	}
	if len(body) < 4 {
		return 0, nil, errors.New("response shorter than its header")
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// roundTrip sends req and decodes its response (of the request's version).
func (c *rawConn) roundTrip(req kmsg.Request, timeout time.Duration) (kmsg.Response, error) {
	c.t.Helper()
	corr := c.send(req)
	got, body, err := c.readFrame(timeout)
	if err != nil {
		return nil, err
	}
	if got != corr {
		c.t.Fatalf("%s: correlation id %d, want %d", kmsg.NameForKey(req.Key()), got, corr)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != 18 { // ApiVersions keeps header v0
		b := kbin.Reader{Src: body}
		for n := b.Uvarint(); n > 0; n-- {
			b.Uvarint()
			b.Span(int(b.Uvarint()))
		}
		if !b.Ok() {
			return nil, errors.New("truncated response header tags")
		}
		body = b.Src
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, err
	}
	return resp, nil
}

// expectClosed checks that the broker closes the connection (and sends
// nothing before closing it).
func (c *rawConn) expectClosed(what string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := c.nc.Read(b[:])
	var ne net.Error
	switch {
	case err == nil:
		c.t.Errorf("%s: the broker answered instead of closing the connection", what)
	case errors.As(err, &ne) && ne.Timeout():
		c.t.Errorf("%s: connection not closed within 5s", what)
	}
}
