package txn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record key and value versions Sushka writes: Kafka's TransactionLogKey
// v0 and TransactionLogValue v1 (flexible, with KIP-890's tagged fields).
const (
	keyVersion   = 0
	valueVersion = 1
)

func timeMillis(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}

func millisTime(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (c *Coordinator) key(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: keyVersion, TransactionalID: id}
	return k.AppendTo(nil)
}

// record is t's state as a __transaction_state record.
func (c *Coordinator) record(t *transaction) Record {
	v := kmsg.NewTxnMetadataValue()
	v.Version = valueVersion
	v.ProducerID, v.ProducerEpoch = t.producerID, t.epoch
	v.TimeoutMillis = int32(t.timeout / time.Millisecond)
	v.State = kmsg.TransactionState(t.state)
	v.LastUpdateTimestamp, v.StartTimestamp = timeMillis(t.updated), timeMillis(t.start)
	v.PreviousProducerID, v.NextProducerID = t.prevProducerID, t.nextProducerID
	v.ClientTransactionVersion = t.clientVersion
	for _, tp := range sortedPartitions(t.partitions) {
		if n := len(v.Topics); n > 0 && v.Topics[n-1].Topic == tp.Topic {
			v.Topics[n-1].Partitions = append(v.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	return Record{Partition: c.partitionFor(t.id), Key: c.key(t.id), Value: v.AppendTo(nil)}
}

func (c *Coordinator) tombstone(id string) Record {
	return Record{Partition: c.partitionFor(id), Key: c.key(id)}
}

// Load replays records of __transaction_state, oldest first: the last
// record of an id wins, a tombstone deletes it.
func (c *Coordinator) Load(records []Record) error {
	for i, r := range records {
		if err := c.apply(r); err != nil {
			return fmt.Errorf("txn: %s-%d record %d: %w", StateTopic, r.Partition, i, err)
		}
	}
	return nil
}

func (c *Coordinator) apply(r Record) error {
	if len(r.Key) < 2 {
		return errors.New("key shorter than its version")
	}
	if v := int16(binary.BigEndian.Uint16(r.Key)); v != keyVersion {
		return fmt.Errorf("unknown key version %d", v)
	}
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(r.Key); err != nil {
		return fmt.Errorf("transaction log key: %w", err)
	}
	if r.Value == nil {
		delete(c.txns, k.TransactionalID)
		return nil
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(r.Value); err != nil {
		return fmt.Errorf("transaction log value: %w", err)
	}
	if v.State < 0 || State(v.State) > StatePrepareEpochFence {
		return fmt.Errorf("transaction %q: unknown state %d", k.TransactionalID, v.State)
	}
	t := &transaction{
		id:             k.TransactionalID,
		producerID:     v.ProducerID,
		prevProducerID: -1,
		nextProducerID: -1,
		epoch:          v.ProducerEpoch,
		lastEpoch:      -1,
		timeout:        time.Duration(v.TimeoutMillis) * time.Millisecond,
		state:          State(v.State),
		partitions:     map[TopicPartition]bool{},
		start:          millisTime(v.StartTimestamp),
		updated:        millisTime(v.LastUpdateTimestamp),
		clientVersion:  v.ClientTransactionVersion,
	}
	if v.Version >= 1 {
		t.prevProducerID, t.nextProducerID = v.PreviousProducerID, v.NextProducerID
	}
	for _, vt := range v.Topics {
		for _, p := range vt.Partitions {
			t.partitions[TopicPartition{vt.Topic, p}] = true
		}
	}
	c.txns[t.id] = t
	return nil
}

// Loaded ends loading: requests are served from now on, and the
// transactions that were being ended (PrepareCommit, PrepareAbort) get
// their markers written again.
func (c *Coordinator) Loaded(now time.Time) {
	c.loaded = true
	if now.After(c.now) {
		c.now = now
	}
	c.resumeEnds(func(string) bool { return true })
}

// resumeEnds asks again for the markers of the prepared transactions that
// match.
func (c *Coordinator) resumeEnds(match func(id string) bool) {
	for _, t := range c.sortedTxns() {
		if (t.state == StatePrepareCommit || t.state == StatePrepareAbort) && match(t.id) {
			t.unmarked = sortedPartitions(t.partitions)
			if len(t.unmarked) == 0 {
				c.complete(t)
				continue
			}
			c.requestMarkers(t)
		}
	}
}

// UnloadPartition forgets the transactions of __transaction_state
// partition p after its log failed, answering their waiting EndTxn
// requests with NOT_COORDINATOR; requests for them get NOT_COORDINATOR
// until LoadPartition.
func (c *Coordinator) UnloadPartition(p int32) {
	if c.unloaded == nil {
		c.unloaded = map[int32]bool{}
	}
	c.unloaded[p] = true
	delete(c.loading, p)
	for _, t := range c.sortedTxns() {
		if c.partitionFor(t.id) != p {
			continue
		}
		for _, w := range t.endWaiters {
			resp := kmsg.NewPtrEndTxnResponse()
			resp.Version, resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = w.version, kerr.NotCoordinator.Code, -1, -1
			c.respond(w.id, resp)
		}
		delete(c.txns, t.id)
	}
}

// LoadPartition replays partition p's records (all of its log, oldest
// first) after UnloadPartition, serves its ids again and resumes the ends
// that were prepared.
func (c *Coordinator) LoadPartition(p int32, records []Record) error {
	for i, r := range records {
		if err := c.apply(r); err != nil {
			return fmt.Errorf("txn: %s-%d record %d: %w", StateTopic, p, i, err)
		}
	}
	delete(c.unloaded, p)
	delete(c.loading, p)
	c.resumeEnds(func(id string) bool { return c.partitionFor(id) == p })
	return nil
}

// LoadingPartition marks unloaded partition p as being replayed (this
// node was elected its leader): its ids answer
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's while it loads, until
// LoadPartition (or UnloadPartition, the load abandoned).
func (c *Coordinator) LoadingPartition(p int32) {
	if c.unloaded[p] {
		c.loading.Add(p)
	}
}
