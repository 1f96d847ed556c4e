package server

// TLS of SSL and SASL_SSL listeners: the server's certificate and the
// client CAs, read from PEM files and reloaded when the files change
// (TLSFiles, NewTLSConfig), the handshake of a connection (conn.handshake,
// in the connection's own goroutine under the frame-read deadline) and the
// principal of a client certificate (CertificatePrincipal).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// ClientAuth is Kafka's ssl.client.auth: whether a TLS listener asks
// clients for a certificate.
type ClientAuth uint8

const (
	ClientAuthNone      ClientAuth = iota // none: no client certificate asked for
	ClientAuthRequested                   // requested: verified if the client sends one
	ClientAuthRequired                    // required: the handshake fails without a valid one
)

var clientAuthNames = [...]string{ClientAuthNone: "none", ClientAuthRequested: "requested", ClientAuthRequired: "required"}

func (a ClientAuth) String() string {
	if int(a) < len(clientAuthNames) {
		return clientAuthNames[a]
	}
	return fmt.Sprintf("ClientAuth(%d)", uint8(a))
}

// ParseClientAuth parses Kafka's ssl.client.auth values none, requested
// and required (case-insensitive).
func ParseClientAuth(s string) (ClientAuth, error) {
	for i, n := range clientAuthNames {
		if strings.EqualFold(s, n) {
			return ClientAuth(i), nil
		}
	}
	return 0, fmt.Errorf("unknown client auth %q (want none, requested or required)", s)
}

func (a ClientAuth) tlsType() tls.ClientAuthType {
	switch a {
	case ClientAuthRequested:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequired:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// TLSFiles names the PEM files of a TLS listener.
type TLSFiles struct {
	CertFile string // the server's certificate chain
	KeyFile  string // its private key
	// ClientCAFile holds the CAs client certificates are verified
	// against; required unless ClientAuth is none.
	ClientCAFile string
	ClientAuth   ClientAuth
}

// NewTLSConfig returns the server TLS configuration of files: TLS 1.2 at
// least, the certificate and client CAs read now (an error if they do not
// load) and read again at a handshake after any of the files changed (size
// or modification time), so a renewed certificate is used without a
// restart. A pair that does not load is logged once and the previous one
// kept.
func NewTLSConfig(files TLSFiles, log *slog.Logger) (*tls.Config, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("TLS needs a certificate and a key file")
	}
	if files.ClientAuth != ClientAuthNone && files.ClientCAFile == "" {
		return nil, fmt.Errorf("client auth %s needs a client CA file", files.ClientAuth)
	}
	if log == nil {
		log = slog.Default()
	}
	r := &tlsReloader{files: files, log: log}
	cfg, stamp, err := r.load()
	if err != nil {
		return nil, err
	}
	r.current, r.stamp = cfg, stamp
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Each handshake asks for the configuration in force: the files
		// are checked (one stat each) and reloaded if they changed.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.config(), nil },
	}, nil
}

// tlsReloader holds the TLS configuration loaded from its files and the
// files' stamps it was loaded at.
type tlsReloader struct {
	files TLSFiles
	log   *slog.Logger

	mu      sync.Mutex
	current *tls.Config
	stamp   string // the files' sizes and times when current was loaded
	failed  string // the stamp of the last load that failed (logged once)
}

// fileStamp describes the files' sizes and modification times; it changes
// when any of them is rewritten or replaced.
func (r *tlsReloader) fileStamp() string {
	var b strings.Builder
	for _, name := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", name)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", name, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// config is the configuration for a new handshake, reloaded first if the
// files changed since it was loaded.
func (r *tlsReloader) config() *tls.Config {
	stamp := r.fileStamp()
	r.mu.Lock()
	defer r.mu.Unlock()
	if stamp == r.stamp || stamp == r.failed {
		return r.current
	}
	cfg, loaded, err := r.load()
	if err != nil {
		// Logged once per change of the files; the old pair serves on
		// (a half-written renewal must not take the listener down).
		r.failed = stamp
		r.log.Error("TLS files changed but do not load; still serving the previous certificate", "err", err,
			"cert_file", r.files.CertFile, "key_file", r.files.KeyFile, "client_ca_file", r.files.ClientCAFile)
		return r.current
	}
	r.current, r.stamp, r.failed = cfg, loaded, ""
	r.log.Info("TLS certificate reloaded", "cert_file", r.files.CertFile, "not_after", cfg.Certificates[0].Leaf.NotAfter.Format(time.RFC3339))
	return cfg
}

// load reads the files into a configuration and returns the stamp of the
// files it read (taken before reading, so a change during the read is seen
// at the next handshake).
func (r *tlsReloader) load() (*tls.Config, string, error) {
	stamp := r.fileStamp()
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("loading TLS certificate %s and key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   r.files.ClientAuth.tlsType(),
	}
	if r.files.ClientCAFile != "" {
		pem, err := os.ReadFile(r.files.ClientCAFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading the client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("client CA file %s holds no PEM certificate", r.files.ClientCAFile)
		}
		cfg.ClientCAs = pool
	}
	return cfg, stamp, nil
}

// CertificatePrincipal is the principal of a verified client certificate,
// as Kafka's default principal builder makes it (ssl.principal.mapping.rules
// DEFAULT): User: and the certificate's whole subject distinguished name in
// RFC 2253 form, such as "User:CN=alice,OU=eng,O=example".
func CertificatePrincipal(cert *x509.Certificate) Principal {
	return User(cert.Subject.String())
}

// handshake runs the TLS handshake of a connection on a TLS listener, in
// the connection's reader goroutine, bounded by FrameReadTimeout (a client
// that opens a connection and never finishes its handshake holds it no
// longer than one that never finishes a frame) and ended by a shutdown.
// On success the session gets the TLS state and, on an SSL listener, the
// principal of the client's verified certificate; a failure is logged
// (rate-limited) and the connection is to be closed.
func (c *conn) handshake(tc *tls.Conn) bool {
	timeout := c.s.cfg.FrameReadTimeout
	deadline := time.Now().Add(timeout)
	c.setReadDeadline(deadline)
	tc.SetWriteDeadline(deadline)
	ctx, cancel := context.WithDeadline(c.readCtx, deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	tc.SetWriteDeadline(time.Time{})
	if err != nil {
		if c.isStopping() {
			return false
		}
		c.cancel()
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			c.log.Debug("connection closed during the TLS handshake", "listener", c.session.Listener)
		case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
			c.s.tlsLog.warn(c.log, "closing connection: TLS handshake not done in time", "listener", c.session.Listener, "frame_read_timeout", timeout)
		default:
			c.s.tlsLog.warn(c.log, "closing connection: TLS handshake failed", "listener", c.session.Listener,
				"protocol", c.session.Protocol.String(), "err", err)
		}
		return false
	}
	st := tc.ConnectionState()
	c.session.TLS = &st
	if c.session.Protocol == SSL && len(st.PeerCertificates) > 0 {
		// Verified against the client CAs by the handshake (an
		// unverified certificate fails it, requested or required).
		c.session.SetPrincipal(CertificatePrincipal(st.PeerCertificates[0]))
	}
	return true
}

// looksLikeTLS reports whether a frame's size prefix is the start of a TLS
// record carrying a handshake (a ClientHello: content type 22, version
// 3.x), which read as a size is some 369 MB: a TLS client on a port
// without TLS.
func looksLikeTLS(prefix [4]byte) bool {
	return prefix[0] == 0x16 && prefix[1] == 0x03 && prefix[2] <= 0x04
}
