// Package compat_test runs clients nobody here wrote against the real Sushka
// binary (built once, started as a child process on a free 127.0.0.1 port
// with a temporary data directory, see test/testbroker) and checks counts
// and contents:
//
//   - franz-go's own integration suite (github.com/twmb/franz-go/pkg/kgo's
//     tests, run in place from the module cache with KGO_SEEDS pointing at
//     the broker): franzgo_test.go;
//   - librdkafka: kcat's balanced consumer (-G) and Debian's
//     python3-confluent-kafka: librdkafka_test.go;
//   - IBM/sarama and segmentio/kafka-go, in process: sarama_test.go,
//     kafkago_test.go;
//   - kafkajs (npm, test/compat/kafkajs) and Debian's python3-kafka:
//     kafkajs_test.go, kafkapython_test.go;
//   - every one of them with TLS, SASL (SCRAM-SHA-512, PLAIN) and ACLs:
//     security_*_test.go (the story is in security_test.go), and
//     franz-go's suite over TLS with its SCRAM tests (franzgo_test.go).
//
// A client that is not installed makes its test skip, unless CI is set,
// where the test fails: .ci/run installs them all (apt-get install -y kcat
// python3-confluent-kafka python3-kafka; npm ci in test/compat/kafkajs).
// Each test logs the client versions it verified.
//
// Every client goes through the same story where it can: create a topic
// with its admin API, produce keyed records (idempotent where the client
// supports it, with each compression codec it has), consume part of them
// in a consumer group and commit, then resume in a new consumer of the same
// group and get exactly the rest. franz-go (kgo, kadm) checks what the
// client wrote and what the broker holds as committed offsets.
package compat_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/test/testbroker"
)

func TestMain(m *testing.M) { testbroker.Main(m) }

// onCI reports whether CI is set (to anything but "", "false" or "0").
func onCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// missing skips the test because a client is not installed, or fails it on
// CI, where .ci/run must have installed it.
func missing(t *testing.T, what, install string) {
	t.Helper()
	if onCI() {
		t.Fatalf("%s is not installed and CI=%s: .ci/run must install it (%s)", what, os.Getenv("CI"), install)
	}
	t.Skipf("%s is not installed: %s (CI installs it and fails without it)", what, install)
}

// lookTool returns the path of an executable, or skips (fails on CI).
func lookTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, name, install)
	}
	return p
}

// broker is a started sushka binary and a franz-go client to check it.
type broker struct {
	t    *testing.T
	bin  string
	proc *testbroker.Proc
	addr string
	opts []kgo.Opt // of every franz-go client on the broker (SASL for a secure one)
}

func startBroker(t *testing.T, extraArgs ...string) *broker {
	t.Helper()
	bin := testbroker.Binary(t)
	p := testbroker.Start(t, bin, extraArgs...)
	return &broker{t: t, bin: bin, proc: p, addr: p.Addr}
}

// kgoClient returns a franz-go client on the broker, closed when the test
// ends.
func (b *broker) kgoClient(opts ...kgo.Opt) *kgo.Client {
	b.t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(b.addr)}, b.opts...), opts...)...)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return cl
}

func (b *broker) admin() *kadm.Client { return kadm.NewClient(b.kgoClient()) }

// result is what a child process did.
type result struct {
	stdout, stderr string
	err            error
}

// run runs a command bounded by timeout, in dir when not "", with extra
// environment variables; it fails the test (with the broker's log) when the
// command fails.
func (b *broker) run(timeout time.Duration, dir string, env []string, stdin string, name string, args ...string) string {
	b.t.Helper()
	r := runCmd(timeout, dir, env, stdin, name, args...)
	if r.err != nil {
		b.t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s\nbroker log:\n%s", name, strings.Join(args, " "), r.err, tail(r.stdout, 4000), tail(r.stderr, 8000), tail(b.proc.Log(), 4000))
	}
	return r.stdout
}

func runCmd(timeout time.Duration, dir string, env []string, stdin string, name string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	return result{out.String(), errOut.String(), err}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// record is a record as the tests compare them.
type record struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

// want is the n records a client produces in the tests: key k<i>, value
// "<prefix> value <i>" padded so that codecs have something to squeeze.
func want(prefix string, n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("%s-k%d", prefix, i)] = fmt.Sprintf("%s value %d %s", prefix, i, strings.Repeat("x", i%40))
	}
	return m
}

// readAll consumes a topic from the start with franz-go until it has n
// records (or 30 s pass) and returns them.
func (b *broker) readAll(topic string, n int) []record {
	b.t.Helper()
	cl := b.kgoClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
		})
	}
	// A little longer, to see records that should not be there.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	cl.PollFetches(ctx2).EachRecord(func(r *kgo.Record) {
		out = append(out, record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
	})
	return out
}

// checkRecords checks that got holds exactly the records of w, each once.
func checkRecords(t *testing.T, what string, got []record, w map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range got {
		v, ok := w[r.Key]
		if !ok {
			t.Fatalf("%s: unexpected record %+v", what, r)
		}
		if r.Value != v {
			t.Fatalf("%s: record %s has value %q, want %q", what, r.Key, r.Value, v)
		}
		if seen[r.Key] {
			t.Fatalf("%s: record %s (%s/%d@%d) seen twice", what, r.Key, r.Topic, r.Partition, r.Offset)
		}
		seen[r.Key] = true
	}
	if len(seen) != len(w) {
		t.Fatalf("%s: %d records, want %d", what, len(seen), len(w))
	}
}

// checkResume checks a group consume in two runs: first got the records
// the first consumer committed, second the rest, exactly once overall.
func checkResume(t *testing.T, first, second []record, w map[string]string) {
	t.Helper()
	all := append(append([]record{}, first...), second...)
	checkRecords(t, "first consumer + resumed consumer", all, w)
	if len(first) == 0 || len(second) == 0 {
		t.Fatalf("first consumer got %d records, resumed consumer %d: want both > 0", len(first), len(second))
	}
}

// committed returns the group's committed offsets for topic by partition,
// as the broker answers an admin's OffsetFetch.
func (b *broker) committed(group, topic string) map[int32]int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := b.admin().FetchOffsets(ctx, group)
	if err != nil {
		b.t.Fatalf("fetching %s's offsets: %v", group, err)
	}
	m := map[int32]int64{}
	for p, o := range offs[topic] {
		if o.Err != nil {
			b.t.Fatalf("offset of %s/%d: %v", topic, p, o.Err)
		}
		m[p] = o.At
	}
	return m
}

// checkCommittedAtEnd checks that the group committed every partition's
// high watermark: it consumed everything.
func (b *broker) checkCommittedAtEnd(group, topic string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := b.admin().ListEndOffsets(ctx, topic)
	if err != nil {
		b.t.Fatal(err)
	}
	got := b.committed(group, topic)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 && got[o.Partition] != o.Offset {
			b.t.Fatalf("group %s committed %d for %s/%d, want the end %d (all: %v)", group, got[o.Partition], topic, o.Partition, o.Offset, got)
		}
	})
}

// checkCommittedCount checks that the committed offsets add up to n
// records (topics written from offset 0 with no gaps).
func (b *broker) checkCommittedCount(group, topic string, n int) {
	b.t.Helper()
	var sum int64
	got := b.committed(group, topic)
	for _, o := range got {
		sum += o
	}
	if sum != int64(n) {
		b.t.Fatalf("group %s committed %v on %s: %d records, want %d", group, got, topic, sum, n)
	}
}

// goModuleVersions logs the versions of Go modules as this module
// requires them (go list -m).
func goModuleVersions(t *testing.T, paths ...string) string {
	t.Helper()
	r := runCmd(time.Minute, "", nil, "", "go", append([]string{"list", "-m"}, paths...)...)
	if r.err != nil {
		t.Fatalf("go list -m %s: %v\n%s", strings.Join(paths, " "), r.err, r.stderr)
	}
	s := strings.Join(strings.Fields(strings.ReplaceAll(r.stdout, "\n", ", ")), " ")
	s = strings.TrimSuffix(s, ",")
	t.Logf("client versions (go list -m): %s", s)
	return s
}

// debVersions logs the Debian packages' versions (dpkg-query -W).
func debVersions(t *testing.T, pkgs ...string) {
	t.Helper()
	r := runCmd(10*time.Second, "", nil, "", "dpkg-query", append([]string{"-W", "-f", "${Package} ${Version}\\n"}, pkgs...)...)
	t.Logf("client versions (dpkg-query -W):\n%s%s", r.stdout, r.stderr)
}
