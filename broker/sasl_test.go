package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	ksasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/server"
)

const (
	adminUser     = "admin"
	adminPassword = "admin-secret"
)

// startSASLBroker serves one SASL_PLAINTEXT listener, with the bootstrap
// user admin.
func startSASLBroker(t *testing.T, cfg Config) *testBroker {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	cfg.BootstrapUser, cfg.BootstrapPassword = adminUser, adminPassword
	cfg.Listeners = []Listener{{Protocol: server.SASLPlaintext}}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBroker{Broker: b, t: t, dir: cfg.DataDir, done: make(chan error, 1)}
	go func() { tb.done <- b.ServeListener("SASL_PLAINTEXT", l) }()
	for b.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() { tb.stop() })
	return tb
}

func saslMechanisms(user, password string) []ksasl.Mechanism {
	return []ksasl.Mechanism{
		plain.Auth{User: user, Pass: password}.AsMechanism(),
		scram.Auth{User: user, Pass: password}.AsSha256Mechanism(),
		scram.Auth{User: user, Pass: password}.AsSha512Mechanism(),
	}
}

// TestSASLMechanismsAuthenticate: franz-go clients authenticate with
// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against the bootstrap user and a
// user created with AlterUserScramCredentials (kadm), produce and consume
// in a group; wrong passwords and unknown users fail with
// SASL_AUTHENTICATION_FAILED and the same message.
func TestSASLMechanismsAuthenticate(t *testing.T) {
	tb := startSASLBroker(t, Config{FailedAuthenticationDelay: 20 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	adm := kadm.NewClient(tb.client(kgo.SASL(saslMechanisms(adminUser, adminPassword)[2])))
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha256, Password: "alice-secret"}})
	if err != nil || altered.Error() != nil {
		t.Fatalf("creating alice: %v %v", err, altered.Error())
	}
	if altered, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Password: "alice-secret", Iterations: 8192}}); err != nil || altered.Error() != nil {
		t.Fatalf("creating alice: %v %v", err, altered.Error())
	}
	described, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil || described.Error() != nil {
		t.Fatalf("describe: %v %v", err, described.Error())
	}
	if a := described["alice"]; len(a.CredInfos) != 2 || a.CredInfos[1].Iterations != 8192 || len(described[adminUser].CredInfos) != 2 {
		t.Fatalf("described: %+v", described)
	}

	for _, user := range []string{adminUser, "alice"} {
		for _, m := range saslMechanisms(user, user+"-secret") {
			cl := tb.client(kgo.SASL(m), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("sasl-"+user), kgo.ConsumerGroup("g-"+user+m.Name()),
				kgo.ConsumeTopics("sasl-"+user), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sasl-" + user, Value: []byte(m.Name())}).FirstErr(); err != nil {
				t.Fatalf("%s as %s: produce: %v", m.Name(), user, err)
			}
			fs := cl.PollRecords(ctx, 1)
			if err := fs.Err0(); err != nil || fs.NumRecords() == 0 {
				t.Fatalf("%s as %s: consume in a group: %v", m.Name(), user, err)
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("%s as %s: commit: %v", m.Name(), user, err)
			}
			cl.Close()
		}
	}

	// Wrong passwords and unknown users: the same error, the same message.
	messages := map[string]bool{}
	for _, cred := range [][2]string{{"alice", "wrong"}, {"nobody", "alice-secret"}} {
		for _, m := range saslMechanisms(cred[0], cred[1]) {
			cl := tb.client(kgo.SASL(m), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
			_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			var ke *kerr.Error
			if !errors.As(err, &ke) || ke != kerr.SaslAuthenticationFailed {
				t.Fatalf("%s as %s/%s: %v, want SASL_AUTHENTICATION_FAILED", m.Name(), cred[0], cred[1], err)
			}
			msg := err.Error()
			messages[strings.ReplaceAll(msg, m.Name(), "MECH")] = true
			cl.Close()
		}
	}
	if len(messages) != 1 {
		t.Fatalf("failures are told apart: %v", messages)
	}

	// A deleted user no longer authenticates.
	if altered, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha256}}, nil); err != nil || altered.Error() != nil {
		t.Fatalf("deleting alice's SCRAM-SHA-256: %v %v", err, altered.Error())
	}
	cl := tb.client(kgo.SASL(saslMechanisms("alice", "alice-secret")[1]), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("deleted credential: %v", err)
	}
	// PLAIN uses the credential that is left.
	cl = tb.client(kgo.SASL(saslMechanisms("alice", "alice-secret")[0]))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("PLAIN with alice's SCRAM-SHA-512 credential: %v", err)
	}
}

// TestSASLCredentialsDurable: credentials survive a restart; a user
// deleted before it stays deleted; the bootstrap user is not recreated
// with its flag's password once it exists.
func TestSASLCredentialsDurable(t *testing.T) {
	dir := t.TempDir()
	tb := startSASLBroker(t, Config{DataDir: dir})
	ctx := ctxT(t, 60*time.Second)
	adm := kadm.NewClient(tb.client(kgo.SASL(saslMechanisms(adminUser, adminPassword)[1])))
	if r, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "carol", Mechanism: kadm.ScramSha512, Password: "carol-secret"},
		{User: "dave", Mechanism: kadm.ScramSha512, Password: "dave-secret"},
	}); err != nil || r.Error() != nil {
		t.Fatalf("creating users: %v %v", err, r.Error())
	}
	if r, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "dave", Mechanism: kadm.ScramSha512}}, nil); err != nil || r.Error() != nil {
		t.Fatalf("deleting dave: %v %v", err, r.Error())
	}
	// The admin changes its password.
	if r, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: adminUser, Mechanism: kadm.ScramSha256, Password: "new-admin-secret"}}); err != nil || r.Error() != nil {
		t.Fatalf("changing admin's password: %v %v", err, r.Error())
	}
	tb.stop()

	tb = startSASLBroker(t, Config{DataDir: dir})
	works := func(user, password string, m int) error {
		cl := tb.client(kgo.SASL(saslMechanisms(user, password)[m]), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
		defer cl.Close()
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		return err
	}
	if err := works("carol", "carol-secret", 2); err != nil {
		t.Fatalf("carol after a restart: %v", err)
	}
	if err := works("dave", "dave-secret", 2); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("dave, deleted before the restart: %v", err)
	}
	if err := works(adminUser, "new-admin-secret", 1); err != nil {
		t.Fatalf("admin's new password after a restart (the bootstrap user must not be reset): %v", err)
	}
	if err := works(adminUser, adminPassword, 1); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("admin's old password after a restart: %v", err)
	}
}

// TestSASLAlterErrors: AlterUserScramCredentials' and
// DescribeUserScramCredentials' per-user errors are Kafka's.
func TestSASLAlterErrors(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 30*time.Second)
	cl := tb.client()
	sp := make([]byte, 32)
	up := func(name string, m int8, iters int32, salt, salted []byte) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = name, m, iters, salt, salted
		return u
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{
		up("ok", 1, 4096, []byte("salt"), sp),
		up("twice", 1, 4096, []byte("salt"), sp),
		up("twice", 2, 4096, []byte("salt"), make([]byte, 64)),
		up("few", 1, 4095, []byte("salt"), sp),
		up("many", 1, 16385, []byte("salt"), sp),
		up("mech", 3, 4096, []byte("salt"), sp),
		up("nosalt", 1, 4096, nil, sp),
		up("", 1, 4096, []byte("salt"), sp),
	}
	del := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
	del.Name, del.Mechanism = "ghost", 1
	req.Deletions = append(req.Deletions, del)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*kerr.Error{"ok": nil, "twice": kerr.DuplicateResource, "few": kerr.UnacceptableCredential,
		"many": kerr.UnacceptableCredential, "mech": kerr.UnsupportedSaslMechanism, "nosalt": kerr.UnacceptableCredential,
		"": kerr.UnacceptableCredential, "ghost": kerr.ResourceNotFound}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(resp.Results), len(want), resp.Results)
	}
	for _, r := range resp.Results {
		if got := kerr.ErrorForCode(r.ErrorCode); got != error(want[r.User]) && !(got == nil && want[r.User] == nil) {
			t.Errorf("user %q: %v, want %v", r.User, got, want[r.User])
		}
	}
	dreq := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	for _, n := range []string{"ok", "twice", "ok", "ghost"} {
		u := kmsg.NewDescribeUserSCRAMCredentialsRequestUser()
		u.Name = n
		dreq.Users = append(dreq.Users, u)
	}
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	dwant := map[string]int16{"ok": kerr.DuplicateResource.Code, "twice": kerr.ResourceNotFound.Code, "ghost": kerr.ResourceNotFound.Code}
	if len(dresp.Results) != 3 {
		t.Fatalf("describe results %+v", dresp.Results)
	}
	for _, r := range dresp.Results {
		if r.ErrorCode != dwant[r.User] {
			t.Errorf("describe %q: code %d, want %d", r.User, r.ErrorCode, dwant[r.User])
		}
	}
	dreq.Users = nil
	if dresp, err = dreq.RequestWith(ctx, cl); err != nil || len(dresp.Results) != 1 || dresp.Results[0].User != "ok" ||
		len(dresp.Results[0].CredentialInfos) != 1 || dresp.Results[0].CredentialInfos[0].Iterations != 4096 {
		t.Fatalf("describe all: %+v %v", dresp, err)
	}
	// On a PLAINTEXT listener the SASL requests are ILLEGAL_SASL_STATE
	// and the connection stays open.
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	c := dialRaw(t, tb.AdvertisedAddr())
	c.send(encodeRequest(hs, 1))
	body, _, err := c.readResponse()
	if err != nil || binary.BigEndian.Uint16(body) != uint16(kerr.IllegalSaslState.Code) {
		t.Fatalf("handshake on PLAINTEXT: %x %v", body, err)
	}
	expectServedOn(t, c)
}

// expectServedOn checks that c's connection answers a Metadata request.
func expectServedOn(t *testing.T, c *rawConn) {
	t.Helper()
	c.send(encodeRequest(kmsg.NewPtrMetadataRequest(), 99))
	if _, corr, err := c.readResponse(); err != nil || corr != 99 {
		t.Fatalf("metadata after: corr %d, %v", corr, err)
	}
}

// saslConn drives SASL by hand on a raw connection.
type saslConn struct {
	*rawConn
	corr int32
}

func (c *saslConn) handshake(version int16, mechanism string) *kmsg.SASLHandshakeResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = version, mechanism
	resp := kmsg.NewPtrSASLHandshakeResponse()
	c.roundTrip(req, resp)
	return resp
}

func (c *saslConn) authenticate(version int16, token []byte) *kmsg.SASLAuthenticateResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version, req.SASLAuthBytes = version, token
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	c.roundTrip(req, resp)
	return resp
}

func (c *saslConn) roundTrip(req kmsg.Request, resp kmsg.Response) {
	c.t.Helper()
	c.corr++
	c.send(encodeRequest(req, c.corr))
	body, corr, err := c.readResponse()
	if err != nil || corr != c.corr {
		c.t.Fatalf("%s: corr %d, %v", kmsg.NameForKey(req.Key()), corr, err)
	}
	if req.IsFlexible() {
		body = body[1:] // the response header's tags
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatal(err)
	}
}

// rawToken sends a bare SASL token (after SaslHandshake v0) and returns
// the bare answer.
func (c *saslConn) rawToken(token []byte) ([]byte, error) {
	c.send(binary.BigEndian.AppendUint32(nil, uint32(len(token))))
	c.send(token)
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, err
	}
	out := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.nc, out)
	return out, err
}

// scramTokens runs a client mechanism's conversation over step.
func scramTokens(t *testing.T, m ksasl.Mechanism, step func([]byte) ([]byte, error)) error {
	t.Helper()
	sess, msg, err := m.Authenticate(context.Background(), "broker")
	if err != nil {
		t.Fatal(err)
	}
	for {
		challenge, err := step(msg)
		if err != nil {
			return err
		}
		done, next, err := sess.Challenge(challenge)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		msg = next
	}
}

// TestSASLLegacyFraming: after SaslHandshake v0 the tokens are bare
// frames (kafka-python 2.0, sarama's SASLHandshakeV0), for PLAIN and SCRAM;
// then the connection serves Kafka requests. A bad bare token closes the
// connection without an answer.
func TestSASLLegacyFraming(t *testing.T) {
	tb := startSASLBroker(t, Config{FailedAuthenticationDelay: -1})
	for _, m := range saslMechanisms(adminUser, adminPassword) {
		c := &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())}
		if r := c.handshake(0, m.Name()); r.ErrorCode != 0 {
			t.Fatalf("%s: handshake v0: %d", m.Name(), r.ErrorCode)
		}
		if err := scramTokens(t, m, c.rawToken); err != nil {
			t.Fatalf("%s over bare frames: %v", m.Name(), err)
		}
		expectServedOn(t, c.rawConn)
	}
	c := &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())}
	c.handshake(0, "PLAIN")
	if out, err := c.rawToken([]byte("\x00admin\x00wrong")); err == nil {
		t.Fatalf("a wrong bare PLAIN token was answered %q", out)
	}
	c.expectClosed()
}

// TestSASLReauthentication (KIP-368): SaslAuthenticate v1 answers the
// session lifetime; franz-go re-authenticates on its live connection
// before it ends and keeps producing; a connection that lets its session
// expire is closed at its next request, and one that re-authenticates in
// time goes on.
func TestSASLReauthentication(t *testing.T) {
	const lifetime = 1500 * time.Millisecond
	tb := startSASLBroker(t, Config{ConnectionsMaxReauth: lifetime})
	ctx := ctxT(t, 60*time.Second)

	cl := tb.client(kgo.SASL(saslMechanisms(adminUser, adminPassword)[2]), kgo.DefaultProduceTopic("reauth"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	connsBefore := metricValue(t, tb.Registry(), "sushka_connections_total")
	authsBefore := tb.RequestCount(36)
	deadline := time.Now().Add(3 * lifetime)
	for time.Now().Before(deadline) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("again")}).FirstErr(); err != nil {
			t.Fatalf("produce across re-authentications: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := tb.RequestCount(36) - authsBefore; n < 2*2 { // two SCRAM steps per re-authentication
		t.Fatalf("%d SaslAuthenticate requests in %s with a %s lifetime: franz-go did not re-authenticate", n, 3*lifetime, lifetime)
	}
	if after := metricValue(t, tb.Registry(), "sushka_connections_total"); after != connsBefore {
		t.Fatalf("connections went from %v to %v: re-authentication must keep the connection", connsBefore, after)
	}

	// By hand: the lifetime is answered, expiry closes at the next request.
	plainToken := []byte("\x00" + adminUser + "\x00" + adminPassword)
	c := &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())}
	c.handshake(1, "PLAIN")
	if r := c.authenticate(1, plainToken); r.ErrorCode != 0 || r.SessionLifetimeMillis != lifetime.Milliseconds() {
		t.Fatalf("authenticate v1: code %d, lifetime %d", r.ErrorCode, r.SessionLifetimeMillis)
	}
	expectServedOn(t, c.rawConn)
	time.Sleep(lifetime + 100*time.Millisecond)
	c.send(encodeRequest(kmsg.NewPtrMetadataRequest(), 50))
	c.expectClosed()

	// Re-authenticating after the expiry (before any other request) goes on.
	c = &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())}
	c.handshake(1, "PLAIN")
	c.authenticate(2, plainToken)
	time.Sleep(lifetime + 100*time.Millisecond)
	c.handshake(1, "PLAIN")
	if r := c.authenticate(2, plainToken); r.ErrorCode != 0 {
		t.Fatalf("re-authentication: %d", r.ErrorCode)
	}
	expectServedOn(t, c.rawConn)
	// Re-authentication as another principal fails and closes.
	r, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "eve", Mechanism: kadm.ScramSha256, Password: "eve-secret"}})
	if err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	c.handshake(1, "PLAIN")
	if r := c.authenticate(2, []byte("\x00eve\x00eve-secret")); r.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("re-authentication as another user: %d", r.ErrorCode)
	}
	c.expectClosed()
}

// TestSASLBadInput: what a connection may not do before it authenticates,
// and garbage: each closes that connection (with Kafka's error where
// the protocol lets it say one) and leaves the others alone.
func TestSASLBadInput(t *testing.T) {
	const delay = 200 * time.Millisecond
	tb := startSASLBroker(t, Config{FailedAuthenticationDelay: delay})
	ctx := ctxT(t, 60*time.Second)
	good := tb.client(kgo.SASL(saslMechanisms(adminUser, adminPassword)[1]), kgo.DefaultProduceTopic("bad-input"), kgo.AllowAutoTopicCreation())
	if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dial := func(t *testing.T) *saslConn { return &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())} }

	t.Run("request before authentication", func(t *testing.T) {
		for _, req := range []kmsg.Request{kmsg.NewPtrMetadataRequest(), kmsg.NewPtrProduceRequest(), kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()} {
			c := dial(t)
			// ApiVersions is served before authentication.
			c.roundTrip(kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrApiVersionsResponse())
			c.send(encodeRequest(req, 7))
			c.expectClosed()
		}
		// After a handshake, before the authentication ended, too.
		c := dial(t)
		c.handshake(1, "SCRAM-SHA-256")
		c.send(encodeRequest(kmsg.NewPtrMetadataRequest(), 7))
		c.expectClosed()
	})
	t.Run("authenticate before handshake", func(t *testing.T) {
		c := dial(t)
		if r := c.authenticate(1, []byte("\x00admin\x00admin-secret")); r.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("code %d, want ILLEGAL_SASL_STATE", r.ErrorCode)
		}
		c.expectClosed()
	})
	t.Run("unsupported mechanism", func(t *testing.T) {
		c := dial(t)
		start := time.Now()
		r := c.handshake(1, "GSSAPI")
		if r.ErrorCode != kerr.UnsupportedSaslMechanism.Code || strings.Join(r.SupportedMechanisms, ",") != "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN" {
			t.Fatalf("code %d, mechanisms %v", r.ErrorCode, r.SupportedMechanisms)
		}
		if took := time.Since(start); took < delay {
			t.Fatalf("answered after %s, before the failed-authentication delay %s", took, delay)
		}
		c.expectClosed()
	})
	t.Run("second handshake", func(t *testing.T) {
		c := dial(t)
		c.handshake(1, "PLAIN")
		if r := c.handshake(1, "PLAIN"); r.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("code %d", r.ErrorCode)
		}
		c.expectClosed()
	})
	t.Run("garbage handshake", func(t *testing.T) {
		c := dial(t)
		// A SaslHandshake frame whose body does not decode.
		frame := encodeRequest(kmsg.NewPtrSASLHandshakeRequest(), 1)
		frame = append(frame[:len(frame)-2], 0x7f) // a string length past the end
		binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
		c.send(frame)
		c.expectClosed()
		// Not a Kafka request at all (an HTTP request, a TLS hello).
		for _, g := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), {0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}} {
			c := dial(t)
			c.send(g)
			c.expectClosed()
		}
	})
	t.Run("SCRAM wrong nonce and bad proof", func(t *testing.T) {
		for _, tamper := range []func(string) string{
			func(m string) string { return strings.Replace(m, ",r=", ",r=x", 1) },
			func(m string) string { return m[:strings.LastIndex(m, ",p=")] + ",p=AAAA" },
		} {
			c := dial(t)
			c.handshake(1, "SCRAM-SHA-512")
			step := 0
			start := time.Now()
			err := scramTokens(t, saslMechanisms(adminUser, adminPassword)[2], func(tok []byte) ([]byte, error) {
				if step++; step == 2 {
					tok = []byte(tamper(string(tok)))
				}
				r := c.authenticate(2, tok)
				if r.ErrorCode != 0 {
					return nil, kerr.ErrorForCode(r.ErrorCode)
				}
				return r.SASLAuthBytes, nil
			})
			if !errors.Is(err, kerr.SaslAuthenticationFailed) || time.Since(start) < delay {
				t.Fatalf("tampered client-final: %v after %s", err, time.Since(start))
			}
			c.expectClosed()
		}
	})
	t.Run("oversized token", func(t *testing.T) {
		c := dial(t)
		c.handshake(1, "PLAIN")
		c.send(frameHeader(DefaultMaxSASLReceiveBytes + 1))
		c.expectClosed()
		c = dial(t)
		c.handshake(0, "PLAIN")
		c.send(frameHeader(DefaultMaxSASLReceiveBytes + 1))
		c.expectClosed()
		// Authenticated, a connection may send frames of any size up to
		// the request limit: the bound is for the unauthenticated.
		c = dial(t)
		c.handshake(1, "PLAIN")
		c.authenticate(1, []byte("\x00admin\x00admin-secret"))
		req := kmsg.NewPtrMetadataRequest()
		for i := range 40000 {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(strings.Repeat("t", 12) + string(rune('a'+i%26)))
			req.Topics = append(req.Topics, rt)
		}
		req.AllowAutoTopicCreation = false
		frame := encodeRequest(req, 3)
		if len(frame) <= DefaultMaxSASLReceiveBytes {
			t.Fatalf("frame of %d bytes is not above the SASL bound", len(frame))
		}
		c.send(frame)
		if _, corr, err := c.readResponse(); err != nil || corr != 3 {
			t.Fatalf("large request after authentication: %v", err)
		}
	})
	t.Run("failures do not hold up others", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &saslConn{rawConn: dialRaw(t, tb.AdvertisedAddr())}
				c.handshake(1, "PLAIN")
				c.send(encodeRequest(&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: []byte("\x00admin\x00wrong")}, 5))
				c.readResponse()
			}()
		}
		start := time.Now()
		if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("during")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= delay {
			t.Logf("a produce took %s while others failed to authenticate (machine loaded?)", took)
		}
		wg.Wait()
	})
	if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("the authenticated client after all of it: %v", err)
	}
}

// TestSASLOverTLS: SASL_SSL, SCRAM-SHA-512 and PLAIN inside TLS, and the
// gating there too.
func TestSASLOverTLS(t *testing.T) {
	set, err := certs.NewSet("example", []string{"127.0.0.1"}, "client")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := certs.WriteSet(dir, set); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := server.NewTLSConfig(server.TLSFiles{
		CertFile: filepath.Join(dir, certs.ServerCertFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile),
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{DataDir: t.TempDir(), Logger: testLogger(), BootstrapUser: adminUser, BootstrapPassword: adminPassword,
		Listeners: []Listener{{Protocol: server.SASLSSL, TLS: serverTLS}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBroker{Broker: b, t: t, done: make(chan error, 1)}
	go func() { tb.done <- b.Serve(l) }()
	for b.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(tb.stop)
	pool := x509.NewCertPool()
	pool.AddCert(set.CA.Cert)
	clientTLS := &tls.Config{RootCAs: pool}
	ctx := ctxT(t, 30*time.Second)
	for _, m := range []ksasl.Mechanism{saslMechanisms(adminUser, adminPassword)[2], saslMechanisms(adminUser, adminPassword)[0]} {
		cl := tb.client(kgo.DialTLSConfig(clientTLS), kgo.SASL(m), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("tls"))
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(m.Name())}).FirstErr(); err != nil {
			t.Fatalf("%s over SASL_SSL: %v", m.Name(), err)
		}
		cl.Close()
	}
	// Without SASL, TLS alone serves nothing.
	cl := tb.client(kgo.DialTLSConfig(clientTLS), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err == nil {
		t.Fatal("Metadata without SASL served on SASL_SSL")
	}
}
