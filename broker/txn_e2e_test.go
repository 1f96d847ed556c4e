package broker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// consumeIsolated reads topic from the start with isolation until it has n
// records or the deadline passes, and returns their values sorted.
func consumeIsolated(t *testing.T, tb *testBroker, topic string, n int, isolation kgo.IsolationLevel) []string {
	t.Helper()
	cl := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	sort.Strings(got)
	return got
}

// A franz-go transactional producer commits one transaction and aborts
// the next: a read_committed consumer sees exactly the committed records,
// a read_uncommitted one both.
func TestTransactionalProducerCommitAbort(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 30*time.Second)
	if _, err := tb.admin().CreateTopic(ctx, 3, 1, nil, "txn-e2e"); err != nil {
		t.Fatal(err)
	}
	p := tb.client(kgo.TransactionalID("e2e"), kgo.DefaultProduceTopic("txn-e2e"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	run := func(prefix string, n int, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := p.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%s-%02d", prefix, i))).FirstErr(); err != nil {
				t.Fatalf("produce %s-%d: %v", prefix, i, err)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("end %s: %v", prefix, err)
		}
	}
	run("committed", 9, kgo.TryCommit)
	run("aborted", 6, kgo.TryAbort)
	run("again", 3, kgo.TryCommit)

	committed := consumeIsolated(t, tb, "txn-e2e", 12, kgo.ReadCommitted())
	if len(committed) != 12 || strings.Join(committed, ",") != strings.Join(expectValues(map[string]int{"committed": 9, "again": 3}), ",") {
		t.Fatalf("read_committed saw %d records: %v", len(committed), committed)
	}
	all := consumeIsolated(t, tb, "txn-e2e", 18, kgo.ReadUncommitted())
	if len(all) != 18 {
		t.Fatalf("read_uncommitted saw %d records, want 18: %v", len(all), all)
	}
}

func expectValues(counts map[string]int) []string {
	var out []string
	for prefix, n := range counts {
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%02d", prefix, i))
		}
	}
	sort.Strings(out)
	return out
}
