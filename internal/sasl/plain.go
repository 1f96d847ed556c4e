package sasl

import "bytes"

// plainConversation is PLAIN (RFC 4616): one message
// [authzid] NUL authcid NUL passwd, checked against the SCRAM credentials.
type plainConversation struct {
	server *Server
}

func (p *plainConversation) step(token []byte) ([]byte, bool, string, error) {
	parts := bytes.Split(token, []byte{0})
	if len(parts) != 3 {
		return nil, false, "", authFailed("PLAIN message with %d NUL-separated fields, want 3 (authzid, authcid, password)", len(parts))
	}
	authzid, user, password := string(parts[0]), string(parts[1]), string(parts[2])
	switch {
	case user == "":
		return nil, false, "", authFailed("PLAIN: username not specified")
	case password == "":
		return nil, false, "", authFailed("PLAIN: password not specified")
	case authzid != "" && authzid != user:
		return nil, false, "", authFailed("PLAIN: user %q asked for another authorization id %q", user, authzid)
	}
	// The strongest credential the user has; an unknown user is checked
	// against a stand-in, which costs the same time and always fails.
	for _, m := range []Mechanism{ScramSHA512, ScramSHA256} {
		if c, ok := p.server.store.ScramCredential(user, m); ok {
			if !c.VerifyPassword(m, password) {
				return nil, false, "", authFailed("PLAIN: wrong password for user %q", user)
			}
			return nil, true, user, nil
		}
	}
	p.server.unknownUser(user, ScramSHA512).VerifyPassword(ScramSHA512, password)
	return nil, false, "", authFailed("PLAIN: unknown user %q", user)
}
