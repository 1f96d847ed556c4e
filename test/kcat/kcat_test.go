// Package kcat_test runs kcat (librdkafka) against the real Sushka binary:
// metadata (-L), produce (-P) with every codec, consume (-C -e), and
// interoperation with the sushka CLI helpers.
//
// Without kcat on PATH the tests skip, unless CI is set, where they fail:
// install it with `apt-get update && apt-get install -y kcat` (.ci/run does).
package kcat_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/test/testbroker"
)

func TestMain(m *testing.M) { testbroker.Main(m) }

// kcatPath returns kcat's path, or skips (fails on CI) when it is missing.
func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err == nil {
		return p
	}
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("kcat is not installed and CI=%s: .ci/run must install it (apt-get install -y kcat)", ci)
	}
	t.Skip("kcat is not installed: apt-get update && apt-get install -y kcat (CI installs it and fails without it)")
	return ""
}

type env struct {
	t     *testing.T
	kcat  string
	bin   string
	proc  *testbroker.Proc
	brokr string
}

func setup(t *testing.T) *env {
	t.Helper()
	k := kcatPath(t)
	bin := testbroker.Binary(t)
	p := testbroker.Start(t, bin)
	return &env{t: t, kcat: k, bin: bin, proc: p, brokr: p.Addr}
}

// run runs name with args and stdin, bounded by a minute, and returns stdout.
func (e *env) run(stdin, name string, args ...string) string {
	e.t.Helper()
	out, errOut, err := e.try(stdin, name, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s\nbroker log:\n%s", name, strings.Join(args, " "), err, out, errOut, e.proc.Log())
	}
	return out
}

func (e *env) try(stdin, name string, args ...string) (string, string, error) {
	return testbroker.RunCommand(stdin, name, args...)
}

func (e *env) kc(stdin string, args ...string) string {
	e.t.Helper()
	return e.run(stdin, e.kcat, append([]string{"-b", e.brokr}, args...)...)
}

func (e *env) sushka(stdin string, args ...string) string {
	e.t.Helper()
	return e.run(stdin, e.bin, append(args, "--brokers", e.brokr)...)
}

func TestMetadata(t *testing.T) {
	e := setup(t)
	e.sushka("", "topic", "create", "meta", "-p", "3", "-r", "1")

	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Error      string `json:"error"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				Leader    int32 `json:"leader"`
				Replicas  []struct {
					ID int32 `json:"id"`
				} `json:"replicas"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	out := e.kc("", "-L", "-J", "-t", "meta")
	if err := json.Unmarshal([]byte(out), &md); err != nil {
		t.Fatalf("kcat -L -J: %v\n%s", err, out)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Name != e.brokr {
		t.Fatalf("brokers %+v, want one at %s", md.Brokers, e.brokr)
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != "meta" || md.Topics[0].Error != "" || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("topics %+v", md.Topics)
	}
	for _, p := range md.Topics[0].Partitions {
		if p.Leader != md.Brokers[0].ID || len(p.Replicas) != 1 {
			t.Fatalf("partition %+v (broker %d)", p, md.Brokers[0].ID)
		}
	}

	// The plain listing, as a newcomer sees it.
	out = e.kc("", "-L")
	if !strings.Contains(out, "1 brokers:") || !strings.Contains(out, `topic "meta" with 3 partitions`) {
		t.Fatalf("kcat -L:\n%s", out)
	}
}

func lines(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s-key-%d:%s value %d %s\n", prefix, i, prefix, i, strings.Repeat("x", i%50))
	}
	return b.String()
}

func TestProduceConsumeCodecs(t *testing.T) {
	e := setup(t)
	const n = 300
	acks := map[string]string{"none": "all", "gzip": "1", "snappy": "all", "lz4": "1", "zstd": "all"}
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			e.t = t
			topic := "kcat-" + codec
			e.sushka("", "topic", "create", topic, "-p", "1", "-r", "1")
			in := lines(codec, n)
			// linger so that batches hold many records and the codec
			// has something to work on.
			e.kc(in, "-P", "-t", topic, "-z", codec, "-K", ":", "-X", "linger.ms=20", "-X", "acks="+acks[codec])

			out := e.kc("", "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", `%k:%s\n`)
			if out != in {
				t.Fatalf("kcat consumed %d lines, want %d; first lines:\n%.300s", strings.Count(out, "\n"), n, out)
			}
			// And the same bytes through the sushka CLI.
			out = e.sushka("", "consume", topic, "--offset", "start", "-e", "--format", `%k:%v\n`)
			if out != in {
				t.Fatalf("sushka consume after kcat -z %s: %d lines, want %d", codec, strings.Count(out, "\n"), n)
			}
		})
	}
}

func TestIdempotentProducerAndPartitions(t *testing.T) {
	e := setup(t)
	e.sushka("", "topic", "create", "idem", "-p", "3", "-r", "1")
	in := lines("idem", 100)
	e.kc(in, "-P", "-t", "idem", "-p", "2", "-K", ":", "-X", "enable.idempotence=true", "-X", "acks=all")
	out := e.kc("", "-C", "-t", "idem", "-p", "2", "-o", "beginning", "-e", "-q", "-f", `%k:%s\n`)
	if out != in {
		t.Fatalf("partition 2: %d lines, want 100", strings.Count(out, "\n"))
	}
	for _, p := range []string{"0", "1"} {
		if out := e.kc("", "-C", "-t", "idem", "-p", p, "-o", "beginning", "-e", "-q"); out != "" {
			t.Fatalf("partition %s not empty: %q", p, out)
		}
	}
}

func TestSushkaProduceKcatConsume(t *testing.T) {
	e := setup(t)
	e.sushka("", "topic", "create", "interop", "-p", "1", "-r", "1")
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, "k%d|v%d\n", i, i)
	}
	e.sushka(in.String(), "produce", "interop", "--key-separator", "|", "-H", "origin=cli", "-z", "zstd")

	out := e.kc("", "-C", "-t", "interop", "-o", "beginning", "-e", "-q", "-f", `%p %o %k %s %h\n`)
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != 20 {
		t.Fatalf("%d records, want 20:\n%s", len(got), out)
	}
	for i, l := range got {
		if want := fmt.Sprintf("0 %d k%d v%d origin=cli", i, i, i); l != want {
			t.Fatalf("record %d: %q, want %q", i, l, want)
		}
	}

	// Offsets: the last five, and three from offset 10.
	if out := e.kc("", "-C", "-t", "interop", "-o", "-5", "-e", "-q", "-f", `%o\n`); out != "15\n16\n17\n18\n19\n" {
		t.Fatalf("-o -5: %q", out)
	}
	if out := e.kc("", "-C", "-t", "interop", "-o", "10", "-c", "3", "-q", "-f", `%s\n`); out != "v10\nv11\nv12\n" {
		t.Fatalf("-o 10 -c 3: %q", out)
	}
}
