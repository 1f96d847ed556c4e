package compat_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// kafkajs' transaction(): send and sendOffsets in a transaction, committed
// or aborted. Its consumer (read_committed by default) sees exactly the
// committed records, and the group's offset is the committed
// transaction's, not the aborted one's.
func TestKafkaJSTransactions(t *testing.T) {
	dir := kafkajsDir(t)
	b := startBroker(t)
	env := []string{"KAFKAJS_NO_PARTITIONER_WARNING=1"}
	client := func(args ...string) string {
		return b.run(2*time.Minute, dir, env, "", "node", append([]string{"client.js", b.addr}, args...)...)
	}
	const topic, in, group = "kafkajs-txn", "kafkajs-txn-in", "kafkajs-txn-g"
	b.run(time.Minute, "", nil, "", b.bin, "topic", "create", topic, "-p", "3", "-r", "1", "--brokers", b.addr)
	b.run(time.Minute, "", nil, "", b.bin, "topic", "create", in, "-p", "1", "-r", "1", "--brokers", b.addr)
	b.run(time.Minute, "", nil, "a\nb\nc\nd\ne\n", b.bin, "produce", in, "--brokers", b.addr)

	committed, all := map[string]string{}, map[string]string{}
	for i, tc := range []struct {
		commit   bool
		inOffset int
	}{{true, 2}, {false, 5}, {true, 3}} {
		prefix := fmt.Sprintf("kafkajs-txn-%d", i)
		flag := "0"
		if tc.commit {
			flag = "1"
		}
		if out := client("txn", topic, prefix, "30", flag, group, in, fmt.Sprint(tc.inOffset)); !strings.Contains(out, `"records":30`) {
			t.Fatalf("transaction %s: %s", prefix, out)
		}
		for k, v := range want(prefix, 30) {
			all[k] = v
			if tc.commit {
				committed[k] = v
			}
		}
	}
	checkRecords(t, "kafkajs consumer (read_committed)", pyRecords(t, client("read", topic, fmt.Sprint(len(committed)), "20")), committed)
	checkRecords(t, "kafkajs consumer (readUncommitted)", pyRecords(t, client("read", topic, fmt.Sprint(len(all)), "20", "uncommitted")), all)
	checkRecords(t, "franz-go read_uncommitted", b.readAll(topic, len(all)), all)
	if got := b.committed(group, in); got[0] != 3 {
		t.Fatalf("group %s committed %v on %s, want 3 (the last committed transaction's; the aborted one's 5 dropped)", group, got, in)
	}
}
