package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordsPerTxn is how many records each transaction of the crash test
// writes (spread over the topic's partitions).
const recordsPerTxn = 6

// TestSIGKILLTransactionsAllOrNothing runs the real binary, commits
// transactions from a franz-go transactional producer, SIGKILLs the broker
// at a random moment (in the middle of a transaction, between its prepare
// and its markers, during the markers: wherever it lands) and restarts it
// on the same data directory. After each restart every transaction is
// either wholly visible to a read_committed consumer or wholly absent, each
// one whose EndTxn was acknowledged is visible, and no partition's last
// stable offset stays stuck: a transaction left hanging is aborted by its
// timeout, so read_committed reaches the high watermark.
func TestSIGKILLTransactionsAllOrNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and kills it repeatedly")
	}
	bin := filepath.Join(t.TempDir(), "sushka")
	build := exec.Command("go", "build", "-o", bin, "github.com/sushka-io/sushka/cmd/sushka")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dataDir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	acked := map[string]bool{} // transactions whose commit was acknowledged

	const rounds = 4
	for round := range rounds {
		p := startProc(t, bin, dataDir)
		verifyTransactions(t, p.addr, acked, round)

		cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation(),
			kgo.TransactionalID(fmt.Sprintf("crash-%d", round%2)), // ids are reused across rounds: fencing after restart
			kgo.TransactionTimeout(2*time.Second),
			kgo.DefaultProduceTopic("txn-crash"),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RecordDeliveryTimeout(5*time.Second), kgo.RequestRetries(3))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		stop := make(chan struct{})
		var done sync.WaitGroup
		done.Add(1)
		go func() {
			defer done.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for txn := 0; ; txn++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("r%d-t%03d", round, txn)
				if cl.BeginTransaction() != nil {
					return
				}
				var recs []*kgo.Record
				for i := range recordsPerTxn {
					recs = append(recs, kgo.StringRecord(fmt.Sprintf("%s-%d", name, i)))
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					return // the broker is gone
				}
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					return // the broker is gone
				}
				mu.Lock()
				acked[name] = true
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		p.kill()
		close(stop)
		cl.Close()
		done.Wait()
		mu.Lock()
		t.Logf("round %d: %d transactions acknowledged so far", round, len(acked))
		mu.Unlock()
	}
	p := startProc(t, bin, dataDir)
	verifyTransactions(t, p.addr, acked, rounds)
	if len(acked) == 0 {
		t.Fatal("no transaction was acknowledged in any round")
	}
}

// verifyTransactions waits until read_committed reaches the high watermark
// of every partition (no last stable offset stuck), then reads everything
// committed and checks each transaction is whole, and every acknowledged
// one is there.
func verifyTransactions(t *testing.T, addr string, acked map[string]bool, round int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ends kadm.ListedOffsets
	for {
		ends, err = adm.ListEndOffsets(ctx, "txn-crash")
		if err == nil && ends.Error() != nil {
			err = ends.Error()
		}
		if err != nil {
			if round == 0 {
				return // nothing produced yet
			}
			t.Fatalf("round %d: ListEndOffsets: %v", round, err)
		}
		stable, err := adm.ListCommittedOffsets(ctx, "txn-crash")
		if err != nil {
			t.Fatalf("round %d: ListOffsets read_committed: %v", round, err)
		}
		stuck := false
		ends.Each(func(o kadm.ListedOffset) {
			if s, _ := stable.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
				stuck = true
			}
		})
		if !stuck {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("round %d: read_committed end offsets %v never reached the high watermarks %v (a hanging transaction not aborted)", round, stable, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("txn-crash"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// Every committed record is below the last stable offsets now: read
	// until nothing more comes for two seconds.
	seen := map[string]int{}
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := rd.PollFetches(pctx)
		idle := pctx.Err() != nil
		pcancel()
		if idle {
			break
		}
		for _, e := range fs.Errors() {
			t.Logf("round %d: reading %s/%d: %v", round, e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			seen[v[:strings.LastIndexByte(v, '-')]]++
		})
	}
	for name, n := range seen {
		if n != recordsPerTxn {
			t.Errorf("round %d: transaction %s is partly visible: %d of %d records", round, name, n, recordsPerTxn)
		}
	}
	for name := range acked {
		if seen[name] != recordsPerTxn {
			t.Errorf("round %d: acknowledged transaction %s shows %d of %d records", round, name, seen[name], recordsPerTxn)
		}
	}
	t.Logf("round %d: %d transactions visible, %d acknowledged, %d records in the log (markers and aborted included)", round, len(seen), len(acked), total)
}
