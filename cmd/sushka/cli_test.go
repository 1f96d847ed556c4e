package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sushka-io/sushka/test/testbroker"
)

// runCLI runs the client commands in-process against brokers with a fresh
// command tree (so flag values do not leak between runs).
func runCLI(t *testing.T, brokers, stdin string, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sushka", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newTopicCmd(), newProduceCmd(), newConsumeCmd(), newGroupCmd(), newTxnCmd(), newUserCmd())
	full := append(append([]string{}, args...), "--brokers", brokers)
	if !strings.Contains(strings.Join(args, " "), "--timeout") {
		full = append(full, "--timeout", "5s")
	}
	root.SetArgs(full)
	var out, errb bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func mustCLI(t *testing.T, brokers, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, brokers, stdin, args...)
	if err != nil {
		t.Fatalf("sushka %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// rowWith returns the whitespace-separated fields of the first line of out
// whose first field is first.
func rowWith(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

func TestTopicCommands(t *testing.T) {
	b := testbroker.StartInProcess(t)

	out := mustCLI(t, b, "", "topic", "create", "alpha", "beta", "-p", "3", "-r", "1", "-c", "retention.ms=3600000")
	if f := rowWith(out, "alpha"); len(f) < 2 || f[1] != "OK" {
		t.Fatalf("create output:\n%s", out)
	}

	// Creating it again names Kafka's error and gives a hint.
	out, _, err := runCLI(t, b, "", "topic", "create", "alpha", "-p", "1", "-r", "1")
	t.Logf("re-create:\n%s%v", out, err)
	if err == nil || !strings.Contains(out, "TOPIC_ALREADY_EXISTS") || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("re-create: err=%v\n%s", err, out)
	}

	out = mustCLI(t, b, "", "topic", "list")
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(strings.Split(out, "\n")[0], "PARTITIONS") {
		t.Fatalf("list header:\n%s", out)
	}
	if f := rowWith(out, "alpha"); len(f) != 3 || f[1] != "3" || f[2] != "1" {
		t.Fatalf("list row for alpha: %q\n%s", f, out)
	}
	if rowWith(out, "beta") == nil {
		t.Fatalf("beta missing:\n%s", out)
	}

	// Put two records in partition 1 so describe shows a high watermark.
	mustCLI(t, b, "x\ny\n", "produce", "alpha", "--partition", "1")
	out = mustCLI(t, b, "", "topic", "describe", "alpha")
	for _, want := range []string{"SUMMARY", "CONFIGS", "PARTITIONS", "HIGH-WATERMARK", "LOG-START-OFFSET"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %s:\n%s", want, out)
		}
	}
	if f := rowWith(out, "retention.ms"); len(f) < 2 || f[1] != "3600000" {
		t.Fatalf("describe retention.ms = %q:\n%s", f, out)
	}
	if f := rowWith(out, "1"); len(f) != 6 || f[4] != "0" || f[5] != "2" {
		t.Fatalf("describe partition 1 = %q (want start 0, hwm 2):\n%s", f, out)
	}

	t.Logf("describe:\n%s", out)
	out = mustCLI(t, b, "", "topic", "alter-config", "alpha", "--set", "retention.ms=7200000", "--set", "cleanup.policy=delete")
	if f := rowWith(out, "alpha"); len(f) < 2 || f[1] != "OK" {
		t.Fatalf("alter-config:\n%s", out)
	}
	out = mustCLI(t, b, "", "topic", "describe", "alpha")
	if f := rowWith(out, "retention.ms"); len(f) < 2 || f[1] != "7200000" {
		t.Fatalf("after --set retention.ms = %q:\n%s", f, out)
	}
	mustCLI(t, b, "", "topic", "alter-config", "alpha", "--delete", "retention.ms")
	out = mustCLI(t, b, "", "topic", "describe", "alpha")
	if f := rowWith(out, "retention.ms"); len(f) >= 2 && f[1] == "7200000" {
		t.Fatalf("retention.ms still set after --delete:\n%s", out)
	}

	out = mustCLI(t, b, "", "topic", "delete", "alpha", "beta")
	if f := rowWith(out, "beta"); len(f) < 2 || f[1] != "OK" {
		t.Fatalf("delete:\n%s", out)
	}
	out = mustCLI(t, b, "", "topic", "list")
	if rowWith(out, "alpha") != nil || rowWith(out, "beta") != nil {
		t.Fatalf("deleted topics still listed:\n%s", out)
	}

	_, _, err = runCLI(t, b, "", "topic", "describe", "alpha")
	if err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("describe of a deleted topic: %v", err)
	}
}

func TestProduceConsume(t *testing.T) {
	b := testbroker.StartInProcess(t)
	mustCLI(t, b, "", "topic", "create", "orders", "-p", "1", "-r", "1")

	var in strings.Builder
	for i := range 10 {
		fmt.Fprintf(&in, "k%d:v%d\n", i, i)
	}
	_, errOut, err := runCLI(t, b, in.String(), "produce", "orders", "--key-separator", ":", "-H", "src=test")
	if err != nil {
		t.Fatalf("produce: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "produced 10 records") {
		t.Fatalf("produce summary: %q", errOut)
	}

	want := func(from, to int) string {
		var s strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&s, "k%d=v%d\n", i, i)
		}
		return s.String()
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"start -n", []string{"--offset", "start", "-n", "10"}, want(0, 10)},
		{"start -n 3", []string{"--offset", "start", "-n", "3"}, want(0, 3)},
		{"start -e", []string{"--offset", "start", "-e"}, want(0, 10)},
		{"absolute", []string{"--offset", "4", "-n", "3"}, want(4, 7)},
		{"absolute -e", []string{"--offset", "7", "-e"}, want(7, 10)},
		{"relative", []string{"--offset", "-2", "-n", "2"}, want(8, 10)},
		{"relative past start", []string{"--offset", "-100", "-e"}, want(0, 10)},
		{"end -e", []string{"--offset", "end", "-e"}, ""},
		{"time 0", []string{"--time", "0", "-e"}, want(0, 10)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"consume", "orders", "--format", `%k=%v\n`}, c.args...)
			out := mustCLI(t, b, "", args...)
			if out != c.want {
				t.Fatalf("got:\n%s\nwant:\n%s", out, c.want)
			}
		})
	}

	t.Run("format tokens", func(t *testing.T) {
		out := mustCLI(t, b, "", "consume", "orders", "--offset", "2", "-n", "1",
			"--format", `%t|%p|%o|%k|%v|%s|%K|%S|%h|%T|100%%\n`)
		f := strings.Split(strings.TrimSuffix(out, "\n"), "|")
		if len(f) != 11 {
			t.Fatalf("format output %q", out)
		}
		got := strings.Join(append(f[:9:9], f[10]), "|")
		if got != "orders|0|2|k2|v2|v2|2|2|src=test|100%" {
			t.Fatalf("format output %q", out)
		}
		ts, err := strconv.ParseInt(f[9], 10, 64)
		if err != nil || time.Since(time.UnixMilli(ts)).Abs() > time.Hour {
			t.Fatalf("timestamp %q", f[9])
		}
	})

	t.Run("json", func(t *testing.T) {
		out := mustCLI(t, b, "", "consume", "orders", "--offset", "start", "-n", "2", "--format", "json")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("json output:\n%s", out)
		}
		for i, l := range lines {
			var r jsonRecord
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if r.Topic != "orders" || r.Offset != int64(i) || r.Key == nil || *r.Key != fmt.Sprintf("k%d", i) ||
				r.Value == nil || *r.Value != fmt.Sprintf("v%d", i) || len(r.Headers) != 1 || r.Headers[0].Key != "src" {
				t.Fatalf("json record %d: %s", i, l)
			}
		}
	})

	t.Run("time", func(t *testing.T) {
		time.Sleep(20 * time.Millisecond)
		cut := time.Now()
		time.Sleep(20 * time.Millisecond)
		mustCLI(t, b, "late1\nlate2\n", "produce", "orders")
		out := mustCLI(t, b, "", "consume", "orders", "--time", cut.UTC().Format(time.RFC3339Nano), "-e")
		if out != "late1\nlate2\n" {
			t.Fatalf("--time RFC3339: %q", out)
		}
		out = mustCLI(t, b, "", "consume", "orders", "--time", strconv.FormatInt(cut.UnixMilli()+1, 10), "-n", "2")
		if out != "late1\nlate2\n" {
			t.Fatalf("--time ms: %q", out)
		}
	})

	t.Run("end waits for new records", func(t *testing.T) {
		type res struct {
			out string
			err error
		}
		done := make(chan res, 1)
		go func() {
			out, _, err := runCLI(t, b, "", "consume", "orders", "--offset", "end", "-n", "1")
			done <- res{out, err}
		}()
		// The consumer resolves the end offset when it starts; keep
		// producing (bounded) until it has seen one record.
		for i := 0; i < 100; i++ {
			mustCLI(t, b, "fresh\n", "produce", "orders")
			select {
			case r := <-done:
				if r.err != nil || r.out != "fresh\n" {
					t.Fatalf("consume --offset end: %q %v", r.out, r.err)
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		t.Fatal("consume --offset end -n 1 did not return")
	})
}

func TestProduceCodecsAndPartitions(t *testing.T) {
	b := testbroker.StartInProcess(t)
	mustCLI(t, b, "", "topic", "create", "multi", "-p", "3", "-r", "1")
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	for p, codec := range codecs {
		part := p % 3
		var in strings.Builder
		for i := range 50 {
			fmt.Fprintf(&in, "%s-%03d %s\n", codec, i, strings.Repeat("payload ", 8))
		}
		_, errOut, err := runCLI(t, b, in.String(), "produce", "multi", "-z", codec, "--partition", strconv.Itoa(part), "--acks", []string{"all", "1", "all", "-1", "1"}[p], "--linger", "5ms")
		if err != nil || !strings.Contains(errOut, "produced 50 records") {
			t.Fatalf("produce -z %s: %v %s", codec, err, errOut)
		}
	}
	// acks=1 records are acknowledged before they are visible (design
	// D14; up to --sync-interval later): consume to the end until they are.
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out := mustCLI(t, b, "", "consume", "multi", "--offset", "start", "-e", "--format", `%p %v\n`)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) >= 250 || time.Now().After(deadline) {
			break
		}
	}
	if len(lines) != 250 {
		t.Fatalf("consumed %d lines, want 250", len(lines))
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var part int
		var key string
		if _, err := fmt.Sscanf(l, "%d %s", &part, &key); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		codec := key[:strings.IndexByte(key, '-')]
		if want := slices.Index(codecs, codec) % 3; part != want {
			t.Fatalf("%s in partition %d, want %d", key, part, want)
		}
		seen[key] = true
	}
	if len(seen) != 250 {
		t.Fatalf("%d distinct records, want 250", len(seen))
	}

	// One partition only.
	out := mustCLI(t, b, "", "consume", "multi", "--offset", "start", "-e", "--partition", "2", "--format", `%p\n`)
	if n := strings.Count(out, "2\n"); n != 50 || len(out) != 100 {
		t.Fatalf("--partition 2: %d records, out %d bytes", n, len(out))
	}
}

func TestConsumeErrors(t *testing.T) {
	b := testbroker.StartInProcess(t)
	_, _, err := runCLI(t, b, "", "consume", "nope", "--offset", "start", "-e")
	if err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("consume of a missing topic: %v", err)
	}
	if _, _, err := runCLI(t, b, "", "consume", "x", "--offset", "soon"); err == nil {
		t.Fatal("bad --offset accepted")
	}
	// --group: either the broker serves groups and the consume works, or
	// the command says at once that it does not.
	mustCLI(t, b, "g1\ng2\n", "produce", "grouped")
	out, _, err := runCLI(t, b, "", "consume", "grouped", "--group", "cli-test", "--offset", "start", "-n", "2")
	if err != nil && !strings.Contains(err.Error(), "does not serve consumer groups") {
		t.Fatalf("consume --group: %v", err)
	}
	if err == nil && out != "g1\ng2\n" {
		t.Fatalf("consume --group: %q", out)
	}
	if _, _, err := runCLI(t, b, "", "consume", "x", "--offset", "soon"); err == nil {
		t.Fatal("bad --offset accepted")
	}
	if _, _, err := runCLI(t, b, "", "consume", "x", "--format", "%q"); err == nil {
		t.Fatal("bad --format accepted")
	}
	if _, _, err := runCLI(t, b, "", "produce", "x", "--acks", "2"); err == nil {
		t.Fatal("bad --acks accepted")
	}
	// Nothing listens on this port: the error says what to do.
	_, _, err = runCLI(t, "127.0.0.1:1", "", "topic", "list", "--timeout", "1s")
	t.Logf("no broker: %v", err)
	if err == nil || !strings.Contains(err.Error(), "sushka serve") {
		t.Fatalf("no broker: %v", err)
	}
}

func TestFormatter(t *testing.T) {
	if _, err := newFormatter(`%v\n`); err != nil {
		t.Fatal(err)
	}
	f, err := newFormatter(`a\tb\\%%`)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(f.append(nil, nil)); got != "a\tb\\%" {
		t.Fatalf("%q", got)
	}
}
