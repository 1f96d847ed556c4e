package sasl

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Errors of an exchange; internal/api maps them to Kafka's codes.
var (
	// ErrIllegalState is a SASL request out of turn: a SaslAuthenticate
	// before a SaslHandshake, a second SaslHandshake before the first
	// finished, anything after a failure (ILLEGAL_SASL_STATE).
	ErrIllegalState = errors.New("illegal SASL state")
	// ErrUnsupportedMechanism is a SaslHandshake for a mechanism that is
	// not enabled (UNSUPPORTED_SASL_MECHANISM).
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
	// ErrAuthenticationFailed is a failed authentication
	// (SASL_AUTHENTICATION_FAILED). Its wrapping error says why, for the
	// broker's log; clients get FailureMessage only.
	ErrAuthenticationFailed = errors.New("SASL authentication failed")
)

// FailureMessage is what a client is told when its authentication fails,
// whatever the reason: an unknown user, a wrong password, a bad proof all
// read the same, so the answer does not tell whether a user exists.
func FailureMessage(mechanism string) string {
	return "Authentication failed: invalid credentials with SASL mechanism " + mechanism
}

func authFailed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAuthenticationFailed, fmt.Sprintf(format, args...))
}

// Store is where an exchange finds credentials (internal/meta's catalogue).
type Store interface {
	// ScramCredential returns user's credential for m, if it has one.
	ScramCredential(user string, m Mechanism) (Credential, bool)
}

// Server holds what every connection's exchange shares: the enabled
// mechanisms, the credential store, and the key of the stand-in
// credentials of unknown users.
type Server struct {
	store      Store
	mechanisms []string
	// unknownUserKey derives the stand-in credential of a user that does
	// not exist (see unknownUser), fixed for the process.
	unknownUserKey [32]byte
}

// NewServer returns a server of the named mechanisms (canonical names,
// as ParseMechanisms returns them; nil: DefaultMechanisms).
func NewServer(store Store, mechanisms []string) (*Server, error) {
	if mechanisms == nil {
		mechanisms = DefaultMechanisms
	}
	ms, err := ParseMechanisms(mechanisms)
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, mechanisms: ms}
	if _, err := rand.Read(s.unknownUserKey[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// Mechanisms are the enabled mechanisms, as SaslHandshake lists them.
func (s *Server) Mechanisms() []string { return slices.Clone(s.mechanisms) }

// unknownUser is the stand-in credential of a user without one: a salt
// that is the same at every attempt for the same name (so that a client
// cannot tell an unknown user by a changing salt) and keys no password
// matches. Verifying against it costs what a real verification costs.
func (s *Server) unknownUser(user string, m Mechanism) Credential {
	derive := func(label string) []byte {
		mac := hmac.New(sha256.New, s.unknownUserKey[:])
		mac.Write([]byte{byte(m)})
		mac.Write([]byte(label))
		mac.Write([]byte(user))
		return mac.Sum(nil)
	}
	keys := make([]byte, 0, 2*m.KeyBytes())
	for i := 0; len(keys) < 2*m.KeyBytes(); i++ {
		keys = append(keys, derive(fmt.Sprintf("keys%d", i))...)
	}
	return Credential{
		Salt:       derive("salt")[:SaltBytes],
		StoredKey:  keys[:m.KeyBytes()],
		ServerKey:  keys[m.KeyBytes() : 2*m.KeyBytes()],
		Iterations: DefaultIterations,
	}
}

// lookup returns user's credential for m, or the stand-in (found false).
func (s *Server) lookup(user string, m Mechanism) (Credential, bool) {
	if c, ok := s.store.ScramCredential(user, m); ok {
		return c, true
	}
	return s.unknownUser(user, m), false
}

type exchangeState uint8

const (
	stateStart         exchangeState = iota // no handshake yet
	stateHandshaken                         // mechanism chosen, no token yet
	stateInProgress                         // tokens exchanged, more expected
	stateAuthenticated                      // done; a new handshake re-authenticates
	stateFailed                             // nothing more is accepted
)

// Exchange is one connection's SASL authentication: the handshake, the
// mechanism's conversation, and re-authentications (KIP-368). It is a
// state machine without I/O; its caller serialises the calls (the server
// handles a connection's SASL requests one at a time).
type Exchange struct {
	server    *Server
	state     exchangeState
	mechanism string
	conv      conversation
	// user is the authenticated user (empty before the first success); a
	// re-authentication must keep it and the mechanism.
	user          string
	userMechanism string
}

// NewExchange starts a connection's exchange.
func (s *Server) NewExchange() *Exchange { return &Exchange{server: s} }

// Mechanisms are the enabled mechanisms.
func (e *Exchange) Mechanisms() []string { return e.server.Mechanisms() }

// Handshake chooses the mechanism (SaslHandshake). On an authenticated
// connection it begins a re-authentication. A mechanism that is not
// enabled fails the exchange with ErrUnsupportedMechanism; a handshake out
// of turn with ErrIllegalState.
func (e *Exchange) Handshake(mechanism string) error {
	if e.state != stateStart && e.state != stateAuthenticated {
		e.state = stateFailed
		return fmt.Errorf("%w: SaslHandshake after another SaslHandshake that did not complete", ErrIllegalState)
	}
	if !slices.Contains(e.server.mechanisms, mechanism) {
		e.state = stateFailed
		return fmt.Errorf("%w: %q (enabled: %s)", ErrUnsupportedMechanism, mechanism, strings.Join(e.server.mechanisms, ", "))
	}
	e.mechanism = mechanism
	e.state = stateHandshaken
	if mechanism == NamePlain {
		e.conv = &plainConversation{server: e.server}
	} else {
		m, _ := ParseMechanism(mechanism)
		e.conv = newScramConversation(e.server, m)
	}
	return nil
}

// Mechanism is the mechanism of the last handshake.
func (e *Exchange) Mechanism() string { return e.mechanism }

// User is the authenticated user ("" before the first success).
func (e *Exchange) User() string { return e.user }

// Reauthenticating reports whether a re-authentication is under way (a
// handshake on an authenticated connection, not yet completed).
func (e *Exchange) Reauthenticating() bool {
	return e.user != "" && (e.state == stateHandshaken || e.state == stateInProgress)
}

// Step takes the client's next token (SaslAuthenticate, or a bare token
// after a SaslHandshake v0) and returns the server's answer; done is true
// once the client has authenticated as User. An error fails the exchange:
// ErrIllegalState for a token out of turn, ErrAuthenticationFailed (with
// the reason) for anything else.
func (e *Exchange) Step(token []byte) (challenge []byte, done bool, err error) {
	if e.state != stateHandshaken && e.state != stateInProgress {
		was := e.state
		e.state = stateFailed
		if was == stateFailed {
			return nil, false, fmt.Errorf("%w: the authentication already failed", ErrIllegalState)
		}
		return nil, false, fmt.Errorf("%w: SaslAuthenticate without a SaslHandshake before it", ErrIllegalState)
	}
	challenge, done, user, err := e.conv.step(token)
	if err != nil {
		e.state = stateFailed
		return nil, false, err
	}
	if !done {
		e.state = stateInProgress
		return challenge, false, nil
	}
	if e.user != "" && (user != e.user || e.mechanism != e.userMechanism) {
		e.state = stateFailed
		return nil, false, authFailed("re-authentication as %q with %s, the connection authenticated as %q with %s: the principal and mechanism may not change",
			user, e.mechanism, e.user, e.userMechanism)
	}
	e.user, e.userMechanism = user, e.mechanism
	e.state = stateAuthenticated
	e.conv = nil
	return challenge, true, nil
}

// conversation is one mechanism's side of an authentication.
type conversation interface {
	step(token []byte) (challenge []byte, done bool, user string, err error)
}
