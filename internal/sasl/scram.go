package sasl

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// scramConversation is the server side of SCRAM-SHA-256/512 (RFC 5802,
// RFC 7677), as Kafka's ScramSaslServer: client-first → server-first
// (nonce, salt, iterations), client-final (proof) → server-final
// (verifier). An unknown user gets the stand-in credential, so the
// exchange fails at the proof, as a wrong password does.
//
// It is written here rather than on github.com/xdg-go/scram's server
// because Kafka accepts a client-final nonce that ends with the nonce it
// sent (ScramSaslServer: nonce().endsWith), and librdkafka (2.0.2, so
// kcat and confluent-kafka-python) relies on it: its client-final repeats
// its own nonce before the server's (c-nonce + c-nonce + s-nonce). The
// proof covers the client-final message as sent, so the leniency admits
// no one without the password.
type scramConversation struct {
	server *Server
	m      Mechanism
	first  bool // no client-first yet

	user        string
	found       bool
	cred        Credential
	gs2Header   string // "n,," or "y,," or with a=authzid: what c= must carry
	nonce       string // client nonce + server nonce
	clientFirst string // client-first-message-bare
	serverFirst string
}

// serverNonceBytes is the randomness of the server's part of the nonce.
const serverNonceBytes = 24

var scramNameDecoder = strings.NewReplacer("=2C", ",", "=3D", "=")

func newScramConversation(s *Server, m Mechanism) *scramConversation {
	return &scramConversation{server: s, m: m, first: true}
}

// decodeSaslName undoes RFC 5802's escapes (',' as =2C, '=' as =3D); any
// other '=' is malformed.
func decodeSaslName(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && !strings.HasPrefix(s[i:], "=2C") && !strings.HasPrefix(s[i:], "=3D") {
			return "", false
		}
	}
	return scramNameDecoder.Replace(s), true
}

func (c *scramConversation) step(token []byte) ([]byte, bool, string, error) {
	if c.first {
		c.first = false
		out, err := c.clientFirstMessage(string(token))
		return out, false, "", err
	}
	out, err := c.clientFinalMessage(string(token))
	if err != nil {
		return nil, false, "", err
	}
	return out, true, c.user, nil
}

// clientFirstMessage takes gs2-header client-first-message-bare:
// "n,[a=authzid]," then "n=user,r=c-nonce[,extensions]".
func (c *scramConversation) clientFirstMessage(msg string) ([]byte, error) {
	fail := func(format string, args ...any) ([]byte, error) {
		return nil, authFailed("%s: client-first: "+format, append([]any{c.m}, args...)...)
	}
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return fail("no GS2 header")
	}
	switch {
	case flag == "n" || flag == "y":
	case strings.HasPrefix(flag, "p="):
		return fail("channel binding is not supported")
	default:
		return fail("GS2 flag %q", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return fail("no GS2 header")
	}
	c.gs2Header = flag + "," + authz + ","
	fields := strings.Split(bare, ",")
	if strings.HasPrefix(fields[0], "m=") {
		return fail("mandatory extensions are not supported")
	}
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "n=") || !strings.HasPrefix(fields[1], "r=") {
		return fail("want n=user,r=nonce")
	}
	user, ok := decodeSaslName(fields[0][2:])
	if !ok || user == "" {
		return fail("malformed user name %q", fields[0][2:])
	}
	c.user = user
	if authz != "" {
		z, ok := decodeSaslName(strings.TrimPrefix(authz, "a="))
		if !strings.HasPrefix(authz, "a=") || !ok || z != user {
			return fail("user %q asked for another authorization id %q", user, authz)
		}
	}
	clientNonce := fields[1][2:]
	if clientNonce == "" || strings.ContainsFunc(clientNonce, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return fail("user %q: empty or non-printable nonce", user)
	}
	for _, ext := range fields[2:] {
		if strings.EqualFold(ext, "tokenauth=true") {
			return fail("user %q: delegation tokens are not supported", user)
		}
	}
	c.cred, c.found = c.server.lookup(user, c.m)
	var random [serverNonceBytes]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAuthenticationFailed, err)
	}
	c.nonce = clientNonce + base64.RawURLEncoding.EncodeToString(random[:])
	c.clientFirst = bare
	c.serverFirst = "r=" + c.nonce + ",s=" + base64.StdEncoding.EncodeToString(c.cred.Salt) + ",i=" + strconv.Itoa(int(c.cred.Iterations))
	return []byte(c.serverFirst), nil
}

// clientFinalMessage takes "c=<gs2 header>,r=nonce[,extensions],p=proof"
// and answers "v=<server signature>".
func (c *scramConversation) clientFinalMessage(msg string) ([]byte, error) {
	fail := func(format string, args ...any) ([]byte, error) {
		return nil, authFailed("%s: user %q: client-final: "+format, append([]any{c.m, c.user}, args...)...)
	}
	cut := strings.LastIndex(msg, ",p=")
	if cut < 0 {
		return fail("no proof")
	}
	withoutProof := msg[:cut]
	proof, err := base64.StdEncoding.DecodeString(msg[cut+len(",p="):])
	if err != nil || len(proof) != c.m.KeyBytes() {
		return fail("malformed proof")
	}
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "c=") || !strings.HasPrefix(fields[1], "r=") {
		return fail("want c=binding,r=nonce,...,p=proof")
	}
	if binding, err := base64.StdEncoding.DecodeString(fields[0][2:]); err != nil || string(binding) != c.gs2Header {
		return fail("channel binding does not match the GS2 header")
	}
	if !strings.HasSuffix(fields[1][2:], c.nonce) {
		return fail("nonce does not end with the nonce sent")
	}
	authMessage := []byte(c.clientFirst + "," + c.serverFirst + "," + withoutProof)
	clientSignature := hmacSum(c.m, c.cred.StoredKey, string(authMessage))
	clientKey := make([]byte, len(proof))
	subtle.XORBytes(clientKey, proof, clientSignature)
	h := c.m.newHash()()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), c.cred.StoredKey) != 1 || !c.found {
		return fail("invalid proof")
	}
	mac := hmac.New(c.m.newHash(), c.cred.ServerKey)
	mac.Write(authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(mac.Sum(nil))), nil
}
