package broker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// consumeIsolated reads topic from the start with isolation until it has n
// records or wait has passed, and returns their values sorted.
func consumeIsolated(t *testing.T, tb *testBroker, topic string, n int, isolation kgo.IsolationLevel, wait time.Duration) []string {
	t.Helper()
	cl := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
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

// A franz-go transactional producer commits one transaction, aborts the
// next and commits a third: a read_committed consumer sees exactly the
// committed records, a read_uncommitted one all of them. Twice: with
// KIP-890 part 2 (transaction.version 2, which the broker advertises:
// Produce v12+ adds partitions implicitly, every EndTxn v5 bumps the epoch)
// and, with the client's versions capped below it, as before (explicit
// AddPartitionsToTxn, one epoch for all).
func TestTransactionalProducerCommitAbort(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []kgo.Opt
		finalEpoch int16 // after InitProducerID and three ends
	}{
		{"kip890p2", nil, 3},
		{"before-kip890p2", []kgo.Opt{kgo.MaxVersions(kversion.V3_8_0())}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := startBroker(t, Config{})
			ctx := ctxT(t, 30*time.Second)
			if _, err := tb.admin().CreateTopic(ctx, 3, 1, nil, "txn-e2e"); err != nil {
				t.Fatal(err)
			}
			p := tb.client(append([]kgo.Opt{kgo.TransactionalID("e2e"), kgo.DefaultProduceTopic("txn-e2e"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, tc.opts...)...)
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

			committed := consumeIsolated(t, tb, "txn-e2e", 12, kgo.ReadCommitted(), 10*time.Second)
			if len(committed) != 12 || strings.Join(committed, ",") != strings.Join(expectValues(map[string]int{"committed": 9, "again": 3}), ",") {
				t.Fatalf("read_committed saw %d records: %v", len(committed), committed)
			}
			all := consumeIsolated(t, tb, "txn-e2e", 18, kgo.ReadUncommitted(), 10*time.Second)
			if len(all) != 18 {
				t.Fatalf("read_uncommitted saw %d records, want 18: %v", len(all), all)
			}
			described, err := tb.admin().DescribeTransactions(ctx, "e2e")
			if err != nil {
				t.Fatal(err)
			}
			if d := described["e2e"]; d.Err != nil || d.State != "CompleteCommit" || d.ProducerEpoch != tc.finalEpoch {
				t.Fatalf("described: %+v, want CompleteCommit at epoch %d", d, tc.finalEpoch)
			}
		})
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

// Consume-process-produce with GroupTransactSession: members copy an input
// topic to an output topic, each batch in a transaction with its offsets,
// while the group rebalances (a member joins midway, another leaves). A
// read_committed reader of the output sees every input record exactly
// once: nothing lost, nothing duplicated.
func TestGroupTransactSessionRebalanceExactlyOnce(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 120*time.Second)
	if _, err := tb.admin().CreateTopic(ctx, 4, 1, nil, "eos-in"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.admin().CreateTopic(ctx, 2, 1, nil, "eos-out"); err != nil {
		t.Fatal(err)
	}
	const total = 3000
	groupProduce(t, tb, "eos-in", 4, total, "v")

	// member copies eos-in to eos-out until stop is closed, a transaction
	// per poll of at most 50 records (and a pause after each, so that the
	// copy is still going when the group rebalances); commits counts its
	// committed transactions.
	var commitsMu sync.Mutex
	commits := map[string]int{}
	member := func(name string, stop <-chan struct{}, done chan<- error) {
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(tb.AdvertisedAddr()),
			kgo.TransactionalID("eos-"+name),
			kgo.ConsumerGroup("eos"), kgo.ConsumeTopics("eos-in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets(),
			kgo.DefaultProduceTopic("eos-out"),
		)
		if err != nil {
			done <- err
			return
		}
		defer sess.Close()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := sess.PollRecords(pctx, 50)
			cancel()
			if ctx.Err() != nil {
				done <- ctx.Err()
				return
			}
			if fs.NumRecords() == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				done <- err
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(ctx, &kgo.Record{Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Logf("%s: produce: %v", name, err)
					}
				})
			})
			committed, err := sess.End(ctx, kgo.TryCommit)
			if err != nil {
				t.Logf("%s: end: %v (the transaction aborts; its records are read again)", name, err)
			}
			if committed {
				commitsMu.Lock()
				commits[name]++
				commitsMu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stopA, stopB, stopC := make(chan struct{}), make(chan struct{}), make(chan struct{})
	doneA, doneB, doneC := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go member("a", stopA, doneA)
	go member("b", stopB, doneB)
	// waitCommits waits until member name has committed n transactions.
	waitCommits := func(name string, n int) {
		t.Helper()
		for {
			commitsMu.Lock()
			c := commits[name]
			commitsMu.Unlock()
			if c >= n {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("member %s committed %d transactions, waited for %d", name, c, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCommits("a", 2)
	go member("c", stopC, doneC) // a rebalance while a and b are in transactions
	waitCommits("c", 2)
	close(stopA) // another one
	if err := <-doneA; err != nil {
		t.Fatalf("member a: %v", err)
	}

	got := consumeIsolated(t, tb, "eos-out", total, kgo.ReadCommitted(), 60*time.Second)
	close(stopB)
	close(stopC)
	for _, d := range []chan error{doneB, doneC} {
		if err := <-d; err != nil {
			t.Fatalf("member: %v", err)
		}
	}
	t.Logf("transactions committed per member: %v", commits)
	if commits["a"] == 0 || commits["c"] == 0 {
		t.Fatalf("the copy was not shared across the rebalances (committed transactions per member: %v); make it longer", commits)
	}
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	var dups []string
	for v, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", v, n))
		}
	}
	if len(seen) != total || len(dups) > 0 {
		t.Fatalf("output holds %d distinct of %d records (%d in all); duplicated: %v", len(seen), total, len(got), dups)
	}
	// And nothing more arrives later.
	if more := consumeIsolated(t, tb, "eos-out", total+1, kgo.ReadCommitted(), 3*time.Second); len(more) != total {
		t.Fatalf("output grew to %d committed records after the members stopped, want %d", len(more), total)
	}
}
