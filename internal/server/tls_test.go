package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/vfs"
)

// sessionHandler is stubHandler recording the session of every request.
type sessionHandler struct {
	stubHandler
	sessions chan *Session
}

func (h *sessionHandler) Handle(ctx context.Context, req *Request) Response {
	select {
	case h.sessions <- req.Session:
	default:
	}
	return h.stubHandler.Handle(ctx, req)
}

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tlsFixture is a CA, a server certificate for 127.0.0.1 and a client
// certificate, written to files.
type tlsFixture struct {
	dir    string
	set    certs.Set
	files  TLSFiles
	caPool *x509.CertPool
}

func newTLSFixture(t *testing.T, auth ClientAuth) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	set, err := certs.CreateSet(dir, "example", []string{"127.0.0.1"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(set.CA.Cert)
	return &tlsFixture{dir: dir, set: set, caPool: pool, files: TLSFiles{
		CertFile: filepath.Join(dir, certs.ServerCertFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile),
		ClientCAFile: filepath.Join(dir, certs.CACertFile), ClientAuth: auth,
	}}
}

// clientConfig trusts the fixture's CA and presents client (if set).
func (f *tlsFixture) clientConfig(client *certs.Pair) *tls.Config {
	cfg := &tls.Config{RootCAs: f.caPool, ServerName: "127.0.0.1"}
	if client != nil {
		// Sent whatever CAs the server names (Go's client would
		// otherwise keep back a certificate of a CA the server does not
		// list, and the unknown-CA case would never reach the server).
		cert := &tls.Certificate{Certificate: [][]byte{client.Cert.Raw}, PrivateKey: client.Key}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// startTLSServer serves a PLAINTEXT and a TLS listener of protocol p on
// one server, logging into the returned buffer.
func startTLSServer(t *testing.T, h Handler, p SecurityProtocol, files TLSFiles, cfg Config) (plainAddr, tlsAddr string, logs *lockedBuffer) {
	t.Helper()
	logs = &lockedBuffer{}
	cfg.Handler = h
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s := New(cfg)
	tcfg, err := NewTLSConfig(files, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(pl)
	go s.ServeListener(tl, Listener{Name: "EXTERNAL", Protocol: p, TLS: tcfg})
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return pl.Addr().String(), tl.Addr().String(), logs
}

// roundTrip sends an ApiVersions request on c and reads its answer.
func roundTrip(t *testing.T, c net.Conn, corr int32) {
	t.Helper()
	if _, err := c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, corr)); err != nil {
		t.Fatal(err)
	}
	if got := readCorr(t, c); got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
}

// expectClosed fails unless the server closes c within 5 s.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe") ||
		strings.Contains(err.Error(), "tls:")
}

// TestTLSSessionAndCertificatePrincipal: an SSL listener's requests carry
// its name and protocol, the TLS state, and the client certificate's
// subject as principal (Kafka's default principal builder); the PLAINTEXT
// listener of the same server stays anonymous and PLAINTEXT; on SASL_SSL a
// client certificate does not make the principal (SASL does).
func TestTLSSessionAndCertificatePrincipal(t *testing.T) {
	for _, p := range []SecurityProtocol{SSL, SASLSSL} {
		t.Run(p.String(), func(t *testing.T) {
			fx := newTLSFixture(t, ClientAuthRequested)
			h := &sessionHandler{sessions: make(chan *Session, 1)}
			plainAddr, tlsAddr, _ := startTLSServer(t, h, p, fx.files, Config{})

			c, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(&fx.set.Client))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			roundTrip(t, c, 1)
			s := <-h.sessions
			if s.Listener != "EXTERNAL" || s.Protocol != p || s.TLS == nil || !s.TLS.HandshakeComplete {
				t.Fatalf("session %+v", s)
			}
			want := Anonymous
			if p == SSL {
				want = User("CN=alice,O=example")
			}
			if got := s.Principal(); got != want {
				t.Fatalf("principal %v, want %v", got, want)
			}

			pc, err := net.Dial("tcp", plainAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			roundTrip(t, pc, 2)
			s = <-h.sessions
			if s.Listener != "PLAINTEXT" || s.Protocol != Plaintext || s.TLS != nil || s.Principal() != Anonymous {
				t.Fatalf("plaintext session %+v, principal %v", s, s.Principal())
			}

			// Without a client certificate (requested, not required):
			// served, anonymous.
			nc, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			roundTrip(t, nc, 3)
			if s = <-h.sessions; s.Principal() != Anonymous {
				t.Fatalf("principal without a certificate %v", s.Principal())
			}
		})
	}
}

// TestTLSReloadsChangedFiles: a new certificate written over the files is
// served from the next handshake on, without a restart; a new pair that
// does not load is logged once and the previous one keeps serving.
func TestTLSReloadsChangedFiles(t *testing.T) {
	fx := newTLSFixture(t, ClientAuthNone)
	h := &stubHandler{}
	_, tlsAddr, logs := startTLSServer(t, h, SSL, fx.files, Config{})
	serial := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		roundTrip(t, c, 1)
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	if first != fx.set.Server.Cert.SerialNumber.String() {
		t.Fatal("not the certificate of the files")
	}
	renewed, err := certs.Issue(fx.set.CA, certs.Options{Subject: pkix.Name{CommonName: "renewed"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	replace := func(cert, key []byte) {
		t.Helper()
		// Written aside and renamed, as certificate tools do.
		for _, f := range []struct {
			name string
			data []byte
		}{{fx.files.CertFile, cert}, {fx.files.KeyFile, key}} {
			if err := os.WriteFile(f.name+".new", f.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f.name+".new", f.name); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace(renewed.CertPEM(), renewed.KeyPEM())
	if got := serial(); got != renewed.Cert.SerialNumber.String() {
		t.Fatalf("after the renewal the server presents serial %s, want the renewed %s", got, renewed.Cert.SerialNumber)
	}
	// A certificate without its key (a half-done renewal).
	other, _ := certs.Issue(fx.set.CA, certs.Options{Subject: pkix.Name{CommonName: "other"}, Hosts: []string{"127.0.0.1"}})
	replace(other.CertPEM(), renewed.KeyPEM())
	for range 3 {
		if got := serial(); got != renewed.Cert.SerialNumber.String() {
			t.Fatalf("a mismatched pair replaced the served certificate (serial %s)", got)
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("the bad pair was logged %d times, want once:\n%s", n, logs)
	}
}

// TestTLSHostileInput: each bad connection is closed, logged at most once,
// and the good connections opened before it keep working.
func TestTLSHostileInput(t *testing.T) {
	fx := newTLSFixture(t, ClientAuthRequired)
	h := &stubHandler{}
	plainAddr, tlsAddr, logs := startTLSServer(t, h, SSL, fx.files, Config{FrameReadTimeout: 300 * time.Millisecond})

	goodPlain, err := net.Dial("tcp", plainAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer goodPlain.Close()
	goodTLS, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(&fx.set.Client))
	if err != nil {
		t.Fatal(err)
	}
	defer goodTLS.Close()
	corr := int32(0)
	stillServed := func() {
		t.Helper()
		corr++
		roundTrip(t, goodPlain, corr)
		roundTrip(t, goodTLS, corr)
	}
	stillServed()
	// Handshake failures share one rate-limited log (once a second):
	// each case waits for the previous one's second to pass.
	nextLogSecond := func() { time.Sleep(logInterval + 50*time.Millisecond) }

	t.Run("TLS to a PLAINTEXT port", func(t *testing.T) {
		raw, err := net.Dial("tcp", plainAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		c := tls.Client(raw, fx.clientConfig(&fx.set.Client))
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.Handshake(); err == nil {
			t.Fatal("TLS handshake with a PLAINTEXT listener succeeded")
		}
		expectClosed(t, raw)
		waitLog(t, logs, "a TLS handshake on a listener without TLS")
		stillServed()
	})
	t.Run("plaintext Kafka to an SSL port", func(t *testing.T) {
		c, err := net.Dial("tcp", tlsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 9))
		expectClosed(t, c)
		waitLog(t, logs, "TLS handshake failed")
		stillServed()
	})
	t.Run("handshake never completes", func(t *testing.T) {
		nextLogSecond()
		c, err := net.Dial("tcp", tlsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		expectClosed(t, c) // sends nothing: the frame-read timeout closes it
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("closed after %s, the handshake deadline is 300ms", d)
		}
		waitLog(t, logs, "TLS handshake not done in time")
		stillServed()
	})
	t.Run("client certificate of an unknown CA", func(t *testing.T) {
		nextLogSecond()
		strangers, err := certs.NewSet("elsewhere", []string{"127.0.0.1"}, "mallory")
		if err != nil {
			t.Fatal(err)
		}
		refusedCertificate(t, tlsAddr, fx.clientConfig(&strangers.Client))
		waitLog(t, logs, "certificate signed by unknown authority")
		stillServed()
	})
	t.Run("no client certificate where one is required", func(t *testing.T) {
		nextLogSecond()
		refusedCertificate(t, tlsAddr, fx.clientConfig(nil))
		waitLog(t, logs, "didn't provide a certificate")
		stillServed()
	})
}

// refusedCertificate connects with cfg to a listener that refuses its
// client certificate and checks that the connection is closed. With TLS
// 1.3 the client's side of the handshake is done before the server
// verifies: the refusal arrives on the first read.
func refusedCertificate(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return // refused within the handshake (TLS 1.2)
	}
	defer c.Close()
	c.Write(frameOf(&kmsg.ApiVersionsRequest{Version: 0}, 9))
	expectClosed(t, c)
}

func waitLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q:\n%s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), want); n != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", want, n, logs)
	}
}

// TestServeListenerRefusesContradictions: a TLS protocol without a TLS
// configuration, or PLAINTEXT with one, is refused, not served half-way.
func TestServeListenerRefusesContradictions(t *testing.T) {
	s := New(Config{Handler: &stubHandler{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Shutdown(context.Background())
	for _, ln := range []Listener{{Name: "A", Protocol: SSL}, {Name: "B", Protocol: Plaintext, TLS: &tls.Config{}}} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ServeListener(l, ln); err == nil || err == ErrServerClosed {
			t.Fatalf("listener %+v served: %v", ln, err)
		}
	}
}

// TestWriteFrameCopying: a frame of byte pieces and file ranges written
// through the copying path (TLS) arrives byte for byte, in full buffers,
// and a range past the end of its file fails instead of spinning.
func TestWriteFrameCopying(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	content := make([]byte, 1<<20)
	for i := range content {
		content[i] = byte(i * 13 / 7)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	frame := &Frame{Pieces: []Piece{
		{Bytes: []byte("partition header")},
		{File: f, Pos: 3, Len: 200_000},
		{Bytes: bytes.Repeat([]byte{7}, 100_000)},
		{File: f, Pos: 500_000, Len: 70_000},
		{Bytes: []byte("tail")},
	}}
	var want bytes.Buffer
	want.WriteString("head")
	for _, p := range frame.Pieces {
		if p.File != nil {
			want.Write(content[p.Pos : p.Pos+p.Len])
		} else {
			want.Write(p.Bytes)
		}
	}
	a, b := net.Pipe()
	writes := &countingConn{Conn: a}
	errc := make(chan error, 1)
	go func() {
		errc <- writeFrame(progressWriter{nc: writes, copying: true, timeout: 5 * time.Second}, []byte("head"), frame)
		a.Close()
	}()
	got, _ := io.ReadAll(b)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("copied frame differs")
	}
	if full := (want.Len() + copyChunkBytes - 1) / copyChunkBytes; writes.n != full {
		t.Fatalf("%d writes for %d bytes, want %d full buffers", writes.n, want.Len(), full)
	}

	c, s := net.Pipe()
	go io.Copy(io.Discard, s)
	defer c.Close()
	short := &Frame{Pieces: []Piece{{File: f, Pos: int64(len(content)) - 10, Len: 100}}}
	if err := writeFrame(progressWriter{nc: c, copying: true}, nil, short); err == nil {
		t.Fatal("a range past the end of the file was sent")
	}
}

type countingConn struct {
	net.Conn
	n int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.n++
	return c.Conn.Write(p)
}

// BenchmarkTLSWriteFrame writes a fetch-like frame (a 1 MiB file range)
// over a loopback TLS connection through the copying write path (the
// client decrypts in the same process: profile it for the server's share).
func BenchmarkTLSWriteFrame(b *testing.B) {
	fx := newTLSFixture(&testing.T{}, ClientAuthNone)
	srvCfg, err := NewTLSConfig(fx.files, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	f, err := vfs.Default.Create(filepath.Join(b.TempDir(), "seg"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("0123456789abcdef"), 1<<16)); err != nil {
		b.Fatal(err)
	}
	frame := &Frame{Pieces: []Piece{{Bytes: make([]byte, 60)}, {File: f, Pos: 0, Len: 1 << 20}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := tls.Dial("tcp", l.Addr().String(), fx.clientConfig(nil))
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	raw, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	tc := tls.Server(raw, srvCfg)
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		b.Fatal(err)
	}
	w := progressWriter{nc: tc, copying: true, timeout: 10 * time.Second}
	b.SetBytes(frame.Len())
	b.ResetTimer()
	for range b.N {
		if err := writeFrame(w, nil, frame); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTLSHandshakeCountsTowardConnectionLimits: a connection that has not
// finished its handshake holds its connection slot (the handshake runs in
// the connection's goroutine, after accept counted it) until the
// handshake deadline frees it.
func TestTLSHandshakeCountsTowardConnectionLimits(t *testing.T) {
	fx := newTLSFixture(t, ClientAuthNone)
	_, tlsAddr, _ := startTLSServer(t, &stubHandler{}, SSL, fx.files, Config{MaxConnections: 1, FrameReadTimeout: 500 * time.Millisecond})
	stalled, err := net.Dial("tcp", tlsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	time.Sleep(100 * time.Millisecond) // accepted and counted
	c, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(nil))
	if err == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("a second connection was served beside a stalled handshake with MaxConnections 1")
	}
	expectClosed(t, stalled) // the handshake deadline
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := tls.Dial("tcp", tlsAddr, fx.clientConfig(nil))
		if err == nil {
			roundTrip(t, c, 1)
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
