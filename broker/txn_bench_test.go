package broker

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionCost measures franz-go producing 1 KiB records in
// transactions of 1, 100 and 10,000 records against the same records
// without a transaction (acks=all, idempotent: kgo's default), interleaved
// round by round on one broker so that the machine's load weighs on both
// alike. Set SUSHKA_TXN_BENCH=rounds (e.g. 5) to run it; it prints, per
// size, the median of the rounds' throughput and of the time to end a
// batch (EndTransaction, or the ProduceSync of the same records).
func TestTransactionCost(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("SUSHKA_TXN_BENCH"))
	if rounds <= 0 {
		t.Skip("SUSHKA_TXN_BENCH=rounds runs the measurement")
	}
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 10*time.Minute)
	if _, err := tb.admin().CreateTopic(ctx, 3, 1, nil, "txn-bench"); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1024)
	plain := tb.client(kgo.DefaultProduceTopic("txn-bench"), kgo.ProducerLinger(0))
	txn := tb.client(kgo.DefaultProduceTopic("txn-bench"), kgo.ProducerLinger(0), kgo.TransactionalID("bench"))
	type sample struct{ recordsPerSec, endMs float64 }
	results := map[string][]sample{}
	// run produces total records in batches of size, each a transaction
	// or not.
	run := func(cl *kgo.Client, transactional bool, size, total int) sample {
		recs := make([]*kgo.Record, size)
		var endTotal time.Duration
		start := time.Now()
		for done := 0; done < total; done += size {
			for i := range recs {
				recs[i] = &kgo.Record{Value: value}
			}
			if transactional {
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					cl.Produce(ctx, r, nil)
				}
				endStart := time.Now()
				if err := cl.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
				endTotal += time.Since(endStart)
				continue
			}
			endStart := time.Now()
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			endTotal += time.Since(endStart)
		}
		elapsed := time.Since(start)
		batches := total / size
		return sample{float64(total) / elapsed.Seconds(), float64(endTotal.Microseconds()) / 1000 / float64(batches)}
	}
	for round := range rounds {
		for _, size := range []int{1, 100, 10000} {
			total := max(size, 2000)
			if size == 1 {
				total = 300
			}
			if size == 10000 {
				total = 20000
			}
			results[fmt.Sprintf("plain/%d", size)] = append(results[fmt.Sprintf("plain/%d", size)], run(plain, false, size, total))
			results[fmt.Sprintf("txn/%d", size)] = append(results[fmt.Sprintf("txn/%d", size)], run(txn, true, size, total))
		}
		t.Logf("round %d done", round)
	}
	median := func(xs []float64) float64 {
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	for _, size := range []int{1, 100, 10000} {
		var pr, tr, pe, te []float64
		for _, s := range results[fmt.Sprintf("plain/%d", size)] {
			pr, pe = append(pr, s.recordsPerSec), append(pe, s.endMs)
		}
		for _, s := range results[fmt.Sprintf("txn/%d", size)] {
			tr, te = append(tr, s.recordsPerSec), append(te, s.endMs)
		}
		t.Logf("batch of %5d: plain %8.0f rec/s (%.2f ms per batch), transactional %8.0f rec/s (%.2f ms per commit): throughput ratio %.2f",
			size, median(pr), median(pe), median(tr), median(te), median(tr)/median(pr))
	}
}
