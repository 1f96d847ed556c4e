package compat_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// librdkafka through kcat (-P with each codec and idempotence, the balanced
// consumer -G) and through Debian's python3-confluent-kafka (AdminClient,
// Producer, Consumer with manual commits).

var codecs = []string{"none", "gzip", "snappy", "lz4", "zstd"}

const perCodec = 200

// kcatLines renders want(prefix, n) as kcat -K : input, in key order.
func kcatLines(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s-k%d:%s value %d %s\n", prefix, i, prefix, i, strings.Repeat("x", i%40))
	}
	return b.String()
}

// parseKcat parses kcat -f '%t %p %o %k:%s\n' output.
func parseKcat(t *testing.T, out string) []record {
	t.Helper()
	var recs []record
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		var r record
		var kv string
		head := strings.SplitN(l, " ", 4)
		if len(head) != 4 {
			t.Fatalf("kcat line %q", l)
		}
		if _, err := fmt.Sscanf(strings.Join(head[:3], " "), "%s %d %d", &r.Topic, &r.Partition, &r.Offset); err != nil {
			t.Fatalf("kcat line %q: %v", l, err)
		}
		kv = head[3]
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			t.Fatalf("kcat line %q", l)
		}
		r.Key, r.Value = k, v
		recs = append(recs, r)
	}
	return recs
}

func TestKcatBalancedConsumer(t *testing.T) {
	kcat := lookTool(t, "kcat", "apt-get install -y kcat")
	debVersions(t, "kcat", "librdkafka1")
	b := startBroker(t)
	const topic, group = "kcat-group", "kcat-g"
	b.run(time.Minute, "", nil, "", b.bin, "topic", "create", topic, "-p", "3", "-r", "1", "--brokers", b.addr)

	all := map[string]string{}
	for _, codec := range codecs {
		prefix := "kcat-" + codec
		for k, v := range want(prefix, perCodec) {
			all[k] = v
		}
		b.run(time.Minute, "", nil, kcatLines(prefix, perCodec), kcat, "-b", b.addr, "-P", "-t", topic, "-K", ":", "-z", codec,
			"-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=20")
	}
	checkRecords(t, "written by kcat -P, read by franz-go", b.readAll(topic, len(all)), all)

	// A balanced consumer that stops after 400 records commits them as it
	// leaves (auto commit of the stored offsets on close).
	consume := func(args ...string) []record {
		base := []string{"-b", b.addr, "-G", group, "-X", "auto.offset.reset=earliest", "-q", "-f", `%t %p %o %k:%s\n`}
		return parseKcat(t, b.run(time.Minute, "", nil, "", kcat, append(append(base, args...), topic)...))
	}
	first := consume("-c", "400")
	if len(first) != 400 {
		t.Fatalf("kcat -G -c 400 consumed %d records", len(first))
	}
	b.checkCommittedCount(group, topic, 400)
	// A new balanced consumer of the same group resumes from there; -e
	// exits once every assigned partition is at its end.
	second := consume("-e")
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)
}

// python3 is Debian's interpreter, where python3-confluent-kafka and
// python3-kafka are installed (a python3 earlier on PATH, pyenv's for one,
// does not see them).
const debPython = "/usr/bin/python3"

// pythonModule returns debPython after checking that it imports module,
// or skips (fails on CI).
func pythonModule(t *testing.T, module, pkg string) string {
	t.Helper()
	if _, err := os.Stat(debPython); err != nil {
		missing(t, debPython, "apt-get install -y "+pkg)
	}
	if r := runCmd(30*time.Second, "", nil, "", debPython, "-c", "import "+module); r.err != nil {
		missing(t, "python module "+module, "apt-get install -y "+pkg)
	}
	return debPython
}

// pyRecords parses JSON lines of records.
func pyRecords(t *testing.T, out string) []record {
	t.Helper()
	var recs []record
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestConfluentKafkaPython(t *testing.T) {
	py := pythonModule(t, "confluent_kafka", "python3-confluent-kafka")
	debVersions(t, "python3-confluent-kafka", "librdkafka1")
	b := startBroker(t)
	script, err := filepath.Abs("python/confluent_client.py")
	if err != nil {
		t.Fatal(err)
	}
	client := func(timeout time.Duration, args ...string) string {
		return b.run(timeout, "", nil, "", py, append([]string{script, b.addr}, args...)...)
	}
	const topic, group = "confluent", "confluent-g"
	t.Logf("admin: %s", strings.TrimSpace(client(time.Minute, "admin", topic, "3")))

	all := map[string]string{}
	for _, codec := range codecs {
		prefix := "confluent-" + codec
		for k, v := range want(prefix, perCodec) {
			all[k] = v
		}
		out := client(time.Minute, "produce", topic, prefix, fmt.Sprint(perCodec), codec, "1")
		if !strings.Contains(out, fmt.Sprintf(`"delivered": %d`, perCodec)) {
			t.Fatalf("produce %s: %s", codec, out)
		}
	}
	checkRecords(t, "written by confluent-kafka, read by franz-go", b.readAll(topic, len(all)), all)

	first := pyRecords(t, client(time.Minute, "consume", topic, group, "400", "40"))
	if len(first) != 400 {
		t.Fatalf("first consumer got %d records, want 400", len(first))
	}
	b.checkCommittedCount(group, topic, 400)
	second := pyRecords(t, client(time.Minute, "consume", topic, group, fmt.Sprint(len(all)-400), "40"))
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)
}
