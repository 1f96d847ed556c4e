package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL gating (KIP-43, KIP-152, KIP-368), the server's part: what a
// connection of a SASL_PLAINTEXT or SASL_SSL listener may send before it
// has authenticated, the bare tokens that follow a SaslHandshake v0, and
// the session lifetime. The exchange itself (mechanisms, credentials) is
// the SASL handlers' (internal/api, internal/sasl); they record its outcome
// on the Session.
//
// On a SASL listener, until the connection has authenticated:
//   - only ApiVersions, SaslHandshake and SaslAuthenticate are served; any
//     other key closes the connection (as Kafka's SaslServerAuthenticator
//     does: IllegalSaslStateException, no answer);
//   - a frame larger than MaxSASLReceiveBytes closes the connection
//     (Kafka's sasl.server.max.receive.size);
//   - each request is handled before the next frame is read, so a
//     handshake's outcome (a bare token next, or a failure) decides how
//     the next frame is read. SaslHandshake and SaslAuthenticate are
//     always handled so, re-authentications included.
//
// Once authenticated with a session lifetime (SaslAuthenticate v1+ with
// connections.max.reauth.ms), a request other than SaslHandshake or
// SaslAuthenticate that arrives after the session expired closes the
// connection: the client had to re-authenticate first (Kafka's
// behaviour).

// DefaultMaxSASLReceiveBytes is Kafka's sasl.server.max.receive.size.
const DefaultMaxSASLReceiveBytes = 512 << 10

// API keys the gating names.
const (
	keySaslHandshake    = 17
	keyApiVersions      = 18
	keySaslAuthenticate = 36
)

// saslState is a session's authentication state. The reader reads it for
// every frame; the SASL handlers write it.
type saslState struct {
	authenticated atomic.Bool
	// rawTokens: the next frame is a bare SASL token (after SaslHandshake
	// v0), not a Kafka request.
	rawTokens atomic.Bool
	// expiryNanos is when the authenticated session ends (UnixNano); 0:
	// never.
	expiryNanos atomic.Int64

	mu       sync.Mutex
	exchange any // the SASL handlers' per-connection state
}

// Authenticated reports whether the connection has authenticated (SASL);
// always false on a listener without SASL.
func (s *Session) Authenticated() bool { return s.sasl.authenticated.Load() }

// Authenticate records a successful SASL authentication (or
// re-authentication) as p, valid until expiry (zero: no limit).
func (s *Session) Authenticate(p Principal, expiry time.Time) {
	s.SetPrincipal(p)
	var nanos int64
	if !expiry.IsZero() {
		nanos = expiry.UnixNano()
	}
	s.sasl.expiryNanos.Store(nanos)
	s.sasl.authenticated.Store(true)
}

// ExpectRawSASLTokens tells the reader whether the next frames are bare
// SASL tokens (true after a SaslHandshake v0, until the exchange ends).
func (s *Session) ExpectRawSASLTokens(raw bool) { s.sasl.rawTokens.Store(raw) }

// SASLExchange returns the connection's SASL exchange, made by create the
// first time.
func (s *Session) SASLExchange(create func() any) any {
	s.sasl.mu.Lock()
	defer s.sasl.mu.Unlock()
	if s.sasl.exchange == nil {
		s.sasl.exchange = create()
	}
	return s.sasl.exchange
}

// saslRefusal returns why a request of key must close the connection now
// ("" if it may be served).
func (s *Session) saslRefusal(key int16, now time.Time) string {
	if !s.Protocol.SASL() {
		return ""
	}
	if !s.Authenticated() {
		if key == keyApiVersions || key == keySaslHandshake || key == keySaslAuthenticate {
			return ""
		}
		return "request before SASL authentication"
	}
	if exp := s.sasl.expiryNanos.Load(); exp != 0 && now.UnixNano() >= exp && key != keySaslHandshake && key != keySaslAuthenticate {
		return "SASL session expired without re-authentication (connections.max.reauth.ms)"
	}
	return ""
}

// saslSerial reports whether the reader must wait for a request of key to
// be handled before reading the next frame.
func (s *Session) saslSerial(key int16) bool {
	return s.Protocol.SASL() && (key == keySaslHandshake || key == keySaslAuthenticate || !s.Authenticated())
}

// saslFrameLimit is the largest frame the connection may send now: the
// SASL bound before authentication, else max.
func (s *Session) saslFrameLimit(maxFrame int64, saslMax int32) int64 {
	if s.Protocol.SASL() && !s.Authenticated() {
		return min(maxFrame, int64(saslMax))
	}
	return maxFrame
}

// rawSASLRequest makes a bare SASL token (after SaslHandshake v0) into a
// SaslAuthenticate v0 request marked RawSASL: the handler steps the
// exchange with it, and the writer sends the answer as a bare token too.
func rawSASLRequest(token []byte) *Request {
	body := &kmsg.SASLAuthenticateRequest{SASLAuthBytes: token}
	return &Request{Key: keySaslAuthenticate, Body: body, RawSASL: true}
}
