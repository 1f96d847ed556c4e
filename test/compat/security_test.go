package compat_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sushka-io/sushka/test/testbroker"
)

// The security story of issue 13, one per client (security_*_test.go): a
// broker started with a SASL_SSL and a SASL_PLAINTEXT listener, the TLS
// files of `sushka tls init`, a bootstrap super user and the authorizer on
// (startSecureBroker). Users, topics and ACLs are set up by the super user
// with the broker's own CLI over SASL_SSL + SCRAM-SHA-512:
//
//   - alice (the tenant under test) may READ and WRITE the topics, and
//     READ the groups, whose names start with "alice-" (prefixed ACLs);
//   - bob, another tenant, the same on "bob-".
//
// Then each client, as alice:
//
//  1. over SASL_SSL with SCRAM-SHA-512 produces secureRecords records to
//     alice-orders and consumes secureFirst of them in the group alice-app,
//     committing them;
//  2. with PLAIN (over SASL_SSL or SASL_PLAINTEXT, as the test says)
//     produces secureRecords more and consumes the rest in the same group:
//     both runs together got every record exactly once, and the group
//     committed the end of every partition;
//  3. with a wrong password fails with the client's own authentication
//     error;
//  4. producing to bob-payments fails with TOPIC_AUTHORIZATION_FAILED,
//     consuming alice-orders in bob's group bob-app with
//     GROUP_AUTHORIZATION_FAILED, both in the client's own terms, and
//     listing topics shows alice-orders and nothing of bob's.
//
// franz-go (kgo, kadm, as the super user over SASL_PLAINTEXT) checks what
// the broker holds.

const (
	superUser, superPassword = "admin", "admin-secret"
	tenantUser, tenantPass   = "alice", "alice-secret"
	otherUser, otherPassword = "bob", "bob-secret"
	wrongPassword            = "not-alices-password"

	tenantTopic = "alice-orders" // alice's, 3 partitions
	tenantGroup = "alice-app"    // alice's
	otherTopic  = "bob-payments" // bob's: alice may not write or see it
	otherGroup  = "bob-app"      // bob's: alice may not join it

	secureRecords = 100 // records produced with each mechanism
	secureFirst   = 60  // records the first consumer commits
)

// secureBroker is a started broker with the security of issue 13 on.
type secureBroker struct {
	*broker
	tlsDir        string // what `sushka tls init` wrote: ca.crt, broker.crt/.key, client.crt/.key
	caFile        string // tlsDir/ca.crt
	saslSSL       string // host:port of the SASL_SSL listener
	saslPlaintext string // host:port of the SASL_PLAINTEXT listener
}

// tlsInit runs `sushka tls init` into a new temporary directory and
// returns it, checking that the files the contract names are there.
func tlsInit(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	r := runCmd(time.Minute, "", nil, "", bin, "tls", "init", "--dir", dir)
	if r.err != nil {
		t.Fatalf("sushka tls init --dir %s: %v\n%s%s", dir, r.err, r.stdout, r.stderr)
	}
	for _, f := range []string{"ca.crt", "broker.crt", "broker.key", "client.crt", "client.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("sushka tls init wrote no %s: %v\n%s", f, err, r.stdout)
		}
	}
	return dir
}

// startSecureBroker starts the broker of the security story and sets up
// its users, topics and ACLs with the sushka CLI as the super user.
func startSecureBroker(t *testing.T, extraArgs ...string) *secureBroker {
	t.Helper()
	bin := testbroker.Binary(t)
	dir := tlsInit(t, bin)
	args := append([]string{
		"--tls-cert-file", filepath.Join(dir, "broker.crt"),
		"--tls-key-file", filepath.Join(dir, "broker.key"),
		"--bootstrap-user", superUser + ":" + superPassword,
		"--authorizer",
		"--super-users", "User:" + superUser,
	}, extraArgs...)
	p := testbroker.StartListeners(t, bin, []string{"SASL_SSL", "SASL_PLAINTEXT"}, args...)
	s := &secureBroker{
		tlsDir:        dir,
		caFile:        filepath.Join(dir, "ca.crt"),
		saslSSL:       p.Listeners["SASL_SSL"],
		saslPlaintext: p.Listeners["SASL_PLAINTEXT"],
	}
	// The checks of compat_test.go (readAll, committed, ...) run as the
	// super user over SASL_PLAINTEXT.
	s.broker = &broker{t: t, bin: bin, proc: p, addr: s.saslPlaintext,
		opts: []kgo.Opt{kgo.SASL(scram.Auth{User: superUser, Pass: superPassword}.AsSha512Mechanism())}}

	for _, u := range [][2]string{{tenantUser, tenantPass}, {otherUser, otherPassword}} {
		s.cli("user", "create", u[0], "--password", u[1])
	}
	s.cli("topic", "create", tenantTopic, "-p", "3", "-r", "1")
	s.cli("topic", "create", otherTopic, "-p", "1", "-r", "1")
	for _, u := range []string{tenantUser, otherUser} {
		s.cli("acl", "create", "--allow-principal", "User:"+u, "--operation", "READ", "--operation", "WRITE",
			"--topic", u+"-", "--resource-pattern-type", "prefixed")
		s.cli("acl", "create", "--allow-principal", "User:"+u, "--operation", "READ",
			"--group", u+"-", "--resource-pattern-type", "prefixed")
	}
	users := s.cli("user", "list")
	acls := s.cli("acl", "list")
	for _, u := range []string{tenantUser, otherUser} {
		if !strings.Contains(users, u) || !strings.Contains(acls, "User:"+u) {
			t.Fatalf("sushka user list / acl list do not show %s:\n%s\n%s", u, users, acls)
		}
	}
	return s
}

// cli runs a sushka client subcommand as the super user over SASL_SSL with
// SCRAM-SHA-512 and returns what it printed.
func (s *secureBroker) cli(args ...string) string {
	s.t.Helper()
	conn := []string{"--brokers", s.saslSSL, "--tls", "--tls-ca-file", s.caFile,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", superUser, "--sasl-password", superPassword}
	return s.run(time.Minute, "", nil, "", s.bin, append(args, conn...)...)
}

// pythonSecurity runs script (a client of test/compat/python) against
// bootstrap with the client settings in $SUSHKA_COMPAT_CONFIG.
func (s *secureBroker) pythonSecurity(py, script string, settings map[string]string, bootstrap string, args ...string) result {
	s.t.Helper()
	config, err := json.Marshal(settings)
	if err != nil {
		s.t.Fatal(err)
	}
	return runCmd(time.Minute, "", []string{"SUSHKA_COMPAT_CONFIG=" + string(config)}, "", py, append([]string{script, bootstrap}, args...)...)
}

// caPEM is the CA certificate as PEM text.
func (s *secureBroker) caPEM() string {
	s.t.Helper()
	b, err := os.ReadFile(s.caFile)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// tlsConfig trusts the story's CA (Go clients).
func (s *secureBroker) tlsConfig() *tls.Config {
	s.t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(s.caPEM())) {
		s.t.Fatalf("no certificate in %s", s.caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// storyRecords is what a client produces in step mech of the story
// (step "scram" and step "plain"), as want() renders them.
func storyRecords(client, mech string) (prefix string, w map[string]string) {
	prefix = fmt.Sprintf("%s-%s", client, mech)
	return prefix, want(prefix, secureRecords)
}

// checkStory checks steps 1 and 2: the first consumer (SCRAM) got
// secureFirst records, the second (PLAIN) the rest, every record of both
// producers exactly once, and the group committed every partition's end.
func (s *secureBroker) checkStory(client string, first, second []record) {
	s.t.Helper()
	all := map[string]string{}
	for _, mech := range []string{"scram", "plain"} {
		_, w := storyRecords(client, mech)
		for k, v := range w {
			all[k] = v
		}
	}
	if len(first) != secureFirst {
		s.t.Fatalf("first consumer (SCRAM-SHA-512) got %d records, want %d", len(first), secureFirst)
	}
	checkResume(s.t, first, second, all)
	s.checkCommittedAtEnd(tenantGroup, tenantTopic)
}

// checkTenantTopics checks that a topic listing alice got shows her topic
// and none of bob's (nor any other the super user made).
func checkTenantTopics(t *testing.T, client string, listed []string) {
	t.Helper()
	var seen []string
	hasOwn := false
	for _, topic := range listed {
		if topic == tenantTopic {
			hasOwn = true
			continue
		}
		seen = append(seen, topic)
	}
	sort.Strings(seen)
	if !hasOwn || len(seen) > 0 {
		t.Fatalf("%s: alice's topic listing %v: want %s and nothing else (got also %v)", client, listed, tenantTopic, seen)
	}
}

// wantError fails the test unless the error text a client showed contains
// every one of the words, and logs it: how each client says it is
// recorded in docs/compatibility.md.
func wantError(t *testing.T, client, what, got string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(got, w) {
			t.Fatalf("%s, %s: error %q, want one that says %q", client, what, got, w)
		}
	}
	t.Logf("%s, %s: %s", client, what, strings.TrimSpace(got))
}

// within is a context bounded by d for one step of a story.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// storyScript is a client of the story that runs as a script (python,
// node): as runs it as alice on the listener of protocol with mechanism
// and password; its commands print JSON lines (test/compat/python,
// test/compat/kafkajs).
type storyScript struct {
	s      *secureBroker
	client string
	as     func(protocol, mechanism, password string, args ...string) result
}

// run runs the script as alice with her password and returns what it
// printed; it fails the test (with the broker's log) when the script
// fails.
func (c storyScript) run(protocol, mechanism string, args ...string) string {
	c.s.t.Helper()
	r := c.as(protocol, mechanism, tenantPass, args...)
	if r.err != nil {
		c.s.t.Fatalf("%s %s %s %v: %v\n%s%s\nbroker log:\n%s", c.client, protocol, mechanism, args, r.err, r.stdout, tail(r.stderr, 4000), tail(c.s.proc.Log(), 4000))
	}
	return r.stdout
}

// step is steps 1 and 2 of the story for one mechanism: produce the
// story's records of mech (`produce TOPIC PREFIX N produceArgs...`), then
// consume max of the group's records (`consume TOPIC GROUP MAX SECONDS`).
func (c storyScript) step(protocol, mechanism, mech string, max int, produceArgs ...string) []record {
	c.s.t.Helper()
	prefix, _ := storyRecords(c.client, mech)
	var produced struct{ Delivered int }
	c.decode(c.run(protocol, mechanism, append([]string{"produce", tenantTopic, prefix, fmt.Sprint(secureRecords)}, produceArgs...)...), &produced)
	if produced.Delivered != secureRecords {
		c.s.t.Fatalf("%s produce with %s: %d delivered, want %d", c.client, mechanism, produced.Delivered, secureRecords)
	}
	return pyRecords(c.s.t, c.run(protocol, mechanism, "consume", tenantTopic, tenantGroup, fmt.Sprint(max), "60"))
}

// story runs steps 1 and 2 (SCRAM-SHA-512 over SASL_SSL, then PLAIN over
// plainProtocol) with each step's produce arguments, and checks them.
func (c storyScript) story(plainProtocol string, scramArgs, plainArgs []string) {
	c.s.t.Helper()
	first := c.step("SASL_SSL", "SCRAM-SHA-512", "scram", secureFirst, scramArgs...)
	second := c.step(plainProtocol, "PLAIN", "plain", 2*secureRecords-secureFirst, plainArgs...)
	c.s.checkStory(c.client, first, second)
}

// wrongPassword runs the script's command (auth_error) as alice with a
// wrong password and decodes what it printed into v.
func (c storyScript) wrongPassword(v any, args ...string) {
	c.s.t.Helper()
	r := c.as("SASL_SSL", "SCRAM-SHA-512", wrongPassword, args...)
	if r.err != nil {
		c.s.t.Fatalf("%s %v with a wrong password: %v\n%s%s", c.client, args, r.err, r.stdout, tail(r.stderr, 4000))
	}
	c.decode(r.stdout, v)
}

// denied runs the script's `denied OTHER_TOPIC OWN_TOPIC OTHER_GROUP` as
// alice (SCRAM-SHA-512 over SASL_SSL) and decodes what it printed into v.
func (c storyScript) denied(v any) {
	c.s.t.Helper()
	c.decode(c.run("SASL_SSL", "SCRAM-SHA-512", "denied", otherTopic, tenantTopic, otherGroup), v)
}

func (c storyScript) decode(out string, v any) {
	c.s.t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.s.t.Fatalf("%s: %v: %q", c.client, err, out)
	}
}
