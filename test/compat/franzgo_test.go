package compat_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// franz-go's integration suite: the tests of github.com/twmb/franz-go/pkg/kgo
// (the version in go.mod), run in place from the module cache by `go test`
// in a child process, against the built broker:
//
//	KGO_SEEDS=<broker> KGO_TEST_RF=1 KGO_TEST_RECORDS=500000 \
//	    KGO_TEST_SCRAM_SEEDS=<SASL_PLAINTEXT listener> KGO_TEST_SCRAM=kgo:<password> \
//	    go test -count=1 github.com/twmb/franz-go/pkg/kgo
//
// 500000 is the suite's own default (the group ETL tests move that many
// records through three levels of groups): about a minute and a half on 2
// cores, plus the first compile. SUSHKA_COMPAT_KGO_RECORDS sets another
// count (10000 for a quicker run); SUSHKA_COMPAT_KGO_RUN passes a -run
// expression; KGO_LOG_LEVEL is passed through (default none).
//
// The broker has a PLAINTEXT listener (KGO_SEEDS) and a SASL_PLAINTEXT one
// (KGO_TEST_SCRAM_SEEDS: TestSCRAMAuth authenticates with SCRAM-SHA-256 as
// the --bootstrap-user, TestSCRAMAuthBadCredentials as a user that does
// not exist). TestTxnEtl (transactional consume-process-produce through
// three levels of groups, with rebalances) runs with the rest, and once
// more alone with KGO_TEST_UNSAFE=1 (the suite's unsafe variant: the group
// is left and rejoined while a transaction is open).
//
// TestFranzGoSuiteTLS runs the whole suite once more over TLS with client
// certificates (KGO_TEST_TLS=ca:…,cert:…,key:…, the files of `sushka tls
// init`, a broker with an SSL listener and --tls-client-auth required) and
// SCRAM-SHA-512, with KGO_TEST_RECORDS=franzTLSRecords: every test of the
// suite but TestIssue769 (its own dialer cannot be combined with TLS) runs
// over TLS, and the ETL tests move a fifth of the records, which keeps the
// second run to about half the first's time.
//
// Skipped by the suite itself: the share group tests (ShareFetch, Kafka
// 4.2, not served), OAUTHBEARER (not served; needs KGO_TEST_OAUTH_SEEDS).
// Any other skip or any failure fails the test.

// franzSelfSkipped are the top-level tests the suite skips by itself
// against Sushka.
var franzSelfSkipped = map[string]string{
	"TestShareGroup":                     "share groups (ShareFetch/ShareAcknowledge v2) are not served",
	"TestShareGroupETL":                  "share groups are not served",
	"TestShareGroupAckOnClose":           "share groups are not served",
	"TestShareGroupOffsetsAdmin":         "share groups are not served",
	"TestConsumeRegexShareSkipsInternal": "share groups are not served",
	"TestOAuthAuth":                      "OAUTHBEARER is not served (needs KGO_TEST_OAUTH_SEEDS)",
}

// franzMustPass are the 33 tests of the suite that talk to the broker and
// need neither share groups nor OAUTHBEARER: a run in which any of them
// did not pass (or did not run) fails. The suite's other tests are unit
// tests of the client.
var franzMustPass = []string{
	"TestGroupETL", "TestGroupSimple", "TestClient_Produce", "TestClient_ProduceLargeMessages",
	"TestIssue1034", "TestPing", "TestConsumeRegex", "Test848RegexBrokerResolves",
	"TestIssue325", "TestIssue337", "TestIssue434", "TestIssue523", "TestIssue648",
	"TestIssue769", "TestIssue810", "TestIssue831", "TestIssue865", "TestAddRemovePartitions",
	"TestPauseIssue489", "TestPauseIssueOct2023", "TestDirectPartitionPurge",
	"TestIssueFetchLargerThanBrokerMaxReadBytes", "TestPooling", "TestHookPollStart",
	"TestConsumeTopicRetrieval", "TestConsumeMaxDecompressBatchBytes",
	"TestIssueProduceBrokerTooOldFailsRecords", "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
	"TestUnknownGroupOffsetFetchPinned", "TestConsumeTopicRetrieval_Many",
	"TestTxnEtl", "TestSCRAMAuth", "TestSCRAMAuthBadCredentials",
}

// The suite's SCRAM user, made by --bootstrap-user (SCRAM-SHA-256 and 512).
const franzScramUser, franzScramPassword = "kgo", "kgo-scram-secret"

// franzTLSRecords is KGO_TEST_RECORDS of the run over TLS.
const franzTLSRecords = "100000"

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// franzSuite runs franz-go's kgo tests against one broker.
type franzSuite struct {
	t      *testing.T
	b      *broker
	modDir string
	env    []string          // KGO_* of every run
	skip   map[string]string // tests not run (go test -skip), and why
}

func newFranzSuite(t *testing.T, b *broker, records string, env ...string) *franzSuite {
	t.Helper()
	goModuleVersions(t, "github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg")
	if v := os.Getenv("SUSHKA_COMPAT_KGO_RECORDS"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("SUSHKA_COMPAT_KGO_RECORDS=%q: want a positive count", v)
		}
		records = v
	}
	logLevel := os.Getenv("KGO_LOG_LEVEL")
	if logLevel == "" {
		logLevel = "none"
	}
	return &franzSuite{t: t, b: b, modDir: moduleRoot(t), env: append([]string{
		"KGO_SEEDS=" + b.addr,
		"KGO_TEST_RF=1",
		"KGO_TEST_RECORDS=" + records,
		"KGO_LOG_LEVEL=" + logLevel,
	}, env...)}
}

// run runs the suite (the tests matching runExpr, all when "") bounded by
// timeout; a hang ends well within .ci/run's 25 minutes even when a failed
// test is run again.
func (f *franzSuite) run(runExpr string, timeout time.Duration, extraEnv ...string) *suiteRun {
	t := f.t
	t.Helper()
	args := []string{"test", "-json", "-count=1", "-timeout", (timeout - 30*time.Second).String()}
	if runExpr != "" {
		args = append(args, "-run", runExpr)
	}
	if len(f.skip) > 0 {
		names := make([]string, 0, len(f.skip))
		for name := range f.skip {
			names = append(names, name)
		}
		sort.Strings(names)
		args = append(args, "-skip", "^("+strings.Join(names, "|")+")$")
	}
	args = append(args, "github.com/twmb/franz-go/pkg/kgo")
	env := append(append([]string{}, f.env...), extraEnv...)
	t.Logf("%s go %s", strings.Join(env, " "), strings.Join(args, " "))
	start := time.Now()
	r := runCmd(timeout, f.modDir, env, "", "go", args...)
	t.Logf("suite ran in %s", time.Since(start).Round(time.Second))
	return parseSuite(r)
}

// check runs the whole suite (or SUSHKA_COMPAT_KGO_RUN's part) and fails
// the test for an unexpected skip, a failure (a test failing once, then
// passing alone, is reported as FLAKY) or a must-pass test that did not
// pass.
func (f *franzSuite) check() {
	t := f.t
	t.Helper()
	s := f.run(os.Getenv("SUSHKA_COMPAT_KGO_RUN"), 10*time.Minute) // -run, to run a part while debugging
	passed, failed, skipped := s.by("pass"), s.by("fail"), s.by("skip")
	t.Logf("franz-go kgo suite: %d passed, %d failed, %d skipped (subtests: %d failed, %d skipped)", len(passed), len(failed), len(skipped), len(s.subFailed), len(s.subSkipped))
	t.Logf("passed: %s", strings.Join(passed, " "))
	for _, name := range skipped {
		why := franzSelfSkipped[name]
		if why == "" {
			t.Errorf("%s skipped unexpectedly:\n%s", name, s.output(name))
			continue
		}
		t.Logf("skipped %s: %s", name, why)
	}
	if len(s.subSkipped) > 0 {
		t.Errorf("subtests skipped: %v", s.subSkipped)
	}
	if len(failed) > 0 && len(failed) <= 3 {
		// The group ETL tests are timing-sensitive on a loaded 2-core
		// machine; a test that fails is run once more, alone, and a pass
		// then is reported as FLAKY with the first failure's output.
		again := f.run("^("+strings.Join(failed, "|")+")$", 6*time.Minute)
		for _, name := range failed {
			if again.status[name] == "pass" {
				t.Logf("FLAKY: %s failed, then passed when run again alone; first failure:\n%s", name, tail(s.output(name), 6000))
				s.status[name] = "pass"
				continue
			}
			t.Errorf("%s failed twice; first failure:\n%s\nsecond:\n%s", name, tail(s.output(name), 6000), tail(again.output(name), 6000))
		}
	} else {
		for _, name := range failed {
			t.Errorf("%s failed:\n%s", name, tail(s.output(name), 6000))
		}
	}
	for name, why := range f.skip {
		t.Logf("not run: %s: %s", name, why)
	}
	if os.Getenv("SUSHKA_COMPAT_KGO_RUN") == "" {
		for _, name := range franzMustPass {
			if _, skipped := f.skip[name]; !skipped && s.status[name] != "pass" {
				t.Errorf("%s: %q, want pass", name, s.status[name])
			}
		}
	}
	if s.err != nil && len(failed) == 0 {
		t.Errorf("go test: %v\nstderr:\n%s\nstdout:\n%s", s.err, tail(s.stderr, 4000), tail(s.stdout, 4000))
	}
	if t.Failed() {
		t.Logf("broker log:\n%s", tail(f.b.proc.Log(), 8000))
	}
}

// startFranzBroker starts the broker of a suite run: a first listener of
// the named protocol (KGO_SEEDS) and a SASL_PLAINTEXT one
// (KGO_TEST_SCRAM_SEEDS) with the suite's SCRAM user.
func startFranzBroker(t *testing.T, protocol string, extraArgs ...string) *broker {
	t.Helper()
	bin := testbroker.Binary(t)
	p := testbroker.StartListeners(t, bin, []string{protocol, "SASL_PLAINTEXT"},
		append([]string{"--bootstrap-user", franzScramUser + ":" + franzScramPassword}, extraArgs...)...)
	return &broker{t: t, bin: bin, proc: p, addr: p.Addr}
}

func TestFranzGoSuite(t *testing.T) {
	b := startFranzBroker(t, "PLAINTEXT")
	f := newFranzSuite(t, b, "500000",
		"KGO_TEST_SCRAM_SEEDS="+b.proc.Listeners["SASL_PLAINTEXT"],
		"KGO_TEST_SCRAM="+franzScramUser+":"+franzScramPassword)
	f.check()
	if os.Getenv("SUSHKA_COMPAT_KGO_RUN") == "" {
		unsafe := f.run("^TestTxnEtl$", 6*time.Minute, "KGO_TEST_UNSAFE=1")
		if unsafe.status["TestTxnEtl"] != "pass" {
			t.Errorf("TestTxnEtl with KGO_TEST_UNSAFE=1: %q, want pass:\n%s", unsafe.status["TestTxnEtl"], tail(unsafe.output("TestTxnEtl"), 6000))
		}
	}
}

// TestFranzGoSuiteTLS is the suite over TLS: an SSL listener that requires
// a client certificate signed by the CA of `sushka tls init`, whose client
// pair the suite presents (KGO_TEST_TLS), and SCRAM-SHA-512 for its SCRAM
// tests.
func TestFranzGoSuiteTLS(t *testing.T) {
	dir := tlsInit(t, testbroker.Binary(t))
	file := func(name string) string { return filepath.Join(dir, name) }
	b := startFranzBroker(t, "SSL",
		"--tls-cert-file", file("broker.crt"), "--tls-key-file", file("broker.key"),
		"--tls-client-ca-file", file("ca.crt"), "--tls-client-auth", "required")
	f := newFranzSuite(t, b, franzTLSRecords,
		"KGO_TEST_TLS=ca:"+file("ca.crt")+",cert:"+file("client.crt")+",key:"+file("client.key"),
		"KGO_TEST_SCRAM_SEEDS="+b.proc.Listeners["SASL_PLAINTEXT"],
		"KGO_TEST_SCRAM="+franzScramUser+":"+franzScramPassword+":512")
	f.skip = map[string]string{
		// kgo.Dialer and kgo.DialTLSConfig exclude each other: under
		// KGO_TEST_TLS the test's NewClient fails and it panics on the nil
		// client, which ends the whole run.
		"TestIssue769": "sets kgo.Dialer, which franz-go refuses together with KGO_TEST_TLS's DialTLSConfig",
	}
	f.check()
}

// suiteRun is what one `go test -json` run of the suite reported.
type suiteRun struct {
	result
	status     map[string]string // top-level test -> pass, fail or skip
	subFailed  []string
	subSkipped []string
	outputs    map[string]*strings.Builder
}

func parseSuite(r result) *suiteRun {
	s := &suiteRun{result: r, status: map[string]string{}, outputs: map[string]*strings.Builder{}}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Test == "" {
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		switch ev.Action {
		case "output":
			if s.outputs[top] == nil {
				s.outputs[top] = &strings.Builder{}
			}
			if s.outputs[top].Len() < 256<<10 {
				s.outputs[top].WriteString(ev.Output)
			}
		case "pass", "fail", "skip":
			switch {
			case ev.Test == top:
				s.status[top] = ev.Action
			case ev.Action == "fail":
				s.subFailed = append(s.subFailed, ev.Test)
			case ev.Action == "skip":
				s.subSkipped = append(s.subSkipped, ev.Test)
			}
		}
	}
	return s
}

// by returns the top-level tests with the status, sorted.
func (s *suiteRun) by(status string) []string {
	var names []string
	for name, st := range s.status {
		if st == status {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// output is what a test printed, less the === RUN/PAUSE/CONT lines and
// the suite's cleanup chatter.
func (s *suiteRun) output(name string) string {
	b := s.outputs[name]
	if b == nil {
		return ""
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "=== ") || strings.Contains(l, ": deleting topic ") || strings.Contains(l, ": deleting group ") {
			continue
		}
		out.WriteString(l)
	}
	return out.String()
}

// moduleRoot is the directory of this repository's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	r := runCmd(time.Minute, "", nil, "", "go", "env", "GOMOD")
	if r.err != nil {
		t.Fatalf("go env GOMOD: %v %s", r.err, r.stderr)
	}
	gomod := strings.TrimSpace(r.stdout)
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %q", gomod)
	}
	return filepath.Dir(gomod)
}

// TestKIP511AndInternalOffsetsTopic checks what franz-go's suite relies on
// without asserting it by name: an ApiVersions request at a version above
// ours gets the KIP-511 answer (a v0 response, UNSUPPORTED_VERSION, our
// ApiVersions range), and __consumer_offsets shows up in Metadata as an
// internal topic once a FindCoordinator has been answered.
func TestKIP511AndInternalOffsetsTopic(t *testing.T) {
	b := startBroker(t)

	c, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// Request header v2 (flexible): key 18, version 127, correlation 7,
	// client ID "compat", no tagged fields; the body is never decoded.
	var req bytes.Buffer
	_ = binary.Write(&req, binary.BigEndian, int16(18))
	_ = binary.Write(&req, binary.BigEndian, int16(127))
	_ = binary.Write(&req, binary.BigEndian, int32(7))
	_ = binary.Write(&req, binary.BigEndian, int16(len("compat")))
	req.WriteString("compat")
	req.Write([]byte{0, 0, 0}) // header tags, body: client software name/version would follow
	frame := binary.BigEndian.AppendUint32(nil, uint32(req.Len()))
	if _, err := c.Write(append(frame, req.Bytes()...)); err != nil {
		t.Fatal(err)
	}
	var size int32
	if err := binary.Read(c, binary.BigEndian, &size); err != nil {
		t.Fatalf("reading the answer to ApiVersions v127: %v", err)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != 7 {
		t.Fatalf("correlation ID %d, want 7", corr)
	}
	resp := kmsg.NewApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatalf("answer is not an ApiVersions v0 response: %v (% x)", err, body)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion < 3 {
		t.Fatalf("KIP-511 answer: %+v, want UNSUPPORTED_VERSION and the ApiVersions range", resp)
	}

	cl := b.kgoClient()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "compat-group"
	fc.CoordinatorKeys = []string{"compat-group", "other-group"}
	fr, err := fc.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Coordinators) != 2 {
		t.Fatalf("FindCoordinator with two keys: %+v", fr)
	}
	for _, co := range fr.Coordinators {
		if co.ErrorCode != 0 || co.Key == "" {
			t.Fatalf("coordinator %+v", co)
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("__consumer_offsets")
	md.Topics = append(md.Topics, mt)
	mr, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(mr.Topics) != 1 || mr.Topics[0].ErrorCode != 0 || !mr.Topics[0].IsInternal || len(mr.Topics[0].Partitions) == 0 {
		t.Fatalf("__consumer_offsets in Metadata: %+v", mr.Topics)
	}
}
