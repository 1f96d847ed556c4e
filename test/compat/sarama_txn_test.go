package compat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sarama's transactional producer against the built broker: a committed
// transaction, an aborted one, and a consume-process-produce one whose
// input offsets go in with AddMessageToTxn (AddOffsetsToTxn,
// TxnOffsetCommit). read_committed sees exactly the committed records,
// read_uncommitted all of them; the group's offsets are the transaction's.
// sarama's coordinator lookup no longer makes the broker create a user
// topic named __transaction_state.
func TestSaramaTransactions(t *testing.T) {
	goModuleVersions(t, "github.com/IBM/sarama")
	b := startBroker(t)
	const in, out, group = "sarama-txn-in", "sarama-txn-out", "sarama-txn-g"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := b.admin().CreateTopic(ctx, 2, 1, nil, in); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin().CreateTopic(ctx, 2, 1, nil, out); err != nil {
		t.Fatal(err)
	}
	// The input: 4 records to consume and copy in the third transaction.
	var recs []*kgo.Record
	for i := range 4 {
		recs = append(recs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "in-%d", i), Value: []byte("x")})
	}
	if err := b.kgoClient().ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := saramaConfig(t)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = "sarama-tx"
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{b.addr}, cfg)
	if err != nil {
		t.Fatalf("transactional producer: %v", err)
	}
	defer p.Close()
	send := func(prefix string, n int) map[string]string {
		t.Helper()
		sent := map[string]string{}
		for i := range n {
			k := fmt.Sprintf("%s-%d", prefix, i)
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: out, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("v-" + k)}); err != nil {
				t.Fatalf("send %s: %v", k, err)
			}
			sent[k] = "v-" + k
		}
		return sent
	}
	committed := map[string]string{}
	all := map[string]string{}
	merge := func(dst, src map[string]string) {
		for k, v := range src {
			dst[k] = v
		}
	}

	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	s := send("committed", 6)
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("CommitTxn: %v", err)
	}
	merge(committed, s)
	merge(all, s)

	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	merge(all, send("aborted", 5))
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("AbortTxn: %v", err)
	}

	// Consume-process-produce: the input's records are copied, and their
	// offsets committed with the transaction.
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("BeginTxn: %v", err)
	}
	cl := b.kgoClient(kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	copied := 0
	for copied < 4 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			s := send("copy-"+string(r.Key), 1)
			merge(committed, s)
			merge(all, s)
			msg := &sarama.ConsumerMessage{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
			if err := p.AddMessageToTxn(msg, group, nil); err != nil {
				t.Fatalf("AddMessageToTxn: %v", err)
			}
			copied++
		})
	}
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("CommitTxn with offsets: %v", err)
	}

	read := func(isolation kgo.IsolationLevel, n int) []record {
		t.Helper()
		rd := b.kgoClient(kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(isolation), kgo.FetchMaxWait(200*time.Millisecond))
		var got []record
		for len(got) < n && ctx.Err() == nil {
			rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				got = append(got, record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
			})
		}
		more, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		rd.PollFetches(more).EachRecord(func(r *kgo.Record) {
			got = append(got, record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
		})
		return got
	}
	checkRecords(t, "read_committed", read(kgo.ReadCommitted(), len(committed)), committed)
	checkRecords(t, "read_uncommitted", read(kgo.ReadUncommitted(), len(all)), all)
	// sarama's own consumer at both isolation levels (it stops at the count
	// asked; the franz-go reads above also wait for records past it).
	isolation := func(level sarama.IsolationLevel) func(*sarama.Config) {
		return func(cfg *sarama.Config) { cfg.Consumer.IsolationLevel = level }
	}
	checkRecords(t, "sarama consumer read_committed", saramaConsume(t, b.addr, group+"-read-committed", out, len(committed), isolation(sarama.ReadCommitted)), committed)
	checkRecords(t, "sarama consumer read_uncommitted", saramaConsume(t, b.addr, group+"-read-uncommitted", out, len(all), isolation(sarama.ReadUncommitted)), all)
	b.checkCommittedCount(group, in, 4)

	topics, err := b.admin().ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := topics["__transaction_state"]; !ok || !d.IsInternal {
		t.Fatalf("__transaction_state in Metadata: %+v (listed: %v), want an internal topic", d, ok)
	}
}
