// Package server runs Kafka-protocol connections (design D7): it accepts
// connections, reads size-prefixed request frames, decodes the request header
// and body with kmsg, hands requests to a Handler, and writes the responses
// back strictly in request order.
//
// Per connection there is one reader goroutine and one writer goroutine.
// Requests are pipelined: the reader keeps reading while earlier requests are
// being handled, each in its own goroutine, up to MaxInFlight unanswered
// requests; then it stops reading until the writer catches up. Requests whose
// key the Handler declares Ordered (Produce) start one after the other in
// arrival order, so an idempotent producer's pipelined batches reach the log
// in sequence order.
//
// A frame larger than MaxRequestBytes, an unknown API key, an unsupported
// version (except ApiVersions, answered per KIP-511) or a body that does not
// decode is logged with the client's address and closes that connection
// only.
package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultMaxRequestBytes is Kafka's socket.request.max.bytes default.
const DefaultMaxRequestBytes = 100 << 20

// DefaultMaxInFlight bounds unanswered requests per connection.
const DefaultMaxInFlight = 16

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

	// orderDone, for a request of an Ordered key, lets the next ordered
	// request of the connection start (see Sequenced).
	orderDone func()

	frame   []byte // the request's frame, from the frame pool
	recycle bool   // the handler keeps no reference to frame after Handle
}

// RecycleFrame tells the server that once Handle returns, nothing refers to
// the request's frame any more (nor to byte slices of the decoded Body,
// which alias it), so its buffer can be reused for another request. Call it
// only when that is true: Produce with acks != 0, whose records have been
// written by the time Handle returns.
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
}

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
	// Handle serves one request. ctx ends when the connection closes or the
	// server shuts down; long waits (fetch) must end with it.
	Handle(ctx context.Context, req *Request) Response
}

// Config configures a Server.
type Config struct {
	Handler         Handler
	MaxRequestBytes int32 // default DefaultMaxRequestBytes
	MaxInFlight     int   // default DefaultMaxInFlight
	Logger          *slog.Logger
	// OnConnection is called with +1 when a connection opens and -1 when it
	// closes (metrics).
	OnConnection func(delta int)
	// OnRequest is called for every decoded request (metrics).
	OnRequest func(key int16)
}

// Server serves Kafka-protocol connections.
type Server struct {
	cfg Config
	log *slog.Logger

	// baseCtx is the parent of every connection context; cancelled at the
	// end of Shutdown so waiting handlers return.
	baseCtx    context.Context
	cancelBase context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	nextID    uint64
	closing   bool
	connsWG   sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("server: closed")

// New returns a server; cfg.Handler is required.
func New(cfg Config) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		baseCtx:    ctx,
		cancelBase: cancel,
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*conn]struct{}),
	}
}

// Serve accepts connections on l until Shutdown; it always returns a non-nil
// error, ErrServerClosed after Shutdown.
func (s *Server) Serve(l net.Listener) error {
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
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.nextID++
		c := newConn(s, nc, s.nextID)
		s.conns[c] = struct{}{}
		s.connsWG.Add(1)
		s.mu.Unlock()
		if s.cfg.OnConnection != nil {
			s.cfg.OnConnection(+1)
		}
		go c.serve()
	}
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if s.cfg.OnConnection != nil {
		s.cfg.OnConnection(-1)
	}
	s.connsWG.Done()
}

// Shutdown stops accepting, stops reading new requests, lets requests
// already read finish and their responses be written, then closes the
// connections. Waiting fetches are cut short. If ctx ends first, the
// connections are closed at once and ctx's error returned.
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
		<-done
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
