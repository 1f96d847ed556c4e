package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

// conn is one client connection: a reader goroutine (serve) and a writer
// goroutine (writeLoop), joined by the queue of pending responses.
type conn struct {
	s      *Server
	nc     net.Conn
	id     uint64
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// queue holds one slot per request read and not yet answered, in
	// request order; its capacity is the in-flight bound. Only the reader
	// sends on it and closes it; only the writer receives.
	queue chan *slot

	mu       sync.Mutex
	stopping bool // graceful: stop reading, finish what was read
	aborted  bool // close now
}

// slot is one request's place in the response order.
type slot struct {
	req  *Request
	done chan struct{} // closed when resp is set
	resp Response
}

func newConn(s *Server, nc net.Conn, id uint64) *conn {
	ctx, cancel := context.WithCancel(s.baseCtx)
	return &conn{
		s:      s,
		nc:     nc,
		id:     id,
		log:    s.log.With("client", nc.RemoteAddr().String()),
		ctx:    ctx,
		cancel: cancel,
		queue:  make(chan *slot, s.cfg.MaxInFlight),
	}
}

// stopReading makes the reader stop after the frame it is reading (used by
// graceful shutdown): responses to requests already read are still written.
func (c *conn) stopReading() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// abort closes the connection at once.
func (c *conn) abort() {
	c.mu.Lock()
	c.aborted = true
	c.mu.Unlock()
	c.cancel()
	c.nc.Close()
}

func (c *conn) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping || c.aborted
}

// serve is the reader goroutine.
func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	defer func() {
		close(c.queue)
		<-writerDone
		c.cancel()
		c.nc.Close()
		c.s.removeConn(c)
	}()

	var (
		sizeBuf     [4]byte
		lastOrdered chan struct{} // done channel of the previous ordered request
	)
	for {
		if _, err := io.ReadFull(c.nc, sizeBuf[:]); err != nil {
			if !c.isStopping() && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.log.Debug("connection read failed", "err", err)
			}
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		if size < 0 || size > c.s.cfg.MaxRequestBytes {
			c.log.Warn("closing connection: request frame too large", "size", size, "max_request_bytes", c.s.cfg.MaxRequestBytes)
			c.abort()
			return
		}
		frame := getFrame(int(size))
		if _, err := io.ReadFull(c.nc, frame); err != nil {
			if !c.isStopping() {
				c.log.Debug("connection closed mid-frame", "err", err)
			}
			return
		}
		req, err := ParseRequest(frame, c.s.cfg.Handler)
		if err != nil {
			c.log.Warn("closing connection: bad request", "err", err)
			c.abort()
			return
		}
		req.Remote = c.nc.RemoteAddr()
		req.frame = frame
		req.ConnID = c.id
		if c.s.cfg.OnRequest != nil {
			c.s.cfg.OnRequest(req.Key)
		}

		sl := &slot{req: req, done: make(chan struct{})}
		select {
		case c.queue <- sl: // blocks while MaxInFlight responses are pending
		case <-c.ctx.Done():
			return
		}
		var prev, mine chan struct{}
		if c.s.cfg.Handler.Ordered(req.Key) {
			prev, mine = lastOrdered, make(chan struct{})
			lastOrdered = mine
		}
		go c.handle(sl, prev, mine)
	}
}

func (c *conn) handle(sl *slot, prev, mine chan struct{}) {
	if prev != nil {
		<-prev
	}
	if mine != nil {
		var once sync.Once
		sl.req.orderDone = func() { once.Do(func() { close(mine) }) }
	}
	defer func() {
		sl.req.Sequenced()
		close(sl.done)
	}()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panicked; closing connection", "key", kmsg.NameForKey(sl.req.Key), "version", sl.req.Version, "panic", fmt.Sprint(r))
			sl.resp = Response{None: true, Close: true}
		}
	}()
	sl.resp = c.s.cfg.Handler.Handle(c.ctx, sl.req)
	if sl.req.recycle {
		putFrame(sl.req.frame)
		sl.req.frame = nil
	}
}

// writeLoop is the writer goroutine: it writes responses in request order.
func (c *conn) writeLoop() {
	failed := false
	var hdr []byte
	for sl := range c.queue {
		<-sl.done
		r := sl.resp
		if !failed && !r.None {
			var err error
			hdr, err = c.write(hdr[:0], sl.req, r)
			if err != nil {
				if !c.isStopping() {
					c.log.Debug("connection write failed", "err", err)
				}
				failed = true
				c.abort()
			}
		}
		if r.Frame != nil && r.Frame.Release != nil {
			r.Frame.Release()
		}
		if r.Close && !failed {
			failed = true
			c.abort()
		}
	}
}

// responseHeaderFlexible reports whether the response header is v1 (with a
// tag buffer): flexible responses, except ApiVersions which always uses
// header v0 so clients can read it before knowing our versions.
func responseHeaderFlexible(req *Request) bool {
	if req.Key == 18 {
		return false
	}
	return req.Body.IsFlexible()
}

func (c *conn) write(buf []byte, req *Request, r Response) ([]byte, error) {
	buf = append(buf, 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(req.CorrelationID))
	if responseHeaderFlexible(req) {
		buf = append(buf, 0) // no tagged fields
	}
	if r.Body != nil {
		buf = r.Body.AppendTo(buf)
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		_, err := c.nc.Write(buf)
		return buf, err
	}
	if r.Frame == nil {
		return buf, nil
	}
	binary.BigEndian.PutUint32(buf, uint32(int64(len(buf)-4)+r.Frame.Len()))
	return buf, writeFrame(c.nc, buf, r.Frame)
}

// writeFrame writes head then the frame's pieces: runs of byte pieces with
// one writev, file pieces with sendfile when both ends allow it.
func writeFrame(nc net.Conn, head []byte, f *Frame) error {
	bufs := net.Buffers{head}
	for _, p := range f.Pieces {
		if p.File == nil {
			if len(p.Bytes) > 0 {
				bufs = append(bufs, p.Bytes)
			}
			continue
		}
		if len(bufs) > 0 {
			if _, err := bufs.WriteTo(nc); err != nil {
				return err
			}
			bufs = bufs[:0]
		}
		if err := sendFileRange(nc, p.File, p.Pos, p.Len); err != nil {
			return err
		}
	}
	if len(bufs) > 0 {
		_, err := bufs.WriteTo(nc)
		return err
	}
	return nil
}

// sendFileRange sends n bytes of f from pos. On a TCP connection and an OS
// file it uses sendfile(2) with an explicit offset (never the shared file
// position: many connections read the same segment); otherwise it copies
// with pread and write.
func sendFileRange(nc net.Conn, f io.ReaderAt, pos, n int64) error {
	if n <= 0 {
		return nil
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		if of, ok := f.(vfs.OSFile); ok {
			return sendfile(tc, of.OS(), pos, n)
		}
	}
	return copyRange(nc, f, pos, n)
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func copyRange(w io.Writer, f io.ReaderAt, pos, n int64) error {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		m, err := f.ReadAt(chunk, pos)
		if m < len(chunk) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("reading segment: %w", err)
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		pos += int64(m)
		n -= int64(m)
	}
	return nil
}

func sendfile(tc *net.TCPConn, f *os.File, pos, n int64) error {
	sc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	fc, err := f.SyscallConn()
	if err != nil {
		return copyRange(tc, f, pos, n)
	}
	var sendErr error
	ctlErr := fc.Control(func(filefd uintptr) {
		for n > 0 && sendErr == nil {
			werr := sc.Write(func(sockfd uintptr) bool {
				for n > 0 {
					off := pos
					m, err := unix.Sendfile(int(sockfd), int(filefd), &off, int(min(n, 1<<30)))
					if m > 0 {
						pos += int64(m)
						n -= int64(m)
					}
					switch {
					case err == unix.EAGAIN:
						return false // wait until writable
					case err == unix.EINTR:
						continue
					case err != nil:
						sendErr = os.NewSyscallError("sendfile", err)
						return true
					case m == 0:
						// The file is shorter than the range: a segment
						// truncated under us. Never spin.
						sendErr = fmt.Errorf("sendfile: %w", io.ErrUnexpectedEOF)
						return true
					}
				}
				return true
			})
			if werr != nil && sendErr == nil {
				sendErr = werr
			}
		}
	})
	if ctlErr != nil {
		return ctlErr
	}
	return sendErr
}

// ParseRequest decodes a request frame (without its size prefix): the
// header (v1, or v2 for flexible versions) and the body. The frame must be
// exactly consumed by the header and body.
func ParseRequest(frame []byte, h Handler) (*Request, error) {
	b := kbin.Reader{Src: frame}
	key := b.Int16()
	version := b.Int16()
	corr := b.Int32()
	clientID := b.NullableString()
	if !b.Ok() {
		return nil, errors.New("truncated request header")
	}
	req := &Request{Key: key, Version: version, CorrelationID: corr}
	if clientID != nil {
		req.ClientID = *clientID
	}
	minV, maxV, ok := h.Versions(key)
	body := kmsg.RequestForKey(key)
	if !ok || body == nil {
		return nil, fmt.Errorf("unknown or unserved api key %d (correlation id %d, client id %q)", key, corr, req.ClientID)
	}
	body.SetVersion(version)
	req.Body = body
	if key == 18 && version > maxV {
		// KIP-511: a newer client's ApiVersions body may not parse; the
		// handler answers with our versions at v0.
		return req, nil
	}
	if version < minV || version > maxV {
		return nil, fmt.Errorf("%s version %d not served (we serve %d..%d)", kmsg.NameForKey(key), version, minV, maxV)
	}
	if body.IsFlexible() {
		skipTags(&b)
		if !b.Ok() {
			return nil, errors.New("truncated request header tags")
		}
	}
	if err := body.ReadFrom(b.Src); err != nil {
		return nil, fmt.Errorf("decoding %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	return req, nil
}

func skipTags(b *kbin.Reader) {
	for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
		b.Uvarint()
		size := b.Uvarint()
		b.Span(int(size))
	}
}
