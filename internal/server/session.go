package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
)

// SecurityProtocol is a listener's security protocol, under Kafka's names
// (security.inter.broker.protocol, listener.security.protocol.map).
type SecurityProtocol uint8

const (
	Plaintext     SecurityProtocol = iota // PLAINTEXT: no TLS, no SASL
	SSL                                   // SSL: TLS, principal from the client certificate if any
	SASLPlaintext                         // SASL_PLAINTEXT: SASL over plain TCP
	SASLSSL                               // SASL_SSL: SASL over TLS
)

var protocolNames = [...]string{Plaintext: "PLAINTEXT", SSL: "SSL", SASLPlaintext: "SASL_PLAINTEXT", SASLSSL: "SASL_SSL"}

func (p SecurityProtocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return fmt.Sprintf("SecurityProtocol(%d)", uint8(p))
}

// ParseSecurityProtocol parses Kafka's name of a security protocol
// (case-insensitive).
func ParseSecurityProtocol(s string) (SecurityProtocol, error) {
	for i, n := range protocolNames {
		if strings.EqualFold(s, n) {
			return SecurityProtocol(i), nil
		}
	}
	return 0, fmt.Errorf("unknown security protocol %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", s)
}

// TLS reports whether the protocol runs over TLS.
func (p SecurityProtocol) TLS() bool { return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (p SecurityProtocol) SASL() bool { return p == SASLPlaintext || p == SASLSSL }

// Principal is who a connection acts as, in Kafka's KafkaPrincipal form
// (type "User" and a name); Anonymous before or without authentication.
type Principal struct {
	Type string
	Name string
}

// Anonymous is the principal of a connection that did not authenticate
// (a PLAINTEXT listener, or SSL without a client certificate), as Kafka's
// KafkaPrincipal.ANONYMOUS.
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User is the principal of an authenticated user name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

// String is Kafka's "User:name" form, as ACLs and logs write it.
func (p Principal) String() string { return p.Type + ":" + p.Name }

// Session is one connection's security state, shared by all its requests
// (Request.Session): which listener it came through, with which protocol,
// and the principal it has authenticated as. The principal changes only
// through SetPrincipal (SASL authentication and re-authentication).
type Session struct {
	// Listener is the name of the listener the connection came through
	// (Kafka's listener name, such as "PLAINTEXT" or "SASL_SSL").
	Listener string
	// Protocol is the listener's security protocol.
	Protocol SecurityProtocol
	// Local is the address the connection was accepted on.
	Local net.Addr
	// TLS is the connection's TLS state once the handshake is done; nil on
	// a listener without TLS.
	TLS *tls.ConnectionState

	principal atomic.Pointer[Principal]
	// sasl is the connection's SASL authentication state (sasl.go).
	sasl saslState
}

// NewSession returns a session of a connection that has not authenticated:
// its principal is Anonymous.
func NewSession(listener string, protocol SecurityProtocol, local net.Addr) *Session {
	s := &Session{Listener: listener, Protocol: protocol, Local: local}
	s.principal.Store(&Anonymous)
	return s
}

// Principal is who the connection acts as now.
func (s *Session) Principal() Principal { return *s.principal.Load() }

// SetPrincipal records the principal the connection authenticated as.
func (s *Session) SetPrincipal(p Principal) { s.principal.Store(&p) }

// Principal is who the request's connection acts as: its session's
// principal, or Anonymous for a request without a session (built in
// process, as tests do).
func (r *Request) Principal() Principal {
	if r.Session == nil {
		return Anonymous
	}
	return r.Session.Principal()
}
