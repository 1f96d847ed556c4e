package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/stream"
)

// ExactlyOnce makes the transport transactional with transactionalID:
// read_committed consumption and, per commit, one transaction holding the
// marked offsets and exactly the publishes of the messages below them.
//
// With ExactlyOnce the transport consumes with read_committed and makes a
// handler's publishes and the offset commit of its message one Kafka
// transaction: consume, process, produce happen exactly once as seen by a
// read_committed reader, across handler errors, crashes and rebalances.
// Handlers do not change; the option alone makes Handle with PublishTo
// exactly once.
//
// Mechanism. A publish made under a delivery's context (stream.Batch(ctx))
// is not sent at once: it is copied into a buffer keyed by the delivery's
// partition and offset (a batch's last offset), and Publish returns. When
// the App marks a partition's finished prefix (Mark(tp, next)), the next
// commit (every CommitInterval, at revocation and on Close) takes every
// buffered record of an offset below a mark and runs one transaction:
// produce them, AddOffsetsToTxn, TxnOffsetCommit of the marks (with the
// consumer's group generation and member id, so that a fenced zombie's
// commit fails: KIP-447), EndTxn commit. A record enters a transaction
// exactly when the offset of its message is committed in it, however many
// key lanes or partitions are in flight: the worker marks an offset only
// after that message's publishes returned, so they are buffered before
// the mark is. A nack seeks the partition back (Seek) and drops the
// buffered records of the offsets it will redeliver, so a failed attempt's
// publishes are never sent (stronger than sending and aborting: the
// records of other, finished messages in the same commit are not lost with
// them); a new attempt of the same offset (the Retry middleware) replaces
// the records of the earlier one. A publish outside any delivery runs in a
// transaction of its own. A failed transaction is aborted and its records
// are put back: the marks stay uncommitted and the next commit retries
// both together.
//
// The serialization point is the transactional producer: one transaction
// at a time per transport (one transactional id), covering every partition
// marked since the last commit. Handlers never wait for it; the cost is
// one transaction (about four round trips and an fsync of the markers) per
// CommitInterval, and a publish becoming visible to read_committed readers
// only at the commit after its message finished.
//
// Why not kgo's GroupTransactSession: it commits the offsets the client
// polled (not the App's marks, which lag behind in-flight messages), it
// aborts the open transaction on every revocation (the framework finishes
// the revoked partitions' messages and expects them committed), and its
// End may not run inside the revocation callback, where this transport
// must commit. So the transport drives kgo's transactional client
// directly (BeginTransaction, EndTransaction) and sends the offset part
// (AddOffsetsToTxn, TxnOffsetCommit) itself.
//
// Publish inside a handler therefore returns before the broker has the
// record: the broker gets record and offset together, at the commit. A
// lost EndTxn answer is retried by kgo, and the broker answers the retry
// of a finished commit with its outcome (TestExactlyOnceLostEndTxnAnswer).
// If kgo gives up on the EndTxn (its outcome unknown), the transport ends
// with an abort as kgo advises (which reloads the producer id, so the
// coordinator settles what was pending), then reads the group's committed
// offsets (OffsetFetch, RequireStable): when they are this transaction's,
// it committed and its records are not sent again; otherwise they are put
// back for the next commit (TestExactlyOnceEndTxnGivenUp).
//
// Give every App instance its own transactional id (a pod name, say):
// instances of one group fence each other through the group generation,
// not through the id. One consumer at a time may use an exactly-once
// transport.
func ExactlyOnce(transactionalID string) Option {
	return func(k *Kafka) { k.txn = &txnProducer{k: k, id: transactionalID} }
}

// txnProducer is the exactly-once producer and the transaction runner.
type txnProducer struct {
	k  *Kafka
	id string

	mu       sync.Mutex
	consumer *consumer                                 // guarded by mu: the one consumer, nil when none
	pending  map[stream.TopicPartition][]pendingRecord // guarded by mu: published, not yet in a transaction

	running sync.Mutex // held by the transaction in progress: one at a time
}

// pendingRecord is a publish waiting for its message's offset commit.
type pendingRecord struct {
	offset  int64 // of the message (a batch's last) whose handler published it
	attempt int   // stream.Attempt of that handler run
	rec     *kgo.Record
}

// producerOpts returns the options of the transport's producer client.
func (t *txnProducer) producerOpts(opts []kgo.Opt) []kgo.Opt {
	if t == nil {
		return opts
	}
	return append(opts, kgo.TransactionalID(t.id))
}

// consumerOpts returns the options an exactly-once consumer adds.
func (t *txnProducer) consumerOpts() []kgo.Opt {
	if t == nil {
		return nil
	}
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
}

// attach makes c the transport's consumer.
func (t *txnProducer) attach(c *consumer) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.consumer != nil {
		return errors.New("kafka: an exactly-once transport serves one consumer at a time")
	}
	t.consumer = c
	t.pending = map[stream.TopicPartition][]pendingRecord{}
	return nil
}

// detach is called after c's last commit: what is still buffered belongs to
// messages the next owner of their partitions redelivers.
func (t *txnProducer) detach(c *consumer) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.consumer == c {
		t.consumer, t.pending = nil, nil
	}
	t.mu.Unlock()
}

// Publish buffers rec for the transaction that commits the offset of the
// delivery under ctx; outside a delivery it produces rec in a transaction
// of its own and returns when that committed.
func (t *txnProducer) Publish(ctx context.Context, rec *stream.Record) error {
	if t.k.err != nil {
		return t.k.err
	}
	kr := cloneRecord(toKgo(rec))
	batch := stream.Batch(ctx)
	if len(batch) == 0 {
		t.running.Lock()
		defer t.running.Unlock()
		return t.transact(ctx, nil, []*kgo.Record{kr}, nil)
	}
	src := batch[len(batch)-1]
	tp := stream.TopicPartition{Topic: src.Topic, Partition: src.Partition}
	attempt := stream.Attempt(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	// Checked under mu: a delivery abandoned at a revocation has its
	// context cancelled before the revocation drops the partition's
	// records (forget), so a late publish cannot outlive that drop.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafka: publish of an abandoned delivery: %w", err)
	}
	if t.consumer == nil {
		return errors.New("kafka: exactly-once publish without a consumer")
	}
	recs := t.pending[tp]
	if attempt > 1 {
		// A retry of the same message: the earlier attempt failed, its
		// records must not be sent.
		recs = slices.DeleteFunc(recs, func(p pendingRecord) bool { return p.offset == src.Offset && p.attempt < attempt })
	}
	t.pending[tp] = append(recs, pendingRecord{offset: src.Offset, attempt: attempt, rec: kr})
	return nil
}

// dropFrom forgets the buffered records of tp's offsets at or after
// offset: they are redelivered (a nack's seek).
func (t *txnProducer) dropFrom(tp stream.TopicPartition, offset int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if recs, ok := t.pending[tp]; ok {
		t.pending[tp] = slices.DeleteFunc(recs, func(p pendingRecord) bool { return p.offset >= offset })
	}
	t.mu.Unlock()
}

// dropPartitions forgets the buffered records of partitions this member
// no longer owns.
func (t *txnProducer) dropPartitions(parts []stream.TopicPartition) {
	if t == nil {
		return
	}
	t.mu.Lock()
	for _, tp := range parts {
		delete(t.pending, tp)
	}
	t.mu.Unlock()
}

// commit commits offsets (next offset per partition) for c: in a
// transaction with the buffered records below them, or with a plain
// OffsetCommit when there are none (nothing else to make atomic).
func (t *txnProducer) commit(ctx context.Context, c *consumer, offsets map[string]map[int32]kgo.EpochOffset) error {
	t.running.Lock()
	defer t.running.Unlock()
	var taken []*kgo.Record
	took := map[stream.TopicPartition][]pendingRecord{}
	t.mu.Lock()
	for topic, ps := range offsets {
		for p, eo := range ps {
			tp := stream.TopicPartition{Topic: topic, Partition: p}
			var keep []pendingRecord
			for _, pr := range t.pending[tp] {
				if pr.offset < eo.Offset {
					taken = append(taken, pr.rec)
					took[tp] = append(took[tp], pr)
				} else {
					keep = append(keep, pr)
				}
			}
			if len(took[tp]) > 0 {
				t.pending[tp] = keep
			}
		}
	}
	t.mu.Unlock()
	if len(taken) == 0 {
		return c.commitPlain(ctx, offsets)
	}
	err := t.transact(ctx, c, taken, offsets)
	if err != nil {
		// Put them back in front: the marks stay uncommitted, and the
		// next commit retries records and offsets together. Partitions
		// revoked meanwhile drop them (dropPartitions).
		t.mu.Lock()
		if t.pending != nil {
			for tp, prs := range took {
				for _, pr := range prs {
					// kgo keeps the Produce context in the record: this
					// one's may be cancelled by now, and would fail every
					// later attempt.
					pr.rec.Context = nil
				}
				t.pending[tp] = append(prs, t.pending[tp]...)
			}
		}
		t.mu.Unlock()
	}
	return err
}

// transact runs one transaction: records, then (with a consumer) the
// group's offsets, then EndTxn commit; on any failure it aborts. The
// caller holds running.
func (t *txnProducer) transact(ctx context.Context, c *consumer, records []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset) error {
	cl := t.k.producer.Load()
	if err := cl.BeginTransaction(); err != nil {
		t.resetIfFenced(cl, err)
		return err
	}
	err := cl.ProduceSync(ctx, records...).FirstErr()
	if err == nil && c != nil && len(offsets) > 0 {
		err = t.commitOffsetsInTxn(ctx, c, offsets)
	}
	endFailed := false
	if err == nil {
		if err = cl.EndTransaction(ctx, kgo.TryCommit); err == nil {
			return nil
		}
		// kgo's advice after a failed commit: end with an abort, which
		// also settles a commit whose outcome the client did not learn
		// (it reloads the producer id: the coordinator completes or
		// aborts what was pending before it answers).
		endFailed = true
	}
	abortCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	abortErr := cl.AbortBufferedRecords(abortCtx)
	if abortErr == nil {
		abortErr = cl.EndTransaction(abortCtx, kgo.TryAbort) // a failed abort ends at the transaction timeout
	}
	t.resetIfFenced(cl, errors.Join(err, abortErr))
	if endFailed && abortErr == nil && c != nil && len(offsets) > 0 {
		// The commit's outcome is unknown, not failed: if the group's
		// committed offsets are this transaction's, it committed, and
		// retrying its records would publish them twice.
		if committed, fetchErr := committedAlready(abortCtx, c, offsets); fetchErr == nil && committed {
			return nil
		} else if fetchErr != nil {
			return errors.Join(err, fmt.Errorf("kafka: the outcome of a failed EndTxn commit is unknown: %w", fetchErr))
		}
	}
	return err
}

// resetIfFenced replaces the producer's client cl when err says it was
// fenced (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH, which kgo cannot
// recover from): a fenced kgo client fails every later transaction, and
// the transport would retry its commit for ever without committing
// anything. A new client's InitProducerID takes the transactional id
// over with a new epoch, as Kafka Streams' StreamsProducer.resetProducer
// does after a fence under exactly-once v2: zombies are fenced through
// the group generation (TxnOffsetCommit), not the id (ExactlyOnce). This
// happens when kgo gives up on an EndTxn commit that never reached the
// coordinator: its abort bumps the epoch with InitProducerID while the
// transaction is still ongoing, the coordinator fences that epoch and
// aborts (Kafka's prepareFenceProducerEpoch), and kgo's retry is fenced
// (TestExactlyOnceEndTxnGivenUp hung 1 run in 4–8). The caller holds
// t.running.
func (t *txnProducer) resetIfFenced(cl *kgo.Client, err error) {
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		return
	}
	fresh, newErr := kgo.NewClient(t.k.producerOpts...)
	if newErr != nil {
		return // the next commit fails and tries again
	}
	if t.k.producer.CompareAndSwap(cl, fresh) {
		cl.Close()
	} else {
		fresh.Close()
	}
}

// committedAlready reports whether the group's committed offsets (an
// OffsetFetch with RequireStable, waiting out pending transactional
// offsets) have reached offsets on every partition.
func committedAlready(ctx context.Context, c *consumer, offsets map[string]map[int32]kgo.EpochOffset) (bool, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = c.group, true
	for topic, ps := range offsets {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		for p := range ps {
			rt.Partitions = append(rt.Partitions, p)
		}
		req.Topics = append(req.Topics, rt)
	}
	for {
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			return false, err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		reached := 0
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil && err == nil {
					err = e
				}
				if eo, ok := offsets[rt.Topic][rp.Partition]; ok && rp.Offset >= eo.Offset {
					reached++
				}
			}
		}
		switch {
		case errors.Is(err, kerr.UnstableOffsetCommit):
			// A transaction's offsets are still pending: wait it out.
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			continue
		case err != nil:
			return false, err
		}
		want := 0
		for _, ps := range offsets {
			want += len(ps)
		}
		return reached == want, nil
	}
}

// commitOffsetsInTxn adds the group's offsets to the open transaction
// (AddOffsetsToTxn, then TxnOffsetCommit under c's generation).
func (t *txnProducer) commitOffsetsInTxn(ctx context.Context, c *consumer, offsets map[string]map[int32]kgo.EpochOffset) error {
	cl := t.k.producer.Load()
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = t.id, id, epoch, c.group
	for {
		resp, err := add.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if !errors.Is(err, kerr.ConcurrentTransactions) {
			if err != nil {
				return err
			}
			break
		}
		// The previous transaction's markers are still being written.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	memberID, generation := c.cl.GroupMetadata()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = t.id, c.group, id, epoch
	req.MemberID, req.Generation = memberID, generation
	for topic, ps := range offsets {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, eo := range ps {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, eo.Offset, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("kafka: TxnOffsetCommit %s/%d: %w", rt.Topic, rp.Partition, err)
			}
		}
	}
	return nil
}

// cloneRecord copies the slices kr shares with the caller's record: a
// buffered record outlives Publish, and the caller may reuse its buffers.
func cloneRecord(kr *kgo.Record) *kgo.Record {
	kr.Key = bytes.Clone(kr.Key)
	kr.Value = bytes.Clone(kr.Value)
	for i := range kr.Headers { // toKgo made the slice; the values are the caller's
		kr.Headers[i].Value = bytes.Clone(kr.Headers[i].Value)
	}
	return kr
}
