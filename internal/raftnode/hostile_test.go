package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/certs"
)

// tlsPeerConn dials addr over TLS 1.3 presenting pair, trusting ca.
func tlsPeerConn(t *testing.T, addr string, ca *peerCA, pair certs.Pair) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.ca.Cert)
	cert := &tls.Certificate{Certificate: [][]byte{pair.Cert.Raw}, PrivateKey: pair.Key}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// stillOpen fails if the node closes conn within a moment.
func stillOpen(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("connection closed by the node: %v", err)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// TestHostileTLSPeer: over mutual TLS, connections holding certificates of
// the cluster's CA are still refused when the certificate is not a node's
// (a Kafka client's, one naming two nodes), names a node that is not a
// peer, or the hello claims another node; a peer's oversized or corrupt
// frame closes its connection; a frame of an unknown group is counted and
// dropped, the connection kept; a peer's newer connection replaces its
// older one. The cluster replicates throughout.
func TestHostileTLSPeer(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 3, manual: true, tls: true})
	leaders, _ := c.electAll(60)
	target := c.node(2)
	ca := c.peerCA
	node3 := ca.issue(cn(NodeCommonName(3)))
	helloFrom := func(id uint64) []byte { return appendHello(nil, hello{from: id, to: 2, cluster: 7}) }
	bad0 := target.Stats().Transport.BadFrames

	refused := []struct {
		name  string
		pair  certs.Pair
		hello []byte
	}{
		{"hello claims another node", node3, helloFrom(1)},
		{"node that is not a peer", ca.issue(cn(NodeCommonName(9))), helloFrom(9)},
		{"two common names", ca.issue(pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{
			{Type: oidCommonName, Value: "node-3"}, {Type: oidCommonName, Value: "node-1"}}}), helloFrom(3)},
		{"not a node's certificate", ca.issue(cn("alice")), helloFrom(3)},
		{"a node id with a leading zero", ca.issue(cn("node-03")), helloFrom(3)},
	}
	for _, r := range refused {
		conn := tlsPeerConn(t, target.Addr(), ca, r.pair)
		conn.Write(r.hello)
		conn.Write(sealBatch(startBatch(nil), 0, 0))
		expectClosed(t, conn, 5*time.Second)
	}
	// A client certificate of the CA (client auth only, as a Kafka
	// client's), even naming a node, fails the handshake itself: a node's
	// certificate is for server auth too.
	client, err := certs.Issue(ca.ca, certs.Options{Subject: cn("node-3")})
	if err != nil {
		t.Fatal(err)
	}
	conn := tlsPeerConn(t, target.Addr(), ca, client)
	conn.Write(helloFrom(3))
	expectClosed(t, conn, 5*time.Second)

	for _, frame := range [][]byte{
		{0xff, 0xff, 0xff, 0xff}, // 4 GiB
		func() []byte { f := batchFrame(t, 1, heartbeat(3, 2, 1)); f[len(f)-1] ^= 1; return f }(), // checksum
		batchFrame(t, 1, heartbeat(1, 2, 1)),                                                      // node 1's message on node 3's connection
	} {
		conn := tlsPeerConn(t, target.Addr(), ca, node3)
		conn.Write(helloFrom(3))
		conn.Write(frame)
		expectClosed(t, conn, 5*time.Second)
	}
	if got := target.Stats().Transport.BadFrames - bad0; got != uint64(len(refused)+1+3) {
		t.Fatalf("%d connections closed, want %d", got, len(refused)+1+3)
	}

	// An unknown group: dropped and counted, the connection kept.
	unknown0 := target.Stats().Transport.UnknownGroup
	first := tlsPeerConn(t, target.Addr(), ca, node3)
	first.Write(helloFrom(3))
	for i := range 2 {
		first.Write(batchFrame(t, 999, heartbeat(3, 2, 1)))
		waitFor(t, "the unknown group counted", func() bool { return target.Stats().Transport.UnknownGroup == unknown0+uint64(i+1) })
	}
	stillOpen(t, first)
	// A newer connection of node 3 closes the older.
	second := tlsPeerConn(t, target.Addr(), ca, node3)
	second.Write(helloFrom(3))
	expectClosed(t, first, 5*time.Second)
	second.Close()

	for _, g := range c.groups {
		c.propose(leaders[g], g, "still")
	}
	c.tickUntil(30, "replicated after the hostile peers", c.everyGroupApplied(1))
}

// holdingListener accepts connections on 127.0.0.1 and holds them open
// until the test ends, after handing each to accepted (if set); it returns
// its address.
func holdingListener(t *testing.T, accepted func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted != nil {
				accepted(c)
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// singleNode is node 1 over TLS with a certificate of ca (nil: plaintext),
// no group, no peer: the target of handshake tests.
func singleNode(t *testing.T, ca *peerCA, tweak func(*Config)) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: 1, Listener: ln, ManualTicks: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if ca != nil {
		cfg.TLS = ca.config("node-1", ca.issue(cn(NodeCommonName(1))))
	}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// TestHandshakeDeadlines: an accepted connection that never completes its
// TLS handshake or its hello is closed after HandshakeTimeout; a dialled
// peer that never answers the handshake holds the writer no longer (it
// redials).
func TestHandshakeDeadlines(t *testing.T) {
	ca := newPeerCA(t)
	const timeout = 300 * time.Millisecond
	for _, tlsOn := range []bool{true, false} {
		var nodeCA *peerCA
		if tlsOn {
			nodeCA = ca
		}
		logs := &logBuffer{}
		n := singleNode(t, nodeCA, func(cfg *Config) {
			cfg.HandshakeTimeout = timeout
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
		// Nothing, or the start of what the listener expects (a TLS
		// ClientHello, a hello frame), then nothing more.
		stalls := [][]byte{nil, appendHello(nil, hello{from: 2, to: 1})[:10]}
		if tlsOn {
			stalls[1] = []byte{0x16, 0x03, 0x01, 0x02, 0x00}
		}
		for _, start := range stalls {
			conn, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(start)
			t0 := time.Now()
			expectClosed(t, conn, 10*timeout)
			if d := time.Since(t0); d < timeout/2 {
				t.Fatalf("tls %v, %x: closed after %v, before the handshake timeout", tlsOn, start, d)
			}
		}
		if !tlsOn {
			// A hello's length prefix of 16 MiB (the frame limit) from a
			// connection not yet known: refused at once, not waited for.
			conn, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write([]byte{0x01, 0x00, 0x00, 0x00})
			expectClosed(t, conn, 10*timeout)
			wantLog(t, logs, 1, "frame length 16777216 outside [5, 30]")
		}
	}

	// A peer listener that accepts and never answers.
	silent := holdingListener(t, nil)
	n := singleNode(t, ca, func(cfg *Config) { cfg.HandshakeTimeout = timeout; cfg.ReconnectBackoffMax = 20 * time.Millisecond })
	if err := n.AddPeer(2, silent); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); n.Stats().Transport.HandshakeFailures < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writer did not give up on a silent peer's handshake and redial: %+v", n.Stats().Transport)
		}
		n.Tick() // a liveness heartbeat to send: the writer dials
	}
}

// TestPendingHandshakesBounded: past MaxPendingHandshakes, a new connection
// is closed at once; once the pending ones end, a peer connects.
func TestPendingHandshakesBounded(t *testing.T) {
	ca := newPeerCA(t)
	n := singleNode(t, ca, func(cfg *Config) { cfg.MaxPendingHandshakes = 4 })
	if err := n.AddPeer(2, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	var pending []net.Conn
	for range 4 {
		conn, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pending = append(pending, conn)
	}
	waitFor(t, "4 connections accepted", func() bool { return n.Stats().Transport.Accepts == 4 })
	flood, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	expectClosed(t, flood, time.Second) // HandshakeTimeout is 10 s
	if st := n.Stats().Transport; st.ConnsRefused != 1 {
		t.Fatalf("%d connections refused, want 1", st.ConnsRefused)
	}
	for _, c := range pending {
		c.Close()
	}
	waitFor(t, "the pending handshakes ended", func() bool { return n.Stats().Transport.OpenConns == 0 })
	conn := tlsPeerConn(t, n.Addr(), ca, ca.issue(cn(NodeCommonName(2))))
	conn.Write(appendHello(nil, hello{from: 2, to: 1}))
	conn.Write(sealBatch(startBatch(nil), 0, 0))
	waitFor(t, "the peer's frame received", func() bool { return n.Stats().Transport.FramesReceived == 1 })
}

// TestSlowReaderOverTLS: a peer that completes the TLS handshake and then
// never reads. Its queue stays within PeerQueueBytes, what does not fit is
// dropped and reported unreachable, the blocked write ends at WriteTimeout
// and the writer redials at once (closing the socket, not waiting to send
// a TLS close_notify into the full buffer), and Stop returns promptly.
func TestSlowReaderOverTLS(t *testing.T) {
	ca := newPeerCA(t)
	srv := serverTLS(func() *tls.Config {
		b, err := peerTLSBase(ca.config("node-3", ca.issue(cn(NodeCommonName(3)))))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}())
	slow := holdingListener(t, func(c net.Conn) {
		c.(*net.TCPConn).SetReadBuffer(16 << 10)
		go tls.Server(c, srv).Handshake() // then never read
	})

	const queueBytes = 1 << 20
	n := singleNode(t, ca, func(cfg *Config) {
		cfg.WriteTimeout = 300 * time.Millisecond
		cfg.PeerQueueBytes = queueBytes
		cfg.ReconnectBackoffMax = 20 * time.Millisecond
	})
	if err := n.AddPeer(3, slow); err != nil {
		t.Fatal(err)
	}
	if err := n.AddGroup(GroupConfig{ID: 1, Voters: []uint64{1, 3}, Storage: NewMemStorage(), Apply: func([]*pb.Entry) {}}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<10)
	p := n.transport.peer(3)
	t0 := time.Now()
	for n.Stats().Transport.Dials < 3 {
		if time.Since(t0) > 4*time.Second {
			t.Fatalf("the writer did not redial within 4 s of a peer that stopped reading: %+v", n.Stats().Transport)
		}
		for i := range 8 {
			binary.BigEndian.PutUint64(data, uint64(i))
			n.transport.send(1, 0, &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)),
				Term: new(uint64(1)), Entries: []*pb.Entry{{Index: new(uint64(2)), Term: new(uint64(1)), Data: data}}})
		}
		p.mu.Lock()
		queued := p.queueBytes
		p.mu.Unlock()
		if queued > queueBytes {
			t.Fatalf("%d bytes queued for the slow peer, bound %d", queued, queueBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := n.Stats().Transport
	if st.MessagesDropped == 0 {
		t.Fatalf("nothing dropped for a peer that stopped reading: %+v", st)
	}
	t1 := time.Now()
	n.Stop()
	if d := time.Since(t1); d > 2*time.Second {
		t.Fatalf("Stop took %v with a peer that stopped reading", d)
	}
}
