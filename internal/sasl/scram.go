package sasl

import (
	"strings"

	"github.com/xdg-go/scram"
)

// scramConversation is SCRAM-SHA-256/512 (RFC 5802, RFC 7677) on the
// server conversation of github.com/xdg-go/scram: client-first →
// server-first (nonce, salt, iterations), client-final (proof) →
// server-final (verifier). An unknown user gets the stand-in credential,
// so the exchange fails at the proof, as a wrong password does.
type scramConversation struct {
	server *Server
	m      Mechanism
	conv   *scram.ServerConversation
	user   string
	found  bool
}

var scramNameDecoder = strings.NewReplacer("=2C", ",", "=3D", "=")

func newScramConversation(s *Server, m Mechanism) *scramConversation {
	c := &scramConversation{server: s, m: m}
	hash := scram.SHA256
	if m == ScramSHA512 {
		hash = scram.SHA512
	}
	srv, err := hash.NewServer(func(saslName string) (scram.StoredCredentials, error) {
		// RFC 5802 5.1: ',' and '=' in a name are sent as =2C and =3D.
		c.user = scramNameDecoder.Replace(saslName)
		cred, found := s.lookup(c.user, m)
		c.found = found
		return scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(cred.Salt), Iters: int(cred.Iterations)},
			StoredKey:  cred.StoredKey,
			ServerKey:  cred.ServerKey,
		}, nil
	})
	if err != nil {
		panic("sasl: scram.NewServer: " + err.Error()) // it never fails
	}
	c.conv = srv.NewConversation()
	return c
}

func (c *scramConversation) step(token []byte) ([]byte, bool, string, error) {
	msg := string(token)
	first := c.user == ""
	if first {
		// The library indexes the GS2 flag without checking it is there.
		if msg == "" || !strings.ContainsRune("nyp", rune(msg[0])) {
			return nil, false, "", authFailed("%s: the client-first message does not start with a GS2 header", c.m)
		}
	}
	out, err := c.conv.Step(msg)
	if err != nil {
		return nil, false, "", authFailed("%s: user %q: %v", c.m, c.user, err)
	}
	if first {
		if c.user == "" {
			return nil, false, "", authFailed("%s: empty user name", c.m)
		}
		if z := c.conv.AuthzID(); z != "" && scramNameDecoder.Replace(z) != c.user {
			return nil, false, "", authFailed("%s: user %q asked for another authorization id %q", c.m, c.user, z)
		}
		if ext := strings.Split(msg, ","); len(ext) > 4 && slicesContainsFold(ext[4:], "tokenauth=true") {
			return nil, false, "", authFailed("%s: delegation tokens are not supported", c.m)
		}
		return []byte(out), false, "", nil
	}
	if !c.conv.Valid() {
		return nil, false, "", authFailed("%s: user %q: invalid proof", c.m, c.user)
	}
	if !c.found {
		// Unreachable (no proof matches a stand-in), but never let one in.
		return nil, false, "", authFailed("%s: unknown user %q", c.m, c.user)
	}
	return []byte(out), true, c.user, nil
}

func slicesContainsFold(ss []string, s string) bool {
	for _, x := range ss {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
