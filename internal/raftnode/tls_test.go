package raftnode

import (
	"bytes"
	"crypto/tls"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/server"
)

var everyClusterTLS = flag.Bool("raftnode.tls", false, "run every test cluster's peer links over mutual TLS")

// peerCA is a CA of node certificates, written to files in a directory and
// loaded as a broker loads them (server.NewTLSConfig: reloaded when the
// files change, client certificates of the CA required).
type peerCA struct {
	t   testing.TB
	dir string
	ca  certs.Pair
}

func newPeerCA(t testing.TB) *peerCA {
	t.Helper()
	ca, err := certs.NewCA(pkix.Name{CommonName: "Sushka peer CA"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &peerCA{t: t, dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(p.caFile(), ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *peerCA) caFile() string { return filepath.Join(p.dir, certs.CACertFile) }

// issue makes a node certificate of this CA with subject s for 127.0.0.1.
func (p *peerCA) issue(s pkix.Name) certs.Pair {
	p.t.Helper()
	pair, err := certs.Issue(p.ca, certs.Options{Subject: s, Hosts: []string{"127.0.0.1"}, Peer: true})
	if err != nil {
		p.t.Fatal(err)
	}
	return pair
}

func cn(name string) pkix.Name { return pkix.Name{CommonName: name} }

// write writes pair as name.crt and name.key, replacing them (by rename, as
// a renewal does), and returns their paths.
func (p *peerCA) write(name string, pair certs.Pair) (certFile, keyFile string) {
	p.t.Helper()
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	for _, f := range []struct {
		path string
		data []byte
	}{{keyFile, pair.KeyPEM()}, {certFile, pair.CertPEM()}} {
		if err := os.WriteFile(f.path+".new", f.data, 0o600); err != nil {
			p.t.Fatal(err)
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			p.t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// config writes pair as name's files and loads them with this CA's
// certificate as the peer CAs.
func (p *peerCA) config(name string, pair certs.Pair) *tls.Config {
	p.t.Helper()
	certFile, keyFile := p.write(name, pair)
	cfg, err := server.NewTLSConfig(server.TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: p.caFile(),
		ClientAuth: server.ClientAuthRequired}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// nodeTLS is node id's configuration in the cluster's CA.
func (c *testCluster) nodeTLS(id uint64) *tls.Config {
	if c.peerCA == nil {
		c.peerCA = newPeerCA(c.t)
	}
	return c.peerCA.config(NodeCommonName(id), c.peerCA.issue(cn(NodeCommonName(id))))
}

// logBuffer collects a node's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tickSome ticks only the given nodes until cond holds (a node cut off by
// its TLS is not waited for, as tickUntil waits for every live node).
func (c *testCluster) tickSome(ids []uint64, maxTicks int, what string, cond func() bool) {
	c.t.Helper()
	for i := 0; !cond(); i++ {
		if i == maxTicks {
			c.t.Fatalf("%s: not after %d ticks", what, maxTicks)
		}
		for _, id := range ids {
			c.node(id).Tick()
		}
		c.settle()
	}
}

// leaderAmong: every group has a leader in ids, agreed on by ids.
func (c *testCluster) leaderAmong(ids ...uint64) func() bool {
	return func() bool {
		for _, g := range c.groups {
			first, _ := c.node(ids[0]).Leader(g)
			for _, id := range ids {
				if l, _ := c.node(id).Leader(g); l == 0 || l != first || !slices.Contains(ids, l) {
					return false
				}
			}
		}
		return true
	}
}

// isolatedByTLS runs a cluster over TLS whose node 3 has the configuration
// odd gives it (nil: plaintext): nodes 1 and 2 elect and commit without
// it, node 3 applies nothing. It returns the cluster, its CA and each
// node's log.
func isolatedByTLS(t *testing.T, odd func(ca *peerCA) *tls.Config) (*testCluster, *peerCA, []*logBuffer) {
	logs := []*logBuffer{{}, {}, {}}
	ca := newPeerCA(t)
	c := newCluster(t, clusterOptions{nodes: 3, groups: 3, manual: true, tweak: func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs[cfg.ID-1], nil))
		cfg.ReconnectBackoffMax = 50 * time.Millisecond
		cfg.TLS = ca.config(NodeCommonName(cfg.ID), ca.issue(cn(NodeCommonName(cfg.ID))))
		if cfg.ID == 3 {
			cfg.TLS = odd(ca)
		}
	}})
	c.tickSome([]uint64{1, 2}, 100, "leaders on nodes 1 and 2", c.leaderAmong(1, 2))
	for _, g := range c.groups {
		l, _ := c.node(1).Leader(g)
		c.propose(l, g, "without 3")
	}
	c.tickSome([]uint64{1, 2}, 30, "committed on nodes 1 and 2", func() bool {
		for _, g := range c.groups {
			if len(c.appliedOf(1, g)) < 1 || len(c.appliedOf(2, g)) < 1 {
				return false
			}
		}
		return true
	})
	for _, n := range c.nodes {
		n.Tick() // node 3 too: it campaigns, and its votes are refused
	}
	c.settle()
	for _, g := range c.groups {
		if got := c.appliedOf(3, g); len(got) != 0 {
			t.Fatalf("group %d: node 3 applied %v through a refused peer link", g, got)
		}
	}
	for id := uint64(1); id <= 3; id++ {
		if st := c.node(id).Stats().Transport; st.HandshakeFailures == 0 || st.FramesReceived != 0 && id == 3 {
			t.Fatalf("node %d: %+v, want handshake failures (and no frame received on node 3)", id, st)
		}
	}
	return c, ca, logs
}

func wantLog(t *testing.T, logs *logBuffer, node int, want string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d logged no %q:\n%s", node, want, logs.String())
		}
	}
}

// TestMutualTLSCluster: three nodes over mutual TLS elect, replicate in
// order and refuse a follower's proposal; no handshake fails; a plaintext
// peer is not let in (its bytes are not a TLS handshake).
func TestMutualTLSCluster(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, groups: 10, manual: true, tls: true})
	leaders, _ := c.electAll(60)
	for _, g := range c.groups {
		c.propose(leaders[g], g, values(fmt.Sprint("g", g), 5)...)
	}
	c.tickUntil(30, "applied everywhere", c.everyGroupApplied(5))
	for _, g := range c.groups {
		for _, n := range c.nodes {
			if got := c.appliedOf(n.ID(), g); fmt.Sprint(got) != fmt.Sprint(values(fmt.Sprint("g", g), 5)) {
				t.Fatalf("group %d node %d applied %v", g, n.ID(), got)
			}
		}
	}
	for _, n := range c.nodes {
		if st := n.Stats().Transport; st.HandshakeFailures != 0 || st.BadFrames != 0 || st.OpenConns != 4 {
			t.Fatalf("node %d: %+v, want no failure and 4 connections", n.ID(), st)
		}
	}
	// The nodes' frames are inside TLS: a plaintext hello is refused.
	conn, err := net.Dial("tcp", c.node(1).Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(appendHello(nil, hello{from: 2, to: 1, cluster: 7}))
	expectClosed(t, conn, 5*time.Second)
	if st := c.node(1).Stats().Transport; st.HandshakeFailures != 1 {
		t.Fatalf("plaintext hello: %d handshake failures, want 1", st.HandshakeFailures)
	}
}

// TestTLSOtherCARefusedThenReloaded: a node whose certificate is of another
// CA is refused both ways (it is never heard, nor hears); once its files
// are replaced by a certificate of the cluster's CA it joins without a
// restart (its configuration reloads, as the Kafka listener's does).
func TestTLSOtherCARefusedThenReloaded(t *testing.T) {
	other := newPeerCA(t)
	c, ca, logs := isolatedByTLS(t, func(ca *peerCA) *tls.Config {
		// Node 3 trusts the cluster's CA but holds a certificate of another.
		cfg := ca.config("node-3", other.issue(cn("node-3")))
		return cfg
	})
	wantLog(t, logs[0], 1, "certificate signed by unknown authority")
	ca.write("node-3", ca.issue(cn("node-3")))
	c.tickUntil(40, "node 3 caught up after its certificate was renewed", func() bool {
		for _, g := range c.groups {
			if len(c.appliedOf(3, g)) != 1 {
				return false
			}
		}
		return true
	})
}

// TestTLSImpostorRefused: a node holding a valid certificate of another
// node (node 3 with node 2's) is refused by the nodes it dials (its hello
// says 3, its certificate 2) and by the nodes that dial it (they dialled
// node 3, the certificate names node 2).
func TestTLSImpostorRefused(t *testing.T) {
	_, _, logs := isolatedByTLS(t, func(ca *peerCA) *tls.Config {
		return ca.config("node-3", ca.issue(cn(NodeCommonName(2))))
	})
	wantLog(t, logs[0], 1, "hello from node 3 over a connection whose certificate names node 2")
	wantLog(t, logs[0], 1, "dialled node 3, its certificate names node 2")
}

// TestTLSOnOneSideRefused: a plaintext node among TLS nodes is refused both
// ways, each side saying which has TLS.
func TestTLSOnOneSideRefused(t *testing.T) {
	_, _, logs := isolatedByTLS(t, func(*peerCA) *tls.Config { return nil })
	wantLog(t, logs[0], 1, "TLS is configured on this node's peer link only")
	wantLog(t, logs[2], 3, "a TLS handshake on a plaintext peer listener: TLS is configured on the peer's link only")
}

// TestClusterTestsOverTLS runs the cluster tests again over mutual TLS
// (go test -raftnode.tls runs every cluster of the package so).
func TestClusterTestsOverTLS(t *testing.T) {
	if *everyClusterTLS {
		t.Skip("every test runs over TLS already")
	}
	*everyClusterTLS = true
	defer func() { *everyClusterTLS = false }()
	for _, tt := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ElectAndReplicate", TestElectAndReplicate},
		{"LeaderNodeStops", TestLeaderNodeStops},
		{"PartitionedLeader", TestPartitionedLeader},
		{"RemoveVoter", TestRemoveVoter},
		{"NodeRestart", TestNodeRestart},
		{"LinearizableAppends", TestLinearizableAppends},
		{"ThousandGroupsOneConnectionPerPair", TestThousandGroupsOneConnectionPerPair},
	} {
		t.Run(tt.name, tt.test)
	}
}

func expectClosed(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	for {
		_, err := conn.Read(make([]byte, 256))
		if err == nil {
			continue // a TLS alert, or the rest of a handshake
		}
		if isTimeout(err) {
			t.Fatalf("connection not closed by the node within %v", within)
		}
		return
	}
}

// TestPeerTLSConfigRefused: a TLS configuration without this node's
// certificate or without the peer CAs is refused by New, saying which.
func TestPeerTLSConfigRefused(t *testing.T) {
	ca := newPeerCA(t)
	certFile, keyFile := ca.write("node-1", ca.issue(cn(NodeCommonName(1))))
	noCAs, err := server.NewTLSConfig(server.TLSFiles{CertFile: certFile, KeyFile: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	withCAs := ca.config("node-1", ca.issue(cn(NodeCommonName(1))))
	noCert := withCAs.Clone()
	noCert.GetConfigForClient = nil // the outer configuration alone holds no certificate
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		cfg  *tls.Config
		want string
	}{{noCAs, "without CAs"}, {noCert, "without a certificate"}} {
		_, err := New(Config{ID: 1, Listener: ln, TLS: tt.cfg})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("New: %v, want an error %q", err, tt.want)
		}
	}
	if _, err := New(Config{ID: 1, Listener: ln, TLS: withCAs}); err != nil {
		t.Fatal(err)
	}
}
