// Package sasl is the broker side of SASL authentication (KIP-43,
// KIP-152, KIP-368): the mechanisms PLAIN and SCRAM-SHA-256/512 (RFC 5802,
// RFC 7677), the salted and iterated credentials they verify, and the
// per-connection exchange (Exchange) that the SaslHandshake and
// SaslAuthenticate handlers drive. It does no I/O and keeps no clock: the
// handlers (internal/api) frame the tokens, apply Kafka's delays and
// session lifetimes, and the server (internal/server) gates what a
// connection may send before it has authenticated.
//
// A credential is what Kafka (and RFC 5802) store: a random salt, an
// iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
// ServerKey = HMAC(SaltedPassword, "Server Key"), never the password nor
// the salted password. PLAIN is verified against the same credentials
// (SaltedPassword derived from the given password with the stored salt and
// iterations, StoredKey compared in constant time), as Redpanda does, so
// one store serves every mechanism and no plaintext password exists
// anywhere.
package sasl

import (
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"strings"
)

// Mechanism is a SCRAM mechanism, numbered as Kafka's ScramMechanism (the
// int8 of DescribeUserScramCredentials, AlterUserScramCredentials and
// KRaft's UserScramCredentialRecord).
type Mechanism int8

const (
	ScramSHA256 Mechanism = 1 // SCRAM-SHA-256
	ScramSHA512 Mechanism = 2 // SCRAM-SHA-512
)

// ScramMechanisms are the SCRAM mechanisms, in Kafka's order.
var ScramMechanisms = []Mechanism{ScramSHA256, ScramSHA512}

// Names of the mechanisms, as clients ask for them in SaslHandshake
// (sasl.mechanism) and as --sasl-enabled-mechanisms lists them.
const (
	NamePlain       = "PLAIN"
	NameScramSHA256 = "SCRAM-SHA-256"
	NameScramSHA512 = "SCRAM-SHA-512"
)

// DefaultMechanisms are the mechanisms enabled by default
// (--sasl-enabled-mechanisms): all that are implemented.
var DefaultMechanisms = []string{NameScramSHA256, NameScramSHA512, NamePlain}

// Iteration bounds of a SCRAM credential: Kafka's ScramMechanism
// minIterations (4096 for both) and the 16384 its AlterUserScramCredentials
// accepts at most; DefaultIterations is Kafka's and kadm's default.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 4096
)

// SaltBytes is the length of the salts this package generates (RFC 5802
// asks for a random salt; Kafka's ScramFormatter uses a 128-bit one at
// least, kadm 24 bytes).
const SaltBytes = 32

func (m Mechanism) String() string {
	switch m {
	case ScramSHA256:
		return NameScramSHA256
	case ScramSHA512:
		return NameScramSHA512
	}
	return fmt.Sprintf("UNKNOWN(%d)", int8(m))
}

// Valid reports whether m is a SCRAM mechanism this package implements.
func (m Mechanism) Valid() bool { return m == ScramSHA256 || m == ScramSHA512 }

// newHash is the mechanism's hash function.
func (m Mechanism) newHash() func() hash.Hash {
	if m == ScramSHA512 {
		return sha512.New
	}
	return sha256.New
}

// KeyBytes is the length of the mechanism's keys and salted password.
func (m Mechanism) KeyBytes() int { return m.newHash()().Size() }

// ParseMechanism parses a SCRAM mechanism's name (case-insensitive).
func ParseMechanism(name string) (Mechanism, error) {
	for _, m := range ScramMechanisms {
		if strings.EqualFold(name, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown SCRAM mechanism %q (want %s or %s)", name, NameScramSHA256, NameScramSHA512)
}

// ParseMechanisms parses a list of mechanism names (--sasl-enabled-mechanisms)
// into Kafka's canonical names, refusing unknown and repeated ones and an
// empty list.
func ParseMechanisms(names []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.ToUpper(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		switch n {
		case NamePlain, NameScramSHA256, NameScramSHA512:
		default:
			return nil, fmt.Errorf("unsupported SASL mechanism %q (this broker implements %s)", n, strings.Join(DefaultMechanisms, ", "))
		}
		if seen[n] {
			return nil, fmt.Errorf("SASL mechanism %s listed twice", n)
		}
		seen[n] = true
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no SASL mechanism enabled (want some of %s)", strings.Join(DefaultMechanisms, ", "))
	}
	return out, nil
}
