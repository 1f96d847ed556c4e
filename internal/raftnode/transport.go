package raftnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// transport carries every group's messages between this node and its peers:
// one TCP connection per ordered pair of nodes (this node dials each peer
// for its own messages and accepts each peer's connection for theirs), each
// frame a batch of (group, message) drained from the peer's queue
// (CockroachDB's coalescing: all groups' messages to a peer share its
// connection and its writes). Goroutines: the accept loop, one writer per
// peer, one reader per accepted connection; none per group.
type transport struct {
	node *Node
	cfg  *Config
	log  *slog.Logger

	mu      sync.RWMutex // peers, conns, inbound
	peers   map[uint64]*peer
	conns   map[net.Conn]struct{} // every open connection's socket (rawConn)
	inbound map[uint64]net.Conn   // each peer's accepted connection past its hello (its socket)
	started bool
	done    chan struct{}
	wg      sync.WaitGroup

	// pending holds a token per accepted connection still in its
	// handshake or hello (Config.MaxPendingHandshakes).
	pending chan struct{}

	logMu     sync.Mutex // the limiters
	badLog    logLimiter
	refuseLog logLimiter
	dialLog   logLimiter

	framesSent, bytesSent, messagesSent, messagesDropped          atomic.Uint64
	framesReceived, bytesReceived, messagesReceived, unknownGroup atomic.Uint64
	badFrames, dials, accepts, handshakeFailures, connsRefused    atomic.Uint64
	openConns                                                     atomic.Int64
}

// peer is one peer node: the queue of messages to it and what its writer
// goroutine needs. The queue, addr and heartbeat are under mu (a leaf).
type peer struct {
	id uint64
	t  *transport

	mu         sync.Mutex
	addr       string
	queue      []outMessage
	queueBytes int
	heartbeat  bool // a liveness heartbeat is due
	wake       chan struct{}

	lastHeard atomic.Int64 // the node tick of its last frame
	up        atomic.Bool
	cut       atomic.Bool // tests: a network partition between the two nodes
	connected atomic.Bool // the writer has a connection
}

type outMessage struct {
	group uint64
	flags uint8
	data  []byte
}

// TransportStats are the transport's counters since New. BadFrames
// counts connections closed for what they sent (frames, hellos, TLS
// handshakes); HandshakeFailures the TLS handshakes that failed either way
// and the connections with TLS on one side only; ConnsRefused the accepted
// connections closed at once past Config.MaxPendingHandshakes.
type TransportStats struct {
	FramesSent, BytesSent, MessagesSent, MessagesDropped          uint64
	FramesReceived, BytesReceived, MessagesReceived, UnknownGroup uint64
	BadFrames, Dials, Accepts, HandshakeFailures, ConnsRefused    uint64
	OpenConns                                                     int64
}

func newTransport(n *Node) *transport {
	return &transport{
		node:    n,
		cfg:     &n.cfg,
		log:     n.cfg.Logger.With("raft", n.cfg.ID),
		peers:   make(map[uint64]*peer),
		conns:   make(map[net.Conn]struct{}),
		inbound: make(map[uint64]net.Conn),
		done:    make(chan struct{}),
		pending: make(chan struct{}, n.cfg.MaxPendingHandshakes),
	}
}

func (t *transport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		p.mu.Lock()
		p.addr = addr
		p.mu.Unlock()
		return
	}
	p := &peer{id: id, t: t, addr: addr, wake: make(chan struct{}, 1)}
	p.up.Store(true) // until an election timeout passes without a frame from it
	t.peers[id] = p
	if t.started {
		t.wg.Add(1)
		go p.run()
	}
}

func (t *transport) peer(id uint64) *peer {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	return p
}

func (t *transport) start() {
	t.mu.Lock()
	t.started = true
	for _, p := range t.peers {
		t.wg.Add(1)
		go p.run()
	}
	t.mu.Unlock()
	t.wg.Add(1)
	go t.acceptLoop()
}

func (t *transport) stop() {
	t.mu.Lock()
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	_ = t.cfg.Listener.Close()
	for c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

func (t *transport) stopping() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// track records an open connection (its socket) so that stop closes it;
// false when stopping (the caller closes it).
func (t *transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping() {
		return false
	}
	t.conns[c] = struct{}{}
	t.openConns.Add(1)
	return true
}

// untrack forgets and closes c's socket (never a TLS close_notify, which
// would wait on a peer that stopped reading).
func (t *transport) untrack(c net.Conn) {
	c = rawConn(c)
	t.mu.Lock()
	if _, ok := t.conns[c]; ok {
		delete(t.conns, c)
		t.openConns.Add(-1)
	}
	t.mu.Unlock()
	_ = c.Close()
}

// send queues one message of a group for its recipient. A message that
// cannot be queued (unknown peer, a partition in tests, the queue full) is
// dropped and raft told that the peer is unreachable; raft sends again.
func (t *transport) send(group uint64, flags uint8, m *pb.Message) {
	to := m.GetTo()
	p := t.peer(to)
	if p == nil || p.cut.Load() || t.stopping() {
		t.drop(group, to)
		return
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.log.Error("raft message does not marshal", "group", group, "err", err)
		t.drop(group, to)
		return
	}
	p.mu.Lock()
	if len(p.queue) >= t.cfg.PeerQueueMessages || p.queueBytes+len(data) > t.cfg.PeerQueueBytes {
		p.mu.Unlock()
		t.drop(group, to)
		return
	}
	p.queue = append(p.queue, outMessage{group: group, flags: flags, data: data})
	p.queueBytes += len(data)
	p.mu.Unlock()
	p.signal()
}

func (t *transport) drop(group, to uint64) {
	t.messagesDropped.Add(1)
	if g := t.node.group(group); g != nil {
		g.inboxMu.Lock()
		g.unreachable = append(g.unreachable, to)
		g.inboxMu.Unlock()
		t.node.sched.enqueue(g)
	}
}

func (p *peer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// tick asks every peer's writer for a liveness heartbeat and returns the
// peers that have just gone an election timeout without a frame.
func (t *transport) tick(now, election int64) (down []uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.peers {
		if !p.cut.Load() {
			p.mu.Lock()
			p.heartbeat = true
			p.mu.Unlock()
			p.signal()
		}
		if p.up.Load() && now-p.lastHeard.Load() >= election {
			p.up.Store(false)
			down = append(down, p.id)
		}
	}
	return down
}

// lastHeard is the node tick of peer id's last frame (ok false for an
// unknown peer).
func (t *transport) lastHeard(id uint64) (tick int64, ok bool) {
	p := t.peer(id)
	if p == nil {
		return 0, false
	}
	return p.lastHeard.Load(), true
}

// isUp says whether node id is up as far as liveness knows (this node is).
func (t *transport) isUp(id uint64) bool {
	if id == t.cfg.ID {
		return true
	}
	p := t.peer(id)
	return p != nil && p.up.Load()
}

// run is the peer's writer: it drains the queue into frames and writes them,
// dialling (with back-off) when it has no connection. Messages it cannot
// write are dropped and reported unreachable.
func (p *peer) run() {
	t := p.t
	defer t.wg.Done()
	var (
		conn     net.Conn
		connAddr string
		batch    []outMessage
		buf      []byte
		backoff  = 20 * time.Millisecond
	)
	defer func() {
		if conn != nil {
			t.untrack(conn)
		}
	}()
	for {
		select {
		case <-t.done:
			return
		case <-p.wake:
		}
		for !t.stopping() {
			p.mu.Lock()
			batch, p.queue = p.queue, batch[:0]
			p.queueBytes = 0
			heartbeat, addr := p.heartbeat, p.addr
			p.heartbeat = false
			p.mu.Unlock()
			if len(batch) == 0 && !heartbeat {
				break
			}
			if p.cut.Load() {
				p.dropAll(batch)
				continue
			}
			if conn != nil && connAddr != addr {
				t.untrack(conn)
				conn = nil
			}
			if conn == nil {
				c, err := t.dial(addr, p.id)
				if err != nil {
					t.log.Debug("raft peer dial failed", "peer", p.id, "addr", addr, "err", err, "backoff", backoff)
					p.dropAll(batch)
					select {
					case <-t.done:
						return
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, t.cfg.ReconnectBackoffMax)
					continue
				}
				conn, connAddr, backoff = c, addr, 20*time.Millisecond
				p.connected.Store(true)
			}
			var frames, msgs int
			buf, frames, msgs = p.encode(buf[:0], batch)
			_ = conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
			if _, err := conn.Write(buf); err != nil {
				t.log.Warn("raft peer write failed; reconnecting", "peer", p.id, "addr", addr, "err", err)
				t.untrack(conn)
				conn = nil
				p.connected.Store(false)
				p.dropAll(batch)
				continue
			}
			t.framesSent.Add(uint64(frames))
			t.messagesSent.Add(uint64(msgs))
			t.bytesSent.Add(uint64(len(buf)))
			clear(batch)
			if cap(buf) > 4*t.cfg.MaxFrameBytes {
				buf = nil
			}
		}
	}
}

// encode appends the batch as frames to buf: as many messages per frame as
// MaxMessagesPerFrame and MaxFrameBytes allow; an empty batch is one empty
// frame (the liveness heartbeat). A message that fits no frame is dropped.
func (p *peer) encode(buf []byte, batch []outMessage) ([]byte, int, int) {
	t := p.t
	limit := t.cfg.MaxFrameBytes + lengthField
	start, count, frames, msgs := len(buf), 0, 0, 0
	buf = startBatch(buf)
	for _, m := range batch {
		size := entryHeader + len(m.data)
		if frameHeader+batchHeader+size > limit {
			t.log.Error("raft message larger than a frame: dropped", "peer", p.id, "group", m.group, "bytes", len(m.data))
			t.drop(m.group, p.id)
			continue
		}
		if count > 0 && (len(buf)-start+size > limit || t.cfg.MaxMessagesPerFrame > 0 && count >= t.cfg.MaxMessagesPerFrame) {
			buf = sealBatch(buf, start, count)
			frames++
			start, count = len(buf), 0
			buf = startBatch(buf)
		}
		buf = appendBatchEntry(buf, m.group, m.flags, m.data)
		count++
		msgs++
	}
	buf = sealBatch(buf, start, count)
	return buf, frames + 1, msgs
}

func (p *peer) dropAll(batch []outMessage) {
	for _, m := range batch {
		p.t.drop(m.group, p.id)
	}
	clear(batch)
}

func (t *transport) dial(addr string, to uint64) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, t.cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	t.dials.Add(1)
	if !t.track(c) {
		_ = c.Close()
		return nil, ErrStopped
	}
	// The handshake and the hello within HandshakeTimeout: an acceptor
	// that never answers holds the writer no longer.
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	conn := c
	if t.cfg.TLS != nil {
		if conn, err = t.clientHandshake(c, to); err != nil {
			t.untrack(c)
			return nil, err
		}
	}
	if _, err := conn.Write(appendHello(nil, hello{from: t.cfg.ID, to: to, cluster: t.cfg.Cluster})); err != nil {
		t.untrack(c)
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return conn, nil
}

func (t *transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.cfg.Listener.Accept()
		if err != nil {
			if t.stopping() || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("raft peer accept", "err", err)
			select {
			case <-t.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		t.accepts.Add(1)
		select {
		case t.pending <- struct{}{}:
		default:
			// As many connections as MaxPendingHandshakes are still
			// in their handshakes: a flood, or peers far slower than
			// HandshakeTimeout. Real peers redial.
			t.connsRefused.Add(1)
			t.logLimited(&t.refuseLog, "raft peer connection refused: too many pending handshakes",
				"remote", c.RemoteAddr().String(), "max_pending_handshakes", t.cfg.MaxPendingHandshakes)
			_ = c.Close()
			continue
		}
		if !t.track(c) {
			_ = c.Close()
			return
		}
		t.wg.Add(1)
		go t.serveConn(c)
	}
}

// serveConn reads one peer's connection: its TLS handshake, its hello, then
// batches, each message handed to its group. Anything invalid closes the
// connection with a log line; the peer redials.
func (t *transport) serveConn(c net.Conn) {
	defer t.wg.Done()
	defer t.untrack(c)
	p, conn, err := t.handshake(c)
	<-t.pending
	if err != nil {
		return
	}
	defer t.endInbound(p.id, c)
	var src io.Reader = conn
	if t.cfg.TLS == nil {
		// A frame is two reads (its length, then the rest): on a plain
		// socket a buffer makes them one system call per 64 KiB of
		// frames instead of two per frame. A TLS connection reads whole
		// records into its own buffer already.
		src = bufio.NewReaderSize(conn, peerReadBuffer)
	}
	r := frameReader{c: src, max: t.cfg.MaxFrameBytes}
	var msgs []inMessage
	for {
		frame, err := r.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !t.stopping() {
				t.badConn(c, p.id, err)
			}
			return
		}
		var kind uint8
		kind, _, msgs, err = decodeFrame(frame, msgs[:0])
		if err == nil && kind != frameBatch {
			err = frameErrorf("frame of kind %d after the hello", kind)
		}
		for _, m := range msgs {
			if err == nil && (m.msg.GetTo() != t.cfg.ID || m.msg.GetFrom() != p.id) {
				err = frameErrorf("message from %d to %d on the connection from node %d", m.msg.GetFrom(), m.msg.GetTo(), p.id)
			}
		}
		if err != nil {
			t.badConn(c, p.id, err)
			return
		}
		if p.cut.Load() {
			clear(msgs)
			continue
		}
		t.framesReceived.Add(1)
		t.bytesReceived.Add(uint64(len(frame) + lengthField))
		t.messagesReceived.Add(uint64(len(msgs)))
		p.lastHeard.Store(t.node.tickNow.Load())
		if !p.up.Load() {
			p.up.Store(true)
			t.log.Info("raft peer up", "peer", p.id)
		}
		for _, m := range msgs {
			if g := t.node.group(m.group); g != nil {
				g.deliver(m)
			} else {
				t.unknownGroup.Add(1)
			}
		}
		clear(msgs)
	}
}

// handshake takes an accepted connection to the end of its hello within
// HandshakeTimeout: the TLS handshake (or the check that a plaintext
// listener gets no TLS), the hello, and, over TLS, the check that the node
// the hello names is the node the certificate names. It returns the peer
// and the connection to read its frames from, registered as the peer's
// inbound connection (replacing an older one: a peer's writer has one
// connection at a time, so an older one is dead or an impostor's).
func (t *transport) handshake(c net.Conn) (*peer, net.Conn, error) {
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var (
		prefix   = make([]byte, lengthField)
		certNode uint64
		conn     net.Conn
		h        hello
	)
	_, err := io.ReadFull(c, prefix)
	if err == nil {
		conn, certNode, err = t.serverHandshake(c, prefix)
	}
	if err == nil {
		// At most a hello's bytes: a connection not yet known to be a
		// peer's makes the node hold no more (a length prefix of 16 MiB
		// is refused, not waited for).
		var frame []byte
		r := frameReader{c: conn, max: minFrame + helloBody}
		if frame, err = r.next(); err == nil {
			var kind uint8
			kind, h, _, err = decodeFrame(frame, nil)
			switch {
			case err != nil:
			case kind != frameHello:
				err = frameErrorf("first frame of kind %d, not a hello", kind)
			case h.to != t.cfg.ID:
				err = frameErrorf("hello to node %d, this is node %d", h.to, t.cfg.ID)
			case h.cluster != t.cfg.Cluster:
				err = frameErrorf("hello from cluster %d, this is cluster %d", h.cluster, t.cfg.Cluster)
			case t.cfg.TLS != nil && h.from != certNode:
				err = frameErrorf("hello from node %d over a connection whose certificate names node %d", h.from, certNode)
			case t.peer(h.from) == nil:
				err = frameErrorf("hello from node %d, not a peer", h.from)
			}
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("handshake and hello not done within %v: %w", t.cfg.HandshakeTimeout, err)
		}
		if !t.stopping() {
			t.badConn(c, h.from, err)
		}
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	t.mu.Lock()
	if old := t.inbound[h.from]; old != nil {
		_ = old.Close() // its reader untracks it
	}
	t.inbound[h.from] = c
	t.mu.Unlock()
	return t.peer(h.from), conn, nil
}

// endInbound forgets c as the peer's inbound connection unless a newer one
// replaced it.
func (t *transport) endInbound(id uint64, c net.Conn) {
	t.mu.Lock()
	if t.inbound[id] == c {
		delete(t.inbound, id)
	}
	t.mu.Unlock()
}

func (t *transport) badConn(c net.Conn, from uint64, err error) {
	t.badFrames.Add(1)
	t.logLimited(&t.badLog, "raft peer connection closed", "remote", c.RemoteAddr().String(), "peer", from, "err", err)
}

// logLimited logs a warning through l's limit, with the count of the lines
// it suppressed before.
func (t *transport) logLimited(l *logLimiter, msg string, args ...any) {
	t.logMu.Lock()
	suppressed, ok := l.allow(time.Now())
	t.logMu.Unlock()
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	t.log.Warn(msg, args...)
}

// peerReadBuffer is the read buffer of a plaintext peer connection.
const peerReadBuffer = 64 << 10

// frameReader reads length-prefixed frames into one reused buffer, never
// more than max bytes a frame.
type frameReader struct {
	c   io.Reader
	max int
	hdr [lengthField]byte
	buf []byte
}

// next returns the next frame's bytes after the length prefix, valid until
// the next call.
func (r *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(r.c, r.hdr[:]); err != nil {
		return nil, err
	}
	n, err := frameLength(r.hdr[:], r.max)
	if err != nil {
		return nil, err
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r.c, r.buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	frame := r.buf[:n]
	if cap(r.buf) > 4<<20 && n < 64<<10 {
		r.buf = nil // a rare large frame does not pin its buffer
	}
	return frame, nil
}

func (t *transport) stats() TransportStats {
	return TransportStats{
		FramesSent: t.framesSent.Load(), BytesSent: t.bytesSent.Load(),
		MessagesSent: t.messagesSent.Load(), MessagesDropped: t.messagesDropped.Load(),
		FramesReceived: t.framesReceived.Load(), BytesReceived: t.bytesReceived.Load(),
		MessagesReceived: t.messagesReceived.Load(), UnknownGroup: t.unknownGroup.Load(),
		BadFrames: t.badFrames.Load(), Dials: t.dials.Load(), Accepts: t.accepts.Load(),
		HandshakeFailures: t.handshakeFailures.Load(), ConnsRefused: t.connsRefused.Load(),
		OpenConns: t.openConns.Load(),
	}
}
