package compat_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kafka-python (Debian's python3-kafka) through
// test/compat/python/kafka_python_client.py: KafkaAdminClient (create,
// describe and list topics, describe cluster, list/describe/delete groups,
// list group offsets), KafkaProducer with each codec (python3-snappy,
// python3-lz4, python3-zstandard; kafka-python 2.0 has no idempotent
// producer), and a KafkaConsumer that commits 400 records, then a new one
// that resumes with exactly the rest.

func TestKafkaPython(t *testing.T) {
	py := pythonModule(t, "kafka", "python3-kafka")
	for _, m := range []string{"snappy", "lz4.frame", "zstandard"} {
		pythonModule(t, m, "python3-snappy python3-lz4 python3-zstandard")
	}
	debVersions(t, "python3-kafka", "python3-snappy", "python3-lz4", "python3-zstandard")
	b := startBroker(t)
	script, err := filepath.Abs("python/kafka_python_client.py")
	if err != nil {
		t.Fatal(err)
	}
	client := func(args ...string) string {
		return b.run(time.Minute, "", nil, "", py, append([]string{script, b.addr}, args...)...)
	}
	const topic, group = "kafka-python", "kafka-python-g"

	var adm struct {
		Listed              bool
		Partitions, Brokers int
		Version             string
		APIVersion          string `json:"api_version"`
	}
	if err := json.Unmarshal([]byte(client("admin", topic, "3")), &adm); err != nil {
		t.Fatal(err)
	}
	if !adm.Listed || adm.Partitions != 3 || adm.Brokers != 1 {
		t.Fatalf("kafka-python admin: %+v", adm)
	}
	t.Logf("kafka-python %s detected broker api_version %s", adm.Version, adm.APIVersion)

	all := map[string]string{}
	for _, codec := range codecs {
		prefix := "kafka-python-" + codec
		for k, v := range want(prefix, perCodec) {
			all[k] = v
		}
		if out := client("produce", topic, prefix, fmt.Sprint(perCodec), codec); !strings.Contains(out, fmt.Sprintf(`"delivered": %d`, perCodec)) {
			t.Fatalf("produce %s: %s", codec, out)
		}
	}
	checkRecords(t, "written by kafka-python, read by franz-go", b.readAll(topic, len(all)), all)

	first := pyRecords(t, client("consume", topic, group, "400", "40"))
	if len(first) != 400 {
		t.Fatalf("first consumer got %d records, want 400", len(first))
	}
	b.checkCommittedCount(group, topic, 400)
	second := pyRecords(t, client("consume", topic, group, fmt.Sprint(len(all)-400), "40"))
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)

	lines := strings.Split(strings.TrimSpace(client("groups", topic, group)), "\n")
	var groups struct {
		Committed []struct{ Partition, Offset int64 }
		Listed    []string
		State     string
	}
	var after struct {
		AfterDelete []string `json:"after_delete"`
	}
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &groups) != nil || json.Unmarshal([]byte(lines[1]), &after) != nil {
		t.Fatalf("kafka-python groups: %q", lines)
	}
	var sum int64
	for _, c := range groups.Committed {
		sum += c.Offset
	}
	if len(groups.Committed) != 3 || sum != int64(len(all)) || len(groups.Listed) != 1 || groups.Listed[0] != "consumer" || groups.State != "Empty" || len(after.AfterDelete) != 0 {
		t.Fatalf("kafka-python groups: %+v, after delete: %v", groups, after.AfterDelete)
	}
}
