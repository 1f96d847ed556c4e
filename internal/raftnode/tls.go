package raftnode

// Mutual TLS on the peer link (Config.TLS). Both ends of a connection are
// nodes, so both present a certificate and both verify the other's against
// the peer CAs (Config.TLS.ClientCAs), TLS 1.3 only. A certificate proves
// which node it is by its subject common name, node-<id> (NodeCommonName):
// the acceptor refuses a hello whose sender is not the node its dialer's
// certificate names, and the dialer refuses an acceptor whose certificate
// does not name the node it dialled.
//
// Why the CN and not a subject alternative name: the SANs of a node's
// certificate say where it is reached (the DNS names and addresses of its
// listeners, which the Kafka listener's certificate already carries and
// clients verify), the subject says who it is. CockroachDB puts a node's
// identity in the CN of its node certificate (CN=node) and its addresses in
// the SANs; Kafka's SSL principal is the subject (User:CN=…), and every CA
// tool (openssl req -subj, cfssl, cert-manager's commonName) sets a CN
// without extensions. A subject with more than one CN is refused, so no
// certificate can name two nodes. The peer's host name is not checked: the
// node id, which the hello names and raft trusts, is what is verified, and
// a node keeps it when its address changes (etcd checks host names of peer
// certificates only when --peer-cert-allowed-hostname asks it to).

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// NodeCommonName is the subject common name of node id's peer certificate.
func NodeCommonName(id uint64) string { return "node-" + strconv.FormatUint(id, 10) }

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// certificateNode is the node id a peer certificate's subject names.
func certificateNode(cert *x509.Certificate) (uint64, error) {
	var names []string
	for _, a := range cert.Subject.Names {
		if a.Type.Equal(oidCommonName) {
			s, _ := a.Value.(string)
			names = append(names, s)
		}
	}
	if len(names) != 1 {
		return 0, fmt.Errorf("certificate subject %q has %d common names, want one CN=node-<id>", cert.Subject, len(names))
	}
	digits, ok := strings.CutPrefix(names[0], "node-")
	id, err := strconv.ParseUint(digits, 10, 64)
	if !ok || err != nil || id == 0 || NodeCommonName(id) != names[0] {
		return 0, fmt.Errorf("certificate subject %q does not name a node (CN=node-<id>, id ≥ 1)", cert.Subject)
	}
	return id, nil
}

// peerTLSBase is the configuration in force: cfg itself, or what its
// GetConfigForClient returns (server.NewTLSConfig's reloader), with the
// certificate and CAs the peer link needs.
func peerTLSBase(cfg *tls.Config) (*tls.Config, error) {
	if cfg.GetConfigForClient != nil {
		c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			return nil, fmt.Errorf("raftnode: peer TLS configuration: %w", err)
		}
		if c != nil {
			cfg = c
		}
	}
	switch {
	case len(cfg.Certificates) == 0:
		return nil, errors.New("raftnode: peer TLS without a certificate (this node's, presented to its peers both ways)")
	case cfg.ClientCAs == nil:
		return nil, errors.New("raftnode: peer TLS without CAs (ClientCAs: what peers' certificates are verified against, both ways)")
	}
	return cfg, nil
}

// serverTLS is the acceptor's side: a certificate of the peer CAs is
// required of the dialer, for client auth (Go's check) and for server auth
// too (ours): a node's certificate serves both ways, so a Kafka client's
// certificate of the same CA is no peer's, whatever it names.
func serverTLS(base *tls.Config) *tls.Config {
	roots := base.ClientCAs
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           base.Certificates[:1],
		ClientCAs:              roots,
		ClientAuth:             tls.RequireAndVerifyClientCert,
		SessionTicketsDisabled: true, // dialers keep no session cache
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPeer(cs, roots)
			return err
		},
	}
}

// verifyPeer verifies a peer's certificate chain against roots for server
// auth and returns the node it names.
func verifyPeer(cs tls.ConnectionState, roots *x509.CertPool) (uint64, error) {
	if len(cs.PeerCertificates) == 0 {
		return 0, errors.New("the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return 0, fmt.Errorf("peer certificate %q: %w", leaf.Subject, err)
	}
	return certificateNode(leaf)
}

// clientTLS is the dialer's side: the acceptor's certificate is verified
// against the peer CAs (for server auth) and must name node to. The host
// name is not (see the package comment of this file), hence Go's own
// verification is replaced by VerifyConnection's.
func clientTLS(base *tls.Config, to uint64) *tls.Config {
	cert, roots := &base.Certificates[0], base.ClientCAs
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Sent whichever CAs the acceptor names, so that an acceptor of
		// another CA refuses it in its logs instead of seeing none.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil },
		InsecureSkipVerify:   true, // verified below, without the host name
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyPeer(cs, roots)
			if err == nil && id != to {
				err = fmt.Errorf("dialled node %d, its certificate names node %d", to, id)
			}
			return err
		},
	}
}

// clientHandshake runs the dialer's TLS handshake on c (a connection whose
// deadline is set), returning the TLS connection.
func (t *transport) clientHandshake(c net.Conn, to uint64) (net.Conn, error) {
	base, err := peerTLSBase(t.cfg.TLS)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, clientTLS(base, to))
	if err := tc.Handshake(); err != nil {
		t.handshakeFailures.Add(1)
		t.logLimited(&t.dialLog, "raft peer TLS handshake failed; redialling", "peer", to, "addr", c.RemoteAddr().String(), "err", err,
			"hint", "the peer needs TLS on its peer link and a certificate of this node's peer CAs naming CN="+NodeCommonName(to))
		return nil, fmt.Errorf("TLS handshake with node %d: %w", to, err)
	}
	return tc, nil
}

// serverHandshake runs the acceptor's TLS handshake on c, whose first four
// bytes were read into prefix, and returns the connection to read frames
// from and the node the dialer's certificate names (0 when plaintext).
func (t *transport) serverHandshake(c net.Conn, prefix []byte) (net.Conn, uint64, error) {
	pc := &prefixConn{Conn: c, prefix: prefix}
	tlsHello := looksLikeTLS(prefix)
	if t.cfg.TLS == nil {
		if tlsHello {
			t.handshakeFailures.Add(1)
			return nil, 0, frameErrorf("a TLS handshake on a plaintext peer listener: TLS is configured on the peer's link only")
		}
		return pc, 0, nil
	}
	if !tlsHello {
		t.handshakeFailures.Add(1)
		return nil, 0, frameErrorf("plaintext (%x) on a TLS peer listener: TLS is configured on this node's peer link only, or this is not a peer", prefix)
	}
	base, err := peerTLSBase(t.cfg.TLS)
	if err != nil {
		return nil, 0, err
	}
	tc := tls.Server(pc, serverTLS(base))
	if err := tc.Handshake(); err != nil {
		t.handshakeFailures.Add(1)
		return nil, 0, fmt.Errorf("TLS handshake: %w", err)
	}
	id, err := certificateNode(tc.ConnectionState().PeerCertificates[0])
	if err != nil {
		t.handshakeFailures.Add(1)
		return nil, 0, err
	}
	return tc, id, nil
}

// looksLikeTLS reports whether a connection's first bytes are a TLS record
// carrying a handshake (content type 22, version 3.x), which no frame of
// ours starts with (a hello's length prefix is 0x0000001e).
func looksLikeTLS(prefix []byte) bool {
	return len(prefix) >= 3 && prefix[0] == 0x16 && prefix[1] == 0x03 && prefix[2] <= 0x04
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// rawConn is the TCP connection under c: what the transport tracks and
// closes. Closing a tls.Conn sends a close_notify alert, which blocks (up
// to 5 s) on a peer that stopped reading; closing the socket does not.
func rawConn(c net.Conn) net.Conn {
	for {
		switch tc := c.(type) {
		case *tls.Conn:
			c = tc.NetConn()
		case *prefixConn:
			c = tc.Conn
		default:
			return c
		}
	}
}

// logLimiter lets a burst of log lines of one kind through, then one a
// second, so that a flood of bad connections cannot flood the log.
type logLimiter struct {
	tokens     float64
	last       time.Time
	suppressed int
}

const logBurst = 10

// allow says whether a line may be logged now, and how many were
// suppressed since the last one. Called under the transport's logMu.
func (l *logLimiter) allow(now time.Time) (suppressed int, ok bool) {
	if l.last.IsZero() {
		l.tokens = logBurst
	} else {
		l.tokens = min(logBurst, l.tokens+now.Sub(l.last).Seconds())
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}
