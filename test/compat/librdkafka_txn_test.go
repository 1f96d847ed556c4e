package compat_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Transactions through librdkafka: kcat -P with transactional.id (it
// commits once its input ends) and confluent-kafka-python's
// init_transactions / commit_transaction / abort_transaction; consumers
// with isolation.level=read_committed (kcat -C, confluent-kafka-python) see
// exactly the committed records, franz-go's read_uncommitted reader all.
func TestLibrdkafkaTransactions(t *testing.T) {
	kcat := lookTool(t, "kcat", "apt-get install -y kcat")
	py := pythonModule(t, "confluent_kafka", "python3-confluent-kafka")
	debVersions(t, "kcat", "librdkafka1", "python3-confluent-kafka")
	b := startBroker(t)
	script, err := filepath.Abs("python/confluent_client.py")
	if err != nil {
		t.Fatal(err)
	}
	const topic = "librdkafka-txn"
	b.run(time.Minute, "", nil, "", b.bin, "topic", "create", topic, "-p", "3", "-r", "1", "--brokers", b.addr)

	committed, all := map[string]string{}, map[string]string{}
	add := func(prefix string, n int, isCommitted bool) {
		for k, v := range want(prefix, n) {
			all[k] = v
			if isCommitted {
				committed[k] = v
			}
		}
	}
	// kcat exits non-zero (the run fails) if its commit fails.
	b.run(time.Minute, "", nil, kcatLines("kcat-txn", 50), kcat, "-b", b.addr, "-P", "-t", topic, "-K", ":",
		"-X", "transactional.id=kcat-txn")
	add("kcat-txn", 50, true)
	client := func(args ...string) string {
		return b.run(time.Minute, "", nil, "", py, append([]string{script, b.addr}, args...)...)
	}
	for i, commit := range []bool{true, false, true} {
		prefix := fmt.Sprintf("py-txn-%d", i)
		flag := "0"
		if commit {
			flag = "1"
		}
		if out := client("txn", topic, prefix, "40", flag); !strings.Contains(out, `"records": 40`) {
			t.Fatalf("python transaction %s: %s", prefix, out)
		}
		add(prefix, 40, commit)
	}

	checkRecords(t, "confluent-kafka-python read_committed", pyRecords(t, client("read_committed", topic, "3")), committed)
	kcatOut := b.run(time.Minute, "", nil, "", kcat, "-b", b.addr, "-C", "-t", topic, "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", `%t %p %o %k:%s\n`)
	checkRecords(t, "kcat -C read_committed", parseKcat(t, kcatOut), committed)
	checkRecords(t, "confluent-kafka-python read_uncommitted", pyRecords(t, client("read_uncommitted", topic, "3")), all)
	kcatOut = b.run(time.Minute, "", nil, "", kcat, "-b", b.addr, "-C", "-t", topic, "-e", "-q",
		"-X", "isolation.level=read_uncommitted", "-f", `%t %p %o %k:%s\n`)
	checkRecords(t, "kcat -C read_uncommitted", parseKcat(t, kcatOut), all)
	checkRecords(t, "franz-go read_uncommitted", b.readAll(topic, len(all)), all)
}
