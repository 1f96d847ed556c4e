package raftnode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"time"
)

// Config is a node's configuration. Zero fields take the defaults of
// DefaultConfig (their one home); Validate refuses the rest that makes no
// sense.
type Config struct {
	// ID is this node's id, also its raft id in every group (≥ 1).
	ID uint64
	// Cluster is checked in every connection's hello: nodes of another
	// cluster are refused.
	Cluster uint64
	// Listener is the peer listener (--peer-listen); the node accepts its
	// peers' connections on it and closes it at Stop.
	Listener net.Listener

	// TLS, when set, runs every peer connection over mutual TLS 1.3
	// (tls.go): its Certificates[0] is this node's certificate, presented
	// in both directions, and its ClientCAs are the CAs peers' certificates
	// are verified against in both directions; a peer's certificate must
	// name the node it is (subject CN node-<id>, NodeCommonName). A
	// configuration with GetConfigForClient (server.NewTLSConfig's, which
	// reloads renewed files) is asked for the one in force at every new
	// connection. Nil: plaintext, for tests and a single machine; a peer
	// with TLS on one side only is refused.
	TLS *tls.Config
	// HandshakeTimeout bounds a new connection's TLS handshake and hello,
	// accepted or dialled (10 s).
	HandshakeTimeout time.Duration
	// MaxPendingHandshakes bounds the accepted connections that have not
	// yet completed their handshake and hello (64); past it a new
	// connection is closed at once (a flood of connections holds no more).
	MaxPendingHandshakes int

	// TickInterval is the node-wide ticker's period (100 ms).
	TickInterval time.Duration
	// ManualTicks: no ticker goroutine; the owner calls Node.Tick (tests).
	ManualTicks bool
	// ElectionTicks (10) and HeartbeatTicks (1) are raft's, in ticks. A peer
	// not heard from for ElectionTicks ticks is taken for down.
	ElectionTicks  int
	HeartbeatTicks int

	// Workers is the size of the scheduler's pool (GOMAXPROCS).
	Workers int

	// PeerQueueMessages bounds each peer's send queue (65,536 messages: a
	// heartbeat of each of 10,000 waking groups to a peer is 10,000);
	// PeerQueueBytes bounds its bytes (64 MiB). Past either, messages are
	// dropped and raft is told the peer is unreachable.
	PeerQueueMessages int
	PeerQueueBytes    int
	// MaxFrameBytes bounds a frame, sent and received (16 MiB). A peer's
	// frame above it closes the connection.
	MaxFrameBytes int
	// MaxMessagesPerFrame bounds the messages coalesced into one frame: 0
	// is as many as the queue holds and the frame fits; 1 turns coalescing
	// off (one frame per message: for measuring what coalescing saves).
	MaxMessagesPerFrame int

	// MaxSizePerMsg (1 MiB) and MaxInflightMsgs (256) are raft's flow
	// control per follower.
	MaxSizePerMsg   uint64
	MaxInflightMsgs int

	// DialTimeout (1 s) and WriteTimeout (10 s) bound a connection's dial
	// and each frame write; ReconnectBackoffMax (1 s) caps the doubling
	// back-off (from 20 ms) between failed dials.
	DialTimeout         time.Duration
	WriteTimeout        time.Duration
	ReconnectBackoffMax time.Duration

	Logger *slog.Logger
}

// DefaultConfig returns the defaults: etcd's election of 10 ticks and
// heartbeat of 1 tick at a 100 ms tick (docs/replication.md section 3).
func DefaultConfig() Config {
	return Config{
		TickInterval:         100 * time.Millisecond,
		ElectionTicks:        10,
		HeartbeatTicks:       1,
		Workers:              runtime.GOMAXPROCS(0),
		PeerQueueMessages:    65536,
		PeerQueueBytes:       64 << 20,
		MaxFrameBytes:        16 << 20,
		MaxSizePerMsg:        1 << 20,
		MaxInflightMsgs:      256,
		DialTimeout:          time.Second,
		WriteTimeout:         10 * time.Second,
		ReconnectBackoffMax:  time.Second,
		HandshakeTimeout:     10 * time.Second,
		MaxPendingHandshakes: 64,
		Logger:               slog.Default(),
	}
}

// withDefaults fills the zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.TickInterval == 0 {
		c.TickInterval = d.TickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = d.ElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = d.HeartbeatTicks
	}
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if c.PeerQueueMessages == 0 {
		c.PeerQueueMessages = d.PeerQueueMessages
	}
	if c.PeerQueueBytes == 0 {
		c.PeerQueueBytes = d.PeerQueueBytes
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = d.MaxFrameBytes
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = d.MaxSizePerMsg
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = d.MaxInflightMsgs
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.ReconnectBackoffMax == 0 {
		c.ReconnectBackoffMax = d.ReconnectBackoffMax
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.MaxPendingHandshakes == 0 {
		c.MaxPendingHandshakes = d.MaxPendingHandshakes
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Validate refuses a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.ID == 0:
		return errors.New("raftnode: node id 0 (ids start at 1)")
	case c.Listener == nil:
		return errors.New("raftnode: no peer listener")
	case c.TickInterval < 0, c.ElectionTicks < 0, c.HeartbeatTicks < 0, c.Workers < 0,
		c.PeerQueueMessages < 0, c.PeerQueueBytes < 0, c.MaxFrameBytes < 0, c.MaxMessagesPerFrame < 0,
		c.MaxInflightMsgs < 0, c.DialTimeout < 0, c.WriteTimeout < 0, c.ReconnectBackoffMax < 0,
		c.HandshakeTimeout < 0, c.MaxPendingHandshakes < 0:
		return errors.New("raftnode: negative setting")
	case c.ElectionTicks != 0 && c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("raftnode: election of %d ticks not above the heartbeat's %d", c.ElectionTicks, c.HeartbeatTicks)
	case c.MaxFrameBytes != 0 && c.MaxFrameBytes < 1<<10:
		return fmt.Errorf("raftnode: frame limit %d below 1 KiB", c.MaxFrameBytes)
	case c.MaxFrameBytes != 0 && c.MaxSizePerMsg != 0 && c.MaxSizePerMsg+64<<10 > uint64(c.MaxFrameBytes):
		return fmt.Errorf("raftnode: raft messages of %d bytes do not fit frames of %d", c.MaxSizePerMsg, c.MaxFrameBytes)
	}
	if c.TLS != nil {
		if _, err := peerTLSBase(c.TLS); err != nil {
			return err
		}
	}
	return nil
}
