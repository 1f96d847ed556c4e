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

// kafkajs (npm, pinned by test/compat/kafkajs/package-lock.json) in node,
// driven through test/compat/kafkajs/client.js: admin (createTopics,
// fetchTopicMetadata, listTopics, describeCluster, fetchOffsets,
// listGroups, describeGroups, fetchTopicOffsets), the idempotent producer
// with no compression, gzip and snappy (kafkajs-snappy; LZ4 and ZSTD need
// native codec packages and are not tested), and a group consumer that
// commits 400 records, then a new one that resumes with exactly the rest.

// kafkajsDir returns test/compat/kafkajs with its node_modules installed
// (npm ci when they are missing), or skips (fails on CI) without node.
func kafkajsDir(t *testing.T) string {
	t.Helper()
	lookTool(t, "node", "apt-get install -y nodejs")
	npm := lookTool(t, "npm", "apt-get install -y npm")
	dir, err := filepath.Abs("kafkajs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err != nil {
		t.Logf("npm ci in %s", dir)
		if r := runCmd(5*time.Minute, dir, nil, "", npm, "ci", "--no-audit", "--no-fund"); r.err != nil {
			if onCI() {
				t.Fatalf("npm ci: %v\n%s%s", r.err, r.stdout, r.stderr)
			}
			t.Skipf("npm ci failed (no registry?): %v\n%s", r.err, tail(r.stderr, 2000))
		}
	}
	r := runCmd(time.Minute, dir, nil, "", npm, "ls", "--depth=0")
	node := runCmd(time.Minute, dir, nil, "", "node", "--version")
	t.Logf("client versions (npm ls, node %s):\n%s", strings.TrimSpace(node.stdout), r.stdout)
	if r.err != nil {
		t.Fatalf("npm ls: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	return dir
}

func TestKafkaJS(t *testing.T) {
	dir := kafkajsDir(t)
	b := startBroker(t)
	env := []string{"KAFKAJS_NO_PARTITIONER_WARNING=1"}
	client := func(args ...string) string {
		return b.run(2*time.Minute, dir, env, "", "node", append([]string{"client.js", b.addr}, args...)...)
	}
	const topic, group = "kafkajs", "kafkajs-g"

	var adm struct {
		Created, Again, Listed bool
		Partitions, Brokers    int
	}
	if err := json.Unmarshal([]byte(client("admin", topic, "3")), &adm); err != nil {
		t.Fatal(err)
	}
	if !adm.Created || adm.Again || !adm.Listed || adm.Partitions != 3 || adm.Brokers != 1 {
		t.Fatalf("kafkajs admin: %+v (want created, not created again, listed, 3 partitions, 1 broker)", adm)
	}

	all := map[string]string{}
	for _, codec := range []string{"none", "gzip", "snappy"} {
		prefix := "kafkajs-" + codec
		for k, v := range want(prefix, perCodec) {
			all[k] = v
		}
		if out := client("produce", topic, prefix, fmt.Sprint(perCodec), codec); !strings.Contains(out, fmt.Sprintf(`"delivered":%d`, perCodec)) {
			t.Fatalf("produce %s: %s", codec, out)
		}
	}
	checkRecords(t, "written by kafkajs, read by franz-go", b.readAll(topic, len(all)), all)

	first := pyRecords(t, client("consume", topic, group, "250", "60"))
	if len(first) != 250 {
		t.Fatalf("first consumer got %d records, want 250", len(first))
	}
	b.checkCommittedCount(group, topic, 250)
	second := pyRecords(t, client("consume", topic, group, fmt.Sprint(len(all)-250), "60"))
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)

	var groups struct {
		Committed, Ends []struct{ Partition, Offset int64 }
		Listed          []string
		State           string
	}
	if err := json.Unmarshal([]byte(client("groups", topic, group)), &groups); err != nil {
		t.Fatal(err)
	}
	ends := map[int64]int64{}
	for _, e := range groups.Ends {
		ends[e.Partition] = e.Offset
	}
	var sum int64
	for _, c := range groups.Committed {
		if c.Offset != ends[c.Partition] {
			t.Fatalf("kafkajs fetchOffsets: %+v, ends %+v", groups.Committed, groups.Ends)
		}
		sum += c.Offset
	}
	if len(groups.Committed) != 3 || sum != int64(len(all)) || len(groups.Listed) != 1 || groups.Listed[0] != "consumer" || groups.State != "Empty" {
		t.Fatalf("kafkajs groups: %+v", groups)
	}
}
