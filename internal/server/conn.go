package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

// conn is one client connection: a reader goroutine (serve) and the
// handler goroutines of its requests, which write the answers in request
// order: the one that finds the oldest unwritten answer done writes it and
// every later one already done (complete), so an answer costs no wake-up
// of a writer goroutine.
type conn struct {
	s *Server
	// nc is the connection requests are read from and responses written
	// to: raw itself, or on a TLS listener a *tls.Conn over raw (its
	// handshake run by serve).
	nc  net.Conn
	raw net.Conn
	id  uint64
	ip  string // key of the per-IP limit
	log *slog.Logger
	// session is the connection's security state (Request.Session).
	session *Session

	// ctx is the handlers' context: it ends when the connection is aborted,
	// when the reader sees the client go (EOF, a read error, a limit), or
	// when the server shuts down.
	ctx    context.Context
	cancel context.CancelFunc
	// readCtx, a child of ctx, also ends when the reader is told to stop
	// (graceful shutdown): it bounds the reader's own waits (budget, queue).
	readCtx  context.Context
	stopRead context.CancelFunc

	// inFlightSlots holds a token per request read and not yet written
	// (or dropped): its capacity is the in-flight bound. The reader sends
	// before it queues a slot; the writer of the slot receives.
	inFlightSlots chan struct{}

	// wmu guards pending, writing, readerDone and drainedClosed.
	wmu sync.Mutex
	// pending are the slots read and not yet written, in request order:
	// the reader appends, the writer takes from the front.
	pending []*slot
	// writing is set while a goroutine is the connection's writer: it
	// alone writes to the socket and owns writeBuf and writeFailed.
	writing bool
	// readerDone is set when the reader has ended: drained is closed once
	// nothing is pending and nobody is writing.
	readerDone, drainedClosed bool
	drained                   chan struct{}
	writeBuf                  []byte
	writeFailed               bool // a write failed or an answer closed the connection: nothing more is written

	// inFlight counts requests read and not yet answered (or dropped) by
	// the writer, and lastWriteNanos is when the writer last finished a
	// response (UnixNano): the reader reads both to tell an idle
	// connection.
	inFlight       atomic.Int32
	lastWriteNanos atomic.Int64
	// mutedUntilNanos is when the connection's throttle ends (UnixNano; 0:
	// none): set by handlers' responses, waited out by the reader.
	mutedUntilNanos atomic.Int64

	mu       sync.Mutex
	stopping bool // graceful: stop reading, finish what was read
	aborted  bool // close now
}

// slot is one request's place in the response order.
type slot struct {
	req  *Request
	done chan struct{} // closed when resp is set
	resp Response
	// finished is set (under conn.wmu) once resp is: the slot may be
	// written.
	finished bool

	started, answered time.Time // the handler's start and return (Config.OnResponse)
}

func newConn(s *Server, nc net.Conn, id uint64, ip string, ln *Listener) *conn {
	ctx, cancel := context.WithCancel(s.baseCtx)
	readCtx, stopRead := context.WithCancel(ctx)
	c := &conn{
		s:             s,
		nc:            nc,
		raw:           nc,
		id:            id,
		ip:            ip,
		log:           s.log.With("client", nc.RemoteAddr().String()),
		ctx:           ctx,
		cancel:        cancel,
		readCtx:       readCtx,
		stopRead:      stopRead,
		inFlightSlots: make(chan struct{}, s.cfg.MaxInFlight),
		pending:       make([]*slot, 0, s.cfg.MaxInFlight),
		drained:       make(chan struct{}),
		session:       NewSession(ln.Name, ln.Protocol, nc.LocalAddr()),
	}
	if ln.TLS != nil {
		c.nc = tls.Server(nc, ln.TLS)
	}
	c.lastWriteNanos.Store(time.Now().UnixNano())
	return c
}

// stopReading makes the reader stop after the frame it is reading (used by
// graceful shutdown): responses to requests already read are still written.
func (c *conn) stopReading() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.stopRead()
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// abort closes the connection at once (the socket itself: a TLS
// close_notify could wait on a client that does not read).
func (c *conn) abort() {
	c.mu.Lock()
	c.aborted = true
	c.mu.Unlock()
	c.cancel()
	c.raw.Close()
}

// setReadDeadline sets the read deadline unless the reader was told to stop,
// whose deadline in the past must not be overwritten (stopReading cancels
// readCtx before setting it, so checking after setting ours is enough).
func (c *conn) setReadDeadline(t time.Time) {
	c.nc.SetReadDeadline(t)
	if c.readCtx.Err() != nil {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

func (c *conn) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping || c.aborted
}

// errIdle and errFrameTimeout are the reader's own reasons to close.
var (
	errIdle         = errors.New("connection idle")
	errFrameTimeout = errors.New("frame did not arrive in time")
)

// serve is the reader goroutine.
func (c *conn) serve() {
	defer func() {
		c.wmu.Lock()
		c.readerDone = true
		c.closeDrainedLocked()
		c.wmu.Unlock()
		<-c.drained // every answer read written or dropped
		c.cancel()
		c.nc.Close()
		c.s.removeConn(c)
	}()

	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	var (
		sizeBuf     [4]byte
		lastOrdered chan struct{} // done channel of the previous ordered request
	)
	maxFrame := c.s.cfg.maxFrameBytes()
	for c.readCtx.Err() == nil { // until told to stop (or aborted)
		size, err := c.readSize(&sizeBuf)
		if err != nil {
			c.readFailed(err, "connection read failed")
			return
		}
		if size < 0 || int64(size) > maxFrame {
			if looksLikeTLS(sizeBuf) {
				c.s.frameLog.warn(c.log, "closing connection: a TLS handshake on a listener without TLS (is the client set to security.protocol SSL or SASL_SSL for a PLAINTEXT port?)",
					"listener", c.session.Listener, "protocol", c.session.Protocol.String())
				c.abort()
				return
			}
			c.s.frameLog.warn(c.log, "closing connection: request frame too large", "size", size,
				"max_request_bytes", c.s.cfg.MaxRequestBytes, "max_request_memory", c.s.cfg.MaxRequestMemory)
			c.abort()
			return
		}
		if int64(size) > c.session.saslFrameLimit(maxFrame, c.s.cfg.MaxSASLReceiveBytes) {
			c.s.frameLog.warn(c.log, "closing connection: frame before SASL authentication larger than sasl.server.max.receive.size",
				"size", size, "max_sasl_receive_bytes", c.s.cfg.MaxSASLReceiveBytes)
			c.abort()
			return
		}
		// Reserve before reading: while the budget is short this
		// connection reads nothing more (backpressure), and the frame
		// deadline starts only once we are ready to read.
		if err := c.s.budget.acquire(c.readCtx, int64(size)); err != nil {
			return
		}
		reserved := int64(size)
		c.setReadDeadline(time.Now().Add(c.s.cfg.FrameReadTimeout))
		frame, err := readFrame(c.nc, int(size))
		readAt := time.Now()
		if err != nil {
			c.s.budget.release(reserved)
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.isStopping() {
				err = errFrameTimeout
			}
			c.readFailed(err, "connection closed mid-frame")
			return
		}
		var req *Request
		if c.session.sasl.rawTokens.Load() {
			req = rawSASLRequest(frame) // after SaslHandshake v0 (sasl.go)
		} else {
			req, err = ParseRequest(frame, c.s.cfg.Handler)
		}
		if err != nil {
			putFrame(frame)
			c.s.budget.release(reserved)
			c.s.frameLog.warn(c.log, "closing connection: bad request", "err", err)
			c.abort()
			return
		}
		if why := c.session.saslRefusal(req.Key, time.Now()); why != "" {
			putFrame(frame)
			c.s.budget.release(reserved)
			c.s.frameLog.warn(c.log, "closing connection: "+why, "key", kmsg.NameForKey(req.Key), "listener", c.session.Listener)
			c.abort()
			return
		}
		req.Remote, req.readAt = c.nc.RemoteAddr(), readAt
		req.frame, req.reserved, req.budget = frame, reserved, c.s.budget
		req.ConnID = c.id
		req.Session = c.session
		req.Size, req.mute = size, c.mute
		if releaseBodyFromFrame(req) {
			// Nothing refers to the frame any more: a request that waits
			// (long-poll fetch) holds no request bytes while it waits.
			req.recycle = true
			req.releaseFrame()
		}
		if c.s.cfg.OnRequest != nil {
			c.s.cfg.OnRequest(req.Key)
		}

		if !c.waitMuted(c.readCtx) { // a throttled connection reads nothing until its time is up
			req.releaseFrame()
			return
		}
		sl := &slot{req: req, done: make(chan struct{})}
		c.inFlight.Add(1)
		select {
		case c.inFlightSlots <- struct{}{}: // blocks while MaxInFlight responses are pending
		case <-c.readCtx.Done():
			c.inFlight.Add(-1)
			req.releaseFrame()
			return
		}
		c.wmu.Lock()
		c.pending = append(c.pending, sl)
		c.wmu.Unlock()
		var prev, mine chan struct{}
		if c.s.cfg.Handler.Ordered(req.Key) {
			prev, mine = lastOrdered, make(chan struct{})
			lastOrdered = mine
		}
		go c.handle(sl, prev, mine)
		if c.session.saslSerial(req.Key) {
			// Its outcome decides how the next frame is read (sasl.go).
			select {
			case <-sl.done:
			case <-c.readCtx.Done():
				return
			}
		}
	}
}

// readFailed ends the reader after err. Unless the server told it to stop
// (graceful shutdown), the client is gone or cut off: the handlers'
// context ends at once so long waits (fetch, JoinGroup) do not outlive the
// connection.
func (c *conn) readFailed(err error, what string) {
	if c.isStopping() {
		return
	}
	c.cancel()
	switch {
	case errors.Is(err, errIdle):
		c.log.Debug("closing idle connection", "idle_timeout", c.s.cfg.IdleTimeout)
	case errors.Is(err, errFrameTimeout):
		c.s.frameLog.warn(c.log, "closing connection: request frame stalled", "frame_read_timeout", c.s.cfg.FrameReadTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	default:
		c.log.Debug(what, "err", err)
	}
}

// readSize reads the next frame's size prefix. Waiting for its first byte
// the connection may be idle: with nothing in flight and no response
// written for IdleTimeout it is closed (errIdle). Once the first byte has
// arrived, the rest must come within FrameReadTimeout (errFrameTimeout).
func (c *conn) readSize(buf *[4]byte) (int32, error) {
	idle := c.s.cfg.IdleTimeout
	c.setReadDeadline(time.Now().Add(idle))
	n := 0
	for n == 0 {
		m, err := c.nc.Read(buf[:])
		n += m
		if err == nil || n > 0 {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || c.isStopping() {
			return 0, err
		}
		// Not idle while requests are in flight (a long poll) or since the
		// last response.
		now := time.Now()
		if c.inFlight.Load() > 0 {
			c.setReadDeadline(now.Add(idle))
			continue
		}
		if last := time.Unix(0, c.lastWriteNanos.Load()); now.Sub(last) < idle {
			c.setReadDeadline(last.Add(idle))
			continue
		}
		return 0, errIdle
	}
	if n < len(buf) {
		c.setReadDeadline(time.Now().Add(c.s.cfg.FrameReadTimeout))
		if _, err := io.ReadFull(c.nc, buf[n:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.isStopping() {
				err = errFrameTimeout
			}
			return 0, err
		}
	}
	return int32(binary.BigEndian.Uint32(buf[:])), nil
}

func (c *conn) handle(sl *slot, prev, mine chan struct{}) {
	if prev != nil {
		<-prev
	}
	c.waitMuted(c.ctx) // a request read before its connection's throttle began (throttle.go)
	if mine != nil {
		var once sync.Once
		sl.req.orderDone = func() { once.Do(func() { close(mine) }) }
	}
	defer c.complete(sl) // last: the answer is set, the frame released
	defer func() {
		sl.req.Sequenced()
		close(sl.done)
	}()
	// Runs before the slot is marked done, panic or not.
	defer sl.req.releaseFrame()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panicked; closing connection", "key", kmsg.NameForKey(sl.req.Key), "version", sl.req.Version, "panic", fmt.Sprint(r))
			sl.resp = Response{None: true, Close: true}
			sl.req.recycle = false // the handler may have left references
		}
	}()
	sl.started = time.Now()
	sl.resp = c.s.cfg.Handler.Handle(c.ctx, sl.req)
	sl.answered = time.Now()
	c.mute(sl.resp.ThrottleFor)
}

// complete marks sl's answer done and, unless another goroutine is the
// writer or an older answer is not done yet (its goroutine will write this
// one too), becomes the writer: it writes, in request order, every answer
// done from the oldest on, and again as long as the next one is done when
// it has finished. A run of answers written with one system call (issue
// 12: a producer pipelining 16 requests gets the answers one fsync
// acknowledged together in one write, not one each) ends at the first not
// done yet, at a file-backed answer (sendfile: written with the run before
// it as its head), at one closing the connection, or past coalesceBytes.
func (c *conn) complete(sl *slot) {
	c.wmu.Lock()
	sl.finished = true
	if c.writing || !c.pending[0].finished {
		c.wmu.Unlock()
		return
	}
	c.writing = true
	for len(c.pending) > 0 && c.pending[0].finished {
		buf := c.writeBuf[:0]
		var frame *Frame
		n := 0
		for n < len(c.pending) && c.pending[n].finished {
			r := c.pending[n].resp
			n++
			if !c.writeFailed && !r.None {
				buf, frame = c.appendResponse(buf, c.pending[n-1].req, r)
			}
			if frame != nil || r.Close || len(buf) >= coalesceBytes || c.writeFailed {
				break
			}
		}
		// The reader only appends: the first n stay as they are until
		// the writer removes them.
		run := c.pending[:n]
		c.wmu.Unlock()
		c.writeRunOf(run, buf, frame)
		if cap(buf) > 4*coalesceBytes {
			buf = nil // one large answer: not kept for the connection's life
		}
		c.writeBuf = buf
		c.wmu.Lock()
		left := copy(c.pending, c.pending[n:]) // in place: pending never outgrows its MaxInFlight slots
		clear(c.pending[left:])
		c.pending = c.pending[:left]
		for range n {
			<-c.inFlightSlots
		}
	}
	c.writing = false
	c.closeDrainedLocked()
	c.wmu.Unlock()
}

// closeDrainedLocked closes drained once the reader has ended, nothing is
// pending and nobody is writing.
func (c *conn) closeDrainedLocked() {
	if c.readerDone && !c.writing && len(c.pending) == 0 && !c.drainedClosed {
		c.drainedClosed = true
		close(c.drained)
	}
}

// writeRunOf writes a run of answers (buf, then frame's pieces) unless an
// earlier write failed, then does each slot's bookkeeping: frame release,
// Recycle, close, OnResponse, inFlight. The caller is the writer.
func (c *conn) writeRunOf(run []*slot, buf []byte, frame *Frame) {
	if !c.writeFailed && (len(buf) > 0 || frame != nil) {
		if err := c.writeRun(buf, frame); err != nil {
			if !c.isStopping() {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					c.s.frameLog.warn(c.log, "closing connection: the client stopped reading its responses", "write_timeout", c.s.cfg.WriteTimeout)
				} else {
					c.log.Debug("connection write failed", "err", err)
				}
			}
			c.writeFailed = true
			c.abort()
		}
	}
	now := time.Now() // the run was written together
	for _, sl := range run {
		r := sl.resp
		if r.Frame != nil && r.Frame.Release != nil {
			r.Frame.Release()
		}
		if r.Recycle != nil {
			r.Recycle.Recycle()
		}
		if r.Close && !c.writeFailed {
			c.writeFailed = true
			c.abort()
		}
		if on := c.s.cfg.OnResponse; on != nil && !c.writeFailed && !r.None && !sl.started.IsZero() {
			on(sl.req.Key, sl.started.Sub(sl.req.readAt), now.Sub(sl.answered))
		}
		c.lastWriteNanos.Store(now.UnixNano())
		c.inFlight.Add(-1)
	}
}

// coalesceBytes is where a run of answers written together stops growing.
const coalesceBytes = 256 << 10

// responseHeaderFlexible reports whether the response header is v1 (with a
// tag buffer): flexible responses, except ApiVersions which always uses
// header v0 so clients can read it before knowing our versions.
func responseHeaderFlexible(req *Request) bool {
	if req.Key == 18 {
		return false
	}
	return req.Body.IsFlexible()
}

// appendResponse appends r's size, header and, for a body, the encoded
// body to buf; for a file-backed answer it returns the frame whose pieces
// follow (the size counts them).
func (c *conn) appendResponse(buf []byte, req *Request, r Response) ([]byte, *Frame) {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	if !req.RawSASL { // a bare SASL token has no header (sasl.go)
		buf = binary.BigEndian.AppendUint32(buf, uint32(req.CorrelationID))
		if responseHeaderFlexible(req) {
			buf = append(buf, 0) // no tagged fields
		}
	}
	if r.Body != nil {
		buf = r.Body.AppendTo(buf)
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		return buf, nil
	}
	if r.Frame == nil {
		return buf[:start], nil
	}
	binary.BigEndian.PutUint32(buf[start:], uint32(int64(len(buf)-start-4)+r.Frame.Len()))
	return buf, r.Frame
}

// writeRun writes buf, then frame's pieces if frame is not nil.
func (c *conn) writeRun(buf []byte, frame *Frame) error {
	w := progressWriter{nc: c.nc, timeout: c.s.cfg.WriteTimeout, copying: c.nc != c.raw}
	if frame != nil {
		return writeFrame(w, buf, frame)
	}
	_, err := w.Write(buf)
	return err
}

// progressWriter writes to a connection with a write timeout measured from
// the last progress: a response may take any time in total (a large fetch
// to a slow consumer), but a client that stops reading is cut off after
// timeout, and with it the segment references its response holds. A zero
// timeout means none.
type progressWriter struct {
	nc      net.Conn
	timeout time.Duration
	// copying is set on a TLS connection: no sendfile or writev (every
	// byte is encrypted on its way), and no write retried after its
	// deadline (crypto/tls's state is corrupt once a write timed out), so
	// writes go in pieces of copyChunkBytes, the deadline armed before
	// each: progress is then a piece written.
	copying bool
}

// copyChunkBytes is the size of the pooled buffers file ranges are copied
// through and of the pieces a TLS connection is written in (four TLS
// records of 16 KiB).
const copyChunkBytes = 64 << 10

// arm sets the write deadline timeout from now.
func (w progressWriter) arm() {
	if w.timeout > 0 {
		w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

// writeBuffers writes bufs (consuming them), re-arming the deadline each
// time a write timed out after making progress.
func (w progressWriter) writeBuffers(bufs net.Buffers) error {
	for {
		w.arm()
		n, err := bufs.WriteTo(w.nc)
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// writeBuffersMore is writeBuffers for bytes a file range follows
// (sendfile): on TCP they go with MSG_MORE, so the kernel sends them in the
// file's first segment rather than in a small one of their own (issue 12:
// a fetch answer's head was a segment, and on loopback a receive, of its
// own).
func (w progressWriter) writeBuffersMore(bufs net.Buffers) error {
	tc, ok := w.nc.(*net.TCPConn)
	if !ok {
		return w.writeBuffers(bufs)
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	return sendLoop(w, sc, "sendmsg", func() bool { return len(bufs) > 0 }, func(fd int) (int, error) {
		n, err := unix.SendmsgBuffers(fd, bufs[:min(len(bufs), maxIovecs)], nil, nil, unix.MSG_MORE)
		if n > 0 {
			consumeBuffers(&bufs, n)
		}
		return n, err
	})
}

// maxIovecs bounds the buffers of one sendmsg (the kernel's IOV_MAX).
const maxIovecs = 1024

// consumeBuffers drops the first n bytes of bufs.
func consumeBuffers(bufs *net.Buffers, n int) {
	for n > 0 && len(*bufs) > 0 {
		if first := (*bufs)[0]; n >= len(first) {
			n -= len(first)
			*bufs = (*bufs)[1:]
		} else {
			(*bufs)[0] = first[n:]
			n = 0
		}
	}
	for len(*bufs) > 0 && len((*bufs)[0]) == 0 {
		*bufs = (*bufs)[1:]
	}
}

// Write writes p in full, re-arming the deadline as writeBuffers does (on
// a copying connection, before each piece).
func (w progressWriter) Write(p []byte) (int, error) {
	written := 0
	if w.copying {
		for written < len(p) {
			w.arm()
			n, err := w.nc.Write(p[written:min(len(p), written+copyChunkBytes)])
			written += n
			if err != nil {
				return written, err
			}
		}
		return written, nil
	}
	for {
		w.arm()
		n, err := w.nc.Write(p[written:])
		written += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
	}
}

// writeFrame writes head then the frame's pieces: runs of byte pieces with
// one writev, file pieces with sendfile when both ends allow it.
func writeFrame(w progressWriter, head []byte, f *Frame) error {
	if w.copying {
		return writeFrameCopying(w, head, f)
	}
	bufs := net.Buffers{head}
	for _, p := range f.Pieces {
		if p.File == nil {
			if len(p.Bytes) > 0 {
				bufs = append(bufs, p.Bytes)
			}
			continue
		}
		if len(bufs) > 0 {
			if err := w.writeBuffersMore(bufs); err != nil {
				return err
			}
			bufs = bufs[:0]
		}
		if err := sendFileRange(w, p.File, p.Pos, p.Len); err != nil {
			return err
		}
	}
	if len(bufs) > 0 {
		return w.writeBuffers(bufs)
	}
	return nil
}

// sendFileRange sends n bytes of f from pos. On a TCP connection and an OS
// file it uses sendfile(2) with an explicit offset (never the shared file
// position: many connections read the same segment); otherwise it copies
// with pread and write.
func sendFileRange(w progressWriter, f io.ReaderAt, pos, n int64) error {
	if n <= 0 {
		return nil
	}
	if tc, ok := w.nc.(*net.TCPConn); ok {
		if of, ok := f.(vfs.OSFile); ok {
			return sendfile(w, tc, of.OS(), pos, n)
		}
	}
	return copyRange(w, f, pos, n)
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, copyChunkBytes); return &b }}

// writeFrameCopying writes head and the frame's pieces through one pooled
// buffer, each write a full buffer (the last excepted): on TLS the small
// byte pieces of a fetch response (partition headers) and its file ranges
// go out in full TLS records rather than one record, and one system call,
// per piece.
func writeFrameCopying(w progressWriter, head []byte, f *Frame) error {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := (*bp)[:0]
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	add := func(p []byte) error {
		for len(p) > 0 {
			n := copy(buf[len(buf):cap(buf)], p)
			buf, p = buf[:len(buf)+n], p[n:]
			if len(buf) == cap(buf) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := add(head); err != nil {
		return err
	}
	for _, p := range f.Pieces {
		if p.File == nil {
			if err := add(p.Bytes); err != nil {
				return err
			}
			continue
		}
		for pos, n := p.Pos, p.Len; n > 0; {
			chunk := buf[len(buf):min(int64(cap(buf)), int64(len(buf))+n)]
			m, err := p.File.ReadAt(chunk, pos)
			if m < len(chunk) {
				return readSegmentError(err)
			}
			buf = buf[:len(buf)+m]
			pos, n = pos+int64(m), n-int64(m)
			if len(buf) == cap(buf) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// readSegmentError is the error of a read of a file range that came back
// short: a segment truncated under the reader.
func readSegmentError(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading segment: %w", err)
}

func copyRange(w io.Writer, f io.ReaderAt, pos, n int64) error {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		m, err := f.ReadAt(chunk, pos)
		if m < len(chunk) {
			return readSegmentError(err)
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		pos += int64(m)
		n -= int64(m)
	}
	return nil
}

func sendfile(w progressWriter, tc *net.TCPConn, f *os.File, pos, n int64) error {
	sc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	fc, err := f.SyscallConn()
	if err != nil {
		return copyRange(w, f, pos, n)
	}
	var sendErr error
	ctlErr := fc.Control(func(filefd uintptr) {
		sendErr = sendLoop(w, sc, "sendfile", func() bool { return n > 0 }, func(sockfd int) (int, error) {
			off := pos
			m, err := unix.Sendfile(sockfd, int(filefd), &off, int(min(n, 1<<30)))
			if m > 0 {
				pos += int64(m)
				n -= int64(m)
			}
			return m, err
		})
	})
	if ctlErr != nil {
		return ctlErr
	}
	return sendErr
}

// sendLoop drives a non-blocking send system call (sendfile, sendmsg) on
// the socket of sc while left says bytes remain; step makes one call and
// returns what it sent. EAGAIN waits for the socket to be writable, under
// a fresh deadline once a pass made progress (the deadline counts from the
// last progress: a pass returns as soon as the socket is full after having
// sent something, and the next pass re-arms it); EINTR retries; another
// error ends it, and so does a call that sends nothing without one (a
// file shorter than its range: a segment truncated under us; never spin).
func sendLoop(w progressWriter, sc syscall.RawConn, op string, left func() bool, step func(fd int) (int, error)) error {
	var sendErr error
	for left() && sendErr == nil {
		w.arm()
		progressed := false
		werr := sc.Write(func(fd uintptr) bool {
			for left() {
				m, err := step(int(fd))
				if m > 0 {
					progressed = true
				}
				switch {
				case err == unix.EAGAIN:
					return progressed
				case err == unix.EINTR:
					continue
				case err != nil:
					sendErr = os.NewSyscallError(op, err)
					return true
				case m == 0:
					sendErr = fmt.Errorf("%s: %w", op, io.ErrUnexpectedEOF)
					return true
				}
			}
			return true
		})
		if werr != nil && sendErr == nil {
			sendErr = werr
		}
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
