// Package server runs Kafka-protocol connections (design D7): it accepts
// connections, reads size-prefixed request frames, decodes the request header
// and body with kmsg, hands requests to a Handler, and writes the responses
// back strictly in request order.
//
// Per connection there is one reader goroutine; the answers are written by
// the handlers' goroutines, in request order: the one whose answer is the
// oldest unwritten writes it and every later one already done (no writer
// goroutine to wake per answer). Requests are pipelined: the reader keeps
// reading while earlier requests are being handled, each in its own
// goroutine, up to MaxInFlight unanswered requests; then it stops reading
// until the answers are written. Requests whose
// key the Handler declares Ordered (Produce) start one after the other in
// arrival order, so an idempotent producer's pipelined batches reach the log
// in sequence order.
//
// A frame larger than MaxRequestBytes, an unknown API key, an unsupported
// version (except ApiVersions, answered per KIP-511) or a body that does not
// decode is logged with the client's address and closes that connection
// only.
//
// Everything a client can make the server hold is bounded (design D13):
//   - request bytes in memory: one budget for the whole server
//     (MaxRequestMemory), reserved for a frame's declared size before its
//     body is read and released when nothing refers to the frame; a reader
//     short of budget stops reading (backpressure). Bodies are read
//     incrementally, so a size announced and never sent costs nothing.
//   - connections: in total and per client IP (over the limit a
//     connection is accepted and closed at once, as Kafka does), idle
//     connections (IdleTimeout), a frame that started to arrive and stalls
//     (FrameReadTimeout), a response the client stops reading
//     (WriteTimeout, measured from the last progress);
//   - a connection that closes cancels its handlers' context at once.
//
// Accept errors that can pass (EMFILE, ENFILE, ...) are retried with
// exponential backoff, as net/http does; Serve returns only for a closed
// or broken listener, and closes it.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultMaxRequestBytes is Kafka's socket.request.max.bytes default.
const DefaultMaxRequestBytes = 100 << 20

// DefaultMaxInFlight bounds unanswered requests per connection.
const DefaultMaxInFlight = 16

// Defaults of the connection and memory limits (Config).
const (
	// DefaultMaxRequestMemory is the budget of request bytes held in memory
	// by all connections together (queued.max.request.bytes).
	DefaultMaxRequestMemory = 256 << 20
	// DefaultMaxConnections bounds open client connections.
	DefaultMaxConnections = 10_000
	// DefaultMaxConnectionsPerIP bounds open connections from one client IP.
	DefaultMaxConnectionsPerIP = 1_000
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultFrameReadTimeout bounds how long the rest of a frame may take
	// to arrive once its first byte did (and the budget for it was
	// reserved).
	DefaultFrameReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds how long a response write may go without
	// progress (a client that stops reading).
	DefaultWriteTimeout = 30 * time.Second
)

// Request is one decoded request.
type Request struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
	// Body is the decoded request. For an ApiVersions request of a version
	// above the handler's maximum it is left undecoded (defaults) so the
	// handler can answer per KIP-511.
	Body   kmsg.Request
	Remote net.Addr
	// ConnID identifies the connection within this server.
	ConnID uint64
	// Session is the connection's security state (listener, protocol,
	// principal), the same for every request of the connection.
	Session *Session
	// Size is the request's size in bytes (its frame without the size
	// prefix: Kafka's request.sizeInBytes, what producer quotas count).
	Size int32
	// Accounting is what the request quotas measure of the request's
	// handling (throttle.go); the handler side fills it.
	Accounting Accounting
	// RawSASL marks a bare SASL token read after a SaslHandshake v0 (no
	// request header; Key 36 and a SaslAuthenticate body made up by the
	// reader): its answer is written as a bare token, a Frame without a
	// response header (sasl.go).
	RawSASL bool

	// orderDone, for a request of an Ordered key, lets the next ordered
	// request of the connection start (see Sequenced).
	orderDone func()
	// mute starts the connection's throttle (MuteFor); nil without one.
	mute func(time.Duration)

	readAt time.Time // the frame was read (Config.OnResponse)

	frame    []byte // the request's frame, from the frame pool; nil once let go
	recycle  bool   // the handler keeps no reference to frame after Handle
	reserved int64  // bytes of the memory budget held for frame
	budget   *memoryBudget
}

// releaseFrame lets go of the request's frame: recycled if recycle says
// nothing refers to it, and its reservation returned to the budget either
// way (a frame the handler still refers to is the garbage collector's;
// handlers must not keep body bytes beyond Handle except by copying them).
// It is idempotent.
func (r *Request) releaseFrame() {
	if r.frame != nil && r.recycle {
		putFrame(r.frame)
	}
	r.frame = nil
	if r.reserved != 0 {
		r.budget.release(r.reserved)
		r.reserved = 0
	}
}

// RecycleFrame tells the server that once Handle returns, nothing refers to
// the request's frame any more (nor to byte slices of the decoded Body,
// which alias it), so its buffer can be reused for another request. Call it
// only when that is true: Produce, whose records have been written by the
// time Handle returns (acks=0 included). Bodies without byte fields need no
// call: the server lets go of their frames right after decoding.
func (r *Request) RecycleFrame() { r.recycle = r.frame != nil }

// Sequenced tells the server that the order-sensitive part of an Ordered
// request is done (for Produce: the batches are queued to the partition
// logs, which assign offsets in queue order), so the next ordered request of
// the connection may start while this one waits for its acknowledgements.
// Without a call the next request starts when Handle returns. Calling it
// more than once, or for a request that is not Ordered, does nothing.
func (r *Request) Sequenced() {
	if r.orderDone != nil {
		r.orderDone()
	}
}

// Response is a handler's answer.
type Response struct {
	// Body is encoded with kmsg at its Version.
	Body kmsg.Response
	// Frame, when Body is nil, is a response body encoded by the handler,
	// sent piece by piece (file pieces with sendfile).
	Frame *Frame
	// None means no response is sent (Produce with acks=0).
	None bool
	// Close closes the connection after the response (if any) is written.
	Close bool
	// ThrottleFor mutes the connection (throttle.go): the response is
	// written at once (KIP-219), and no further request of the connection
	// is started until ThrottleFor has passed since the handler returned.
	ThrottleFor time.Duration
	// Recycle, if set, is called once the response is written or dropped:
	// the handler may then reuse what Body refers to (a pool, so that a
	// request allocates nothing).
	Recycle Recycler
}

// Recycler takes back what a Response referred to (Response.Recycle).
type Recycler interface{ Recycle() }

// Frame is a hand-encoded response body: byte pieces and file ranges, in
// order. Release, if set, is called once the frame is written or dropped.
type Frame struct {
	Pieces  []Piece
	Release func()
}

// Piece is either bytes or a file range (File != nil).
type Piece struct {
	Bytes []byte
	File  io.ReaderAt
	Pos   int64
	Len   int64
}

// Len is the frame's length in bytes.
func (f *Frame) Len() int64 {
	var n int64
	for _, p := range f.Pieces {
		if p.File != nil {
			n += p.Len
		} else {
			n += int64(len(p.Bytes))
		}
	}
	return n
}

// Handler serves requests.
type Handler interface {
	// Versions returns the version range served for key; ok is false for
	// keys not served (the connection is closed).
	Versions(key int16) (minVersion, maxVersion int16, ok bool)
	// Ordered reports whether requests with key on one connection must be
	// started one after the other in arrival order: the next one starts
	// when the previous one returns or calls Request.Sequenced.
	Ordered(key int16) bool
	// Handle serves one request. ctx ends as soon as the connection closes
	// (the reader sees EOF or an error), is cut by a limit, or the server
	// shuts down; long waits (fetch, JoinGroup) must end with it.
	Handle(ctx context.Context, req *Request) Response
}

// Config configures a Server. Zero values mean the defaults.
type Config struct {
	Handler         Handler
	MaxRequestBytes int32 // default DefaultMaxRequestBytes
	MaxInFlight     int   // default DefaultMaxInFlight
	// MaxRequestMemory is the budget of request bytes in memory for all
	// connections together (default DefaultMaxRequestMemory); a frame
	// larger than the budget is refused like one above MaxRequestBytes.
	MaxRequestMemory int64
	// MaxConnections and MaxConnectionsPerIP bound open connections
	// (defaults DefaultMaxConnections, DefaultMaxConnectionsPerIP).
	MaxConnections      int
	MaxConnectionsPerIP int
	// IdleTimeout closes a connection with nothing in flight that has
	// neither sent a request nor been sent a response for that long
	// (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// FrameReadTimeout closes a connection whose frame, once started, has
	// not fully arrived within it (default DefaultFrameReadTimeout).
	FrameReadTimeout time.Duration
	// WriteTimeout closes a connection whose response write makes no
	// progress for that long (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	Logger       *slog.Logger
	// OnConnection is called with +1 when a connection opens and -1 when it
	// closes (metrics).
	OnConnection func(delta int)
	// OnConnectionRejected is called for a connection closed at once
	// because of a limit: "max_connections" or "max_connections_per_ip".
	OnConnectionRejected func(reason string)
	// OnRequest is called for every decoded request (metrics).
	OnRequest func(key int16)
	// OnResponse is called by a connection's writer for every response it
	// wrote (metrics): queued is the frame read → the handler's start
	// (waiting for the connection's previous ordered request, a throttle
	// and a goroutine), written the handler's answer → written to the
	// socket (the responses before it in request order, and the write).
	OnResponse func(key int16, queued, written time.Duration)
	// MaxSASLReceiveBytes bounds a frame on a SASL listener before the
	// connection has authenticated (Kafka's sasl.server.max.receive.size;
	// default DefaultMaxSASLReceiveBytes).
	MaxSASLReceiveBytes int32
}

// setDefaults gives every zero field its default.
func (cfg *Config) setDefaults() {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxRequestMemory <= 0 {
		cfg.MaxRequestMemory = DefaultMaxRequestMemory
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxConnectionsPerIP <= 0 {
		cfg.MaxConnectionsPerIP = DefaultMaxConnectionsPerIP
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.FrameReadTimeout <= 0 {
		cfg.FrameReadTimeout = DefaultFrameReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSASLReceiveBytes <= 0 {
		cfg.MaxSASLReceiveBytes = DefaultMaxSASLReceiveBytes
	}
}

// maxFrameBytes is the largest request frame a server with cfg accepts:
// MaxRequestBytes, or the memory budget if that is smaller.
func (cfg Config) maxFrameBytes() int64 {
	c := cfg
	c.setDefaults()
	return min(int64(c.MaxRequestBytes), c.MaxRequestMemory)
}

// Server serves Kafka-protocol connections.
type Server struct {
	cfg    Config
	log    *slog.Logger
	budget *memoryBudget

	// baseCtx is the parent of every connection context; cancelled at the
	// end of Shutdown so waiting handlers return.
	baseCtx    context.Context
	cancelBase context.CancelFunc

	acceptLog rateLimitedLog // accept failures
	rejectLog rateLimitedLog // connections over a limit
	frameLog  rateLimitedLog // bad, oversized or stalled frames, stuck writes
	tlsLog    rateLimitedLog // failed TLS handshakes

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perIP     map[string]int // open connections by client IP
	nextID    uint64
	closing   bool
	connsWG   sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("server: closed")

// New returns a server; cfg.Handler is required.
func New(cfg Config) *Server {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		budget:     newMemoryBudget(cfg.MaxRequestMemory),
		baseCtx:    ctx,
		cancelBase: cancel,
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*conn]struct{}),
		perIP:      make(map[string]int),
	}
}

// RequestMemoryInUse is how many bytes of the request memory budget are
// reserved now (a gauge).
func (s *Server) RequestMemoryInUse() int64 { return s.budget.inUse.Load() }

// RequestMemoryLimit is the request memory budget.
func (s *Server) RequestMemoryLimit() int64 { return s.budget.limit }

// Listener is what a listener's connections are: its name (Kafka's
// listener name, in every connection's Session), security protocol and,
// for SSL and SASL_SSL, the TLS configuration its handshakes use.
type Listener struct {
	Name     string
	Protocol SecurityProtocol
	TLS      *tls.Config
}

// PlaintextListener is the listener Serve serves: PLAINTEXT, named so.
var PlaintextListener = Listener{Name: Plaintext.String(), Protocol: Plaintext}

// Serve accepts connections on l as PlaintextListener (ServeListener).
func (s *Server) Serve(l net.Listener) error { return s.ServeListener(l, PlaintextListener) }

// ServeListener accepts connections on l until Shutdown, each with ln's
// name and protocol in its Session and, for a protocol over TLS, a TLS
// handshake run by the connection's own goroutine (never by the accept
// loop) within FrameReadTimeout. It always returns a non-nil error,
// ErrServerClosed after Shutdown, and l is closed when it returns. Accept
// errors that can pass (a shortage of file descriptors, a connection reset
// before it was accepted) are retried with exponential backoff from 5 ms
// to 1 s and logged at most once a second; any other error is returned.
func (s *Server) ServeListener(l net.Listener, ln Listener) error {
	defer l.Close()
	if ln.Protocol.TLS() != (ln.TLS != nil) {
		return fmt.Errorf("server: listener %s is %s: a TLS configuration is needed exactly for SSL and SASL_SSL", ln.Name, ln.Protocol)
	}
	if ln.Name == "" {
		ln.Name = ln.Protocol.String()
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if !retryableAcceptError(err) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.acceptLog.warn(s.log, "accept failed; retrying", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.baseCtx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		s.accept(nc, &ln)
	}
}

// retryableAcceptError reports whether an accept error can pass: timeouts,
// errors the runtime calls temporary, and running out of descriptors or
// kernel memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), which end when
// connections close.
func retryableAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var te interface{ Temporary() bool }
	return errors.As(err, &te) && te.Temporary()
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// accept starts serving nc, or closes it at once if a connection limit is
// reached.
func (s *Server) accept(nc net.Conn, ln *Listener) {
	ip := clientIP(nc.RemoteAddr())
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return
	}
	reason := ""
	switch {
	case len(s.conns) >= s.cfg.MaxConnections:
		reason = "max_connections"
	case s.perIP[ip] >= s.cfg.MaxConnectionsPerIP:
		reason = "max_connections_per_ip"
	}
	if reason != "" {
		open, openIP := len(s.conns), s.perIP[ip]
		s.mu.Unlock()
		// Counted before the close: a client that sees its connection
		// closed may read the count at once (TestHostileConnectionLimits
		// read 1 of 2 when the close came first).
		if s.cfg.OnConnectionRejected != nil {
			s.cfg.OnConnectionRejected(reason)
		}
		nc.Close()
		s.rejectLog.warn(s.log, "connection refused: limit reached", "client", nc.RemoteAddr().String(), "limit", reason,
			"open", open, "open_from_ip", openIP, "max_connections", s.cfg.MaxConnections, "max_connections_per_ip", s.cfg.MaxConnectionsPerIP)
		return
	}
	s.nextID++
	c := newConn(s, nc, s.nextID, ip, ln)
	s.conns[c] = struct{}{}
	s.perIP[ip]++
	s.connsWG.Add(1)
	s.mu.Unlock()
	if s.cfg.OnConnection != nil {
		s.cfg.OnConnection(+1)
	}
	go c.serve()
}

// clientIP is the key of the per-IP connection limit.
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.perIP[c.ip]--; s.perIP[c.ip] <= 0 {
		delete(s.perIP, c.ip)
	}
	s.mu.Unlock()
	if s.cfg.OnConnection != nil {
		s.cfg.OnConnection(-1)
	}
	s.connsWG.Done()
}

// Shutdown closes the listeners first, stops reading new requests, lets
// requests already read finish and their responses be written, then closes
// the connections. Waiting fetches are cut short. If ctx ends first, the
// connections are closed at once and ctx's error returned without waiting
// any longer (a handler that ignores its context may still be returning).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	// Long polls end now; their (possibly empty) answers are still written.
	s.cancelBase()

	done := make(chan struct{})
	go func() { s.connsWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.CloseConnections()
		return ctx.Err()
	}
}

// CloseConnections closes every client connection at once, dropping
// unanswered requests. Tests use it to simulate a network failure.
func (s *Server) CloseConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.abort()
	}
}
