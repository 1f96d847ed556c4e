package sasl

import (
	"context"
	"errors"
	"strings"
	"testing"

	ksasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
)

// mapStore is a Store in memory.
type mapStore map[string]map[Mechanism]Credential

func (s mapStore) ScramCredential(user string, m Mechanism) (Credential, bool) {
	c, ok := s[user][m]
	return c, ok
}

func newTestServer(t *testing.T, users map[string]string) *Server {
	t.Helper()
	st := mapStore{}
	for u, pw := range users {
		st[u] = map[Mechanism]Credential{}
		for _, m := range ScramMechanisms {
			c, err := NewCredential(m, pw, DefaultIterations)
			if err != nil {
				t.Fatal(err)
			}
			st[u][m] = c
		}
	}
	s, err := NewServer(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run drives a franz-go client mechanism against a new handshake of e,
// tampering with each client message through tamper (nil: none).
func run(t *testing.T, e *Exchange, mech ksasl.Mechanism, tamper func(i int, msg []byte) []byte) error {
	t.Helper()
	if err := e.Handshake(mech.Name()); err != nil {
		return err
	}
	sess, msg, err := mech.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if tamper != nil {
			msg = tamper(i, msg)
		}
		challenge, done, err := e.Step(msg)
		if err != nil {
			return err
		}
		clientDone, next, cerr := sess.Challenge(challenge)
		if cerr != nil {
			t.Fatalf("client refused the server's answer: %v", cerr)
		}
		if done {
			if !clientDone {
				t.Fatalf("server done, client not")
			}
			return nil
		}
		if i > 4 {
			t.Fatal("exchange does not end")
		}
		msg = next
	}
}

func mechanisms(user, pass string) []ksasl.Mechanism {
	return []ksasl.Mechanism{
		plain.Auth{User: user, Pass: pass}.AsMechanism(),
		kscram.Auth{User: user, Pass: pass}.AsSha256Mechanism(),
		kscram.Auth{User: user, Pass: pass}.AsSha512Mechanism(),
	}
}

func TestExchangeMechanisms(t *testing.T) {
	s := newTestServer(t, map[string]string{"alice": "alice-secret", "we,ird=": "pw"})
	for _, m := range mechanisms("alice", "alice-secret") {
		e := s.NewExchange()
		if err := run(t, e, m, nil); err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
		if e.User() != "alice" {
			t.Fatalf("%s: user %q", m.Name(), e.User())
		}
		// Re-authentication as the same user with the same mechanism.
		if err := run(t, e, m, nil); err != nil {
			t.Fatalf("%s re-authentication: %v", m.Name(), err)
		}
	}
	for _, m := range mechanisms("we,ird=", "pw") {
		if err := run(t, s.NewExchange(), m, nil); err != nil {
			t.Fatalf("%s with a name needing SCRAM escapes: %v", m.Name(), err)
		}
	}
}

func TestExchangeFailures(t *testing.T) {
	s := newTestServer(t, map[string]string{"alice": "alice-secret", "bob": "bob-secret"})
	failed := func(t *testing.T, err error, what string) {
		t.Helper()
		if !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("%s: err %v, want ErrAuthenticationFailed", what, err)
		}
	}
	for _, m := range mechanisms("alice", "wrong") {
		failed(t, run(t, s.NewExchange(), m, nil), m.Name()+" wrong password")
	}
	for _, m := range mechanisms("mallory", "x") {
		failed(t, run(t, s.NewExchange(), m, nil), m.Name()+" unknown user")
	}
	// An unknown user is not told apart at the first SCRAM step: it gets a
	// server-first message, with the same salt at every attempt.
	salts := map[string]bool{}
	for range 2 {
		e := s.NewExchange()
		e.Handshake(NameScramSHA256)
		out, _, err := e.Step([]byte("n,,n=mallory,r=abcdefgh"))
		if err != nil || !strings.HasPrefix(string(out), "r=abcdefgh") {
			t.Fatalf("unknown user's client-first: %q, %v", out, err)
		}
		salts[strings.Split(string(out), ",")[1]] = true
	}
	if len(salts) != 1 {
		t.Fatalf("an unknown user's salt changes between attempts: %v", salts)
	}
	scram256 := kscram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()
	// The client-final with another nonce.
	failed(t, run(t, s.NewExchange(), scram256, func(i int, msg []byte) []byte {
		if i == 1 {
			return []byte(strings.Replace(string(msg), ",r=", ",r=x", 1))
		}
		return msg
	}), "wrong nonce")
	// The client-final with a bad proof.
	failed(t, run(t, s.NewExchange(), scram256, func(i int, msg []byte) []byte {
		if i == 1 {
			p := strings.LastIndex(string(msg), ",p=")
			return append(append([]byte{}, msg[:p]...), ",p=AAAA"...)
		}
		return msg
	}), "bad proof")
	// Garbage client-first messages, and an authzid for another user.
	for _, g := range []string{"", ",,,", "garbage", "n", "p=tls-unique,,n=alice,r=x", "n,a=bob,n=alice,r=abc", "n,,n=,r=abc", "n,,n=alice,r=abc,tokenauth=true"} {
		e := s.NewExchange()
		e.Handshake(NameScramSHA512)
		_, _, err := e.Step([]byte(g))
		failed(t, err, "client-first "+g)
	}
	for _, g := range []string{"", "alice", "\x00alice", "bob\x00alice\x00alice-secret", "\x00\x00", "\x00alice\x00alice-secret\x00"} {
		e := s.NewExchange()
		e.Handshake(NamePlain)
		_, _, err := e.Step([]byte(g))
		failed(t, err, "PLAIN "+g)
	}
	// Re-authentication as another user.
	e := s.NewExchange()
	if err := run(t, e, plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(), nil); err != nil {
		t.Fatal(err)
	}
	failed(t, run(t, e, plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism(), nil), "re-authentication as another user")
}

func TestExchangeStates(t *testing.T) {
	s := newTestServer(t, map[string]string{"alice": "alice-secret"})
	e := s.NewExchange()
	if _, _, err := e.Step([]byte("\x00alice\x00alice-secret")); !errors.Is(err, ErrIllegalState) {
		t.Fatalf("authenticate before handshake: %v", err)
	}
	e = s.NewExchange()
	if err := e.Handshake("GSSAPI"); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Fatalf("GSSAPI: %v", err)
	}
	e = s.NewExchange()
	e.Handshake(NamePlain)
	if err := e.Handshake(NamePlain); !errors.Is(err, ErrIllegalState) {
		t.Fatalf("second handshake: %v", err)
	}
	// After a failure nothing more is accepted.
	e = s.NewExchange()
	e.Handshake(NamePlain)
	e.Step([]byte("\x00alice\x00wrong"))
	if _, _, err := e.Step([]byte("\x00alice\x00alice-secret")); !errors.Is(err, ErrIllegalState) {
		t.Fatalf("step after a failure: %v", err)
	}
	// Only the enabled mechanisms are offered.
	only, err := NewServer(mapStore{}, []string{"scram-sha-512"})
	if err != nil {
		t.Fatal(err)
	}
	if err := only.NewExchange().Handshake(NamePlain); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Fatalf("PLAIN not enabled: %v", err)
	}
	if _, err := NewServer(mapStore{}, []string{"PLAIN", "GSSAPI"}); err == nil {
		t.Fatal("GSSAPI accepted as a mechanism")
	}
}

func TestCredentialParameters(t *testing.T) {
	sp := make([]byte, 32)
	for _, tc := range []struct {
		m     Mechanism
		iters int32
		salt  []byte
		sp    []byte
		ok    bool
	}{
		{ScramSHA256, 4096, []byte("s"), sp, true},
		{ScramSHA256, 4095, []byte("s"), sp, false},
		{ScramSHA256, 16385, []byte("s"), sp, false},
		{ScramSHA256, 4096, nil, sp, false},
		{ScramSHA512, 4096, []byte("s"), sp, false}, // 32 bytes is not a SHA-512 key
		{3, 4096, []byte("s"), sp, false},
	} {
		if err := CheckParameters(tc.m, tc.iters, tc.salt, tc.sp); (err == nil) != tc.ok {
			t.Errorf("%v %d salt %d: err %v", tc.m, tc.iters, len(tc.salt), err)
		}
	}
	c, _ := NewCredential(ScramSHA256, "pw", DefaultIterations)
	if len(c.Salt) < 16 || !c.VerifyPassword(ScramSHA256, "pw") || c.VerifyPassword(ScramSHA256, "pW") {
		t.Fatal("credential does not verify its own password only")
	}
}
