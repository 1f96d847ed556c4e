// Package memory is the in-process stream.Transport: topics, partitions and
// consumer groups held in memory, for tests (see streamtest) and for
// measuring the framework's own cost without a broker.
//
// It keeps the semantics that matter to a handler: records of a partition
// keep their order and offsets, a key always maps to one partition, a
// group's committed offsets survive its consumer (a new consumer of the
// group starts from them), a seek redelivers, a paused partition is not
// polled. It has no rebalancing: one consumer at a time per group. Records
// are never deleted, and delivered records are the stored ones, shared and
// immutable: delivery copies nothing.
package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sushka-io/sushka/stream"
)

// Transport is an in-memory broker. The zero value is not usable: call New.
type Transport struct {
	defaultPartitions int

	mu      sync.Mutex
	topics  map[string]*topic          // guarded by mu
	groups  map[string]*group          // guarded by mu
	polling []*consumer                // guarded by mu: open consumers, woken by wakeLocked
	closed  bool                       // guarded by mu
	unkeyed uint32                     // guarded by mu: round robin for unkeyed records
	now     func() time.Time           // the clock for timestamps
	hook    func(*stream.Record) error // guarded by mu: FailPublish
}

type topic struct {
	partitions [][]*stream.Record // offset i of partition p is partitions[p][i]
}

type group struct {
	committed map[stream.TopicPartition]int64
	consumer  *consumer
}

// Option configures a Transport.
type Option func(*Transport)

// Partitions sets the partition count of topics created implicitly, by
// the first publish or subscription (default 1).
func Partitions(n int) Option { return func(t *Transport) { t.defaultPartitions = n } }

// New returns an empty in-memory transport.
func New(opts ...Option) *Transport {
	t := &Transport{
		defaultPartitions: 1,
		topics:            map[string]*topic{},
		groups:            map[string]*group{},
		now:               time.Now,
	}
	for _, o := range opts {
		o(t)
	}
	if t.defaultPartitions < 1 {
		t.defaultPartitions = 1
	}
	return t
}

// CreateTopic creates topic with the given partitions; it fails if the
// topic exists with another count.
func (t *Transport) CreateTopic(name string, partitions int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tp := t.topics[name]; tp != nil {
		if len(tp.partitions) != partitions {
			return fmt.Errorf("memory: topic %q has %d partitions, not %d", name, len(tp.partitions), partitions)
		}
		return nil
	}
	t.topics[name] = &topic{partitions: make([][]*stream.Record, partitions)}
	return nil
}

func (t *Transport) topicLocked(name string) *topic {
	tp := t.topics[name]
	if tp == nil {
		tp = &topic{partitions: make([][]*stream.Record, t.defaultPartitions)}
		t.topics[name] = tp
	}
	return tp
}

// wakeLocked lets every waiting Poll look again. Each consumer has a
// one-slot channel that only its Poll receives from, so a wake allocates
// nothing and a Poll that was not waiting finds the slot full and looks
// once more.
func (t *Transport) wakeLocked() {
	for _, c := range t.polling {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// Producer returns the transport's producer.
func (t *Transport) Producer() stream.Producer { return producer{t} }

type producer struct{ t *Transport }

func (p producer) Publish(ctx context.Context, rec *stream.Record) error {
	return p.t.Publish(ctx, rec)
}

// ErrTransportClosed is returned by a closed transport.
var ErrTransportClosed = errors.New("memory: transport closed")

// Publish stores a copy of rec (the copy is what the transport takes to own
// the message: one record and one block of bytes).
func (t *Transport) Publish(ctx context.Context, rec *stream.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrTransportClosed
	}
	if t.hook != nil {
		if err := t.hook(rec); err != nil {
			return err
		}
	}
	tp := t.topicLocked(rec.Topic)
	n := int32(len(tp.partitions))
	partition := rec.Partition
	switch {
	case partition >= n:
		return fmt.Errorf("memory: topic %q has no partition %d", rec.Topic, partition)
	case partition >= 0:
	case len(rec.Key) > 0:
		partition = int32(fnv32a(rec.Key) % uint32(n))
	default:
		partition = int32(t.unkeyed % uint32(n))
		t.unkeyed++
	}
	size := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		size += len(h.Value)
	}
	data := make([]byte, 0, size)
	stored := &stream.Record{
		Topic:     rec.Topic,
		Partition: partition,
		Offset:    int64(len(tp.partitions[partition])),
		Timestamp: rec.Timestamp,
	}
	if rec.Key != nil {
		data = append(data, rec.Key...)
		stored.Key = data[:len(rec.Key):len(rec.Key)]
	}
	start := len(data)
	data = append(data, rec.Value...)
	stored.Value = data[start:len(data):len(data)]
	if len(rec.Headers) > 0 {
		stored.Headers = make([]stream.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			start := len(data)
			data = append(data, h.Value...)
			stored.Headers[i] = stream.Header{Key: h.Key, Value: data[start:len(data):len(data)]}
		}
	}
	if stored.Timestamp.IsZero() {
		stored.Timestamp = t.now()
	}
	tp.partitions[partition] = append(tp.partitions[partition], stored)
	t.wakeLocked()
	return nil
}

// FailPublish makes every later Publish for which fail returns an error
// fail with it, without storing the record (nil restores normal
// publishing): the fault injection for tests of the publish path.
func (t *Transport) FailPublish(fail func(*stream.Record) error) {
	t.mu.Lock()
	t.hook = fail
	t.mu.Unlock()
}

// Records returns the records of topic, partition by partition in offset
// order. They are the stored records: do not modify them.
func (t *Transport) Records(topicName string) []*stream.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.topics[topicName]
	if tp == nil {
		return nil
	}
	var out []*stream.Record
	for _, p := range tp.partitions {
		out = append(out, p...)
	}
	return out
}

// Committed returns group's committed offset of the partition (the offset
// of the next record to consume), or -1 if it has none.
func (t *Transport) Committed(groupName string, tp stream.TopicPartition) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.groups[groupName]; g != nil {
		if off, ok := g.committed[tp]; ok {
			return off
		}
	}
	return -1
}

// Connect returns another transport over the same topics and groups, whose
// Close closes only itself (its producer and consumers): what a second
// client process of one broker is. Tests use it to restart an App, which
// closes its transport, over the same data.
func (t *Transport) Connect() stream.Transport { return &connection{store: t} }

type connection struct {
	store  *Transport
	mu     sync.Mutex
	closed bool
	opened []stream.Consumer
}

func (c *connection) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *connection) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrTransportClosed
	}
	consumer, err := c.store.Consume(ctx, cfg)
	if err == nil {
		c.opened = append(c.opened, consumer)
	}
	return consumer, err
}

func (c *connection) Producer() stream.Producer { return connectionProducer{c} }

type connectionProducer struct{ c *connection }

func (p connectionProducer) Publish(ctx context.Context, rec *stream.Record) error {
	if p.c.isClosed() {
		return ErrTransportClosed
	}
	return p.c.store.Publish(ctx, rec)
}

func (c *connection) Close() error {
	c.mu.Lock()
	c.closed = true
	opened := c.opened
	c.opened = nil
	c.mu.Unlock()
	for _, consumer := range opened {
		_ = consumer.Close(context.Background()) // closes nothing twice: Close is idempotent
	}
	return nil
}

// Close closes the transport: Publish fails and consumers stop polling.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		t.wakeLocked()
	}
	return nil
}

// Consume starts the group's consumer of cfg.Topics from the group's
// committed offsets (from the start of each partition without one).
func (t *Transport) Consume(ctx context.Context, cfg stream.ConsumerConfig) (stream.Consumer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrTransportClosed
	}
	g := t.groups[cfg.Group]
	if g == nil {
		g = &group{committed: map[stream.TopicPartition]int64{}}
		t.groups[cfg.Group] = g
	}
	if g.consumer != nil {
		return nil, fmt.Errorf("memory: group %q already has a consumer (the memory transport does not rebalance)", cfg.Group)
	}
	c := &consumer{t: t, group: g, byPartition: map[stream.TopicPartition]*cursor{}, wake: make(chan struct{}, 1), onRevoked: cfg.OnRevoked}
	topics := append([]string(nil), cfg.Topics...)
	sort.Strings(topics)
	for _, name := range topics {
		tp := t.topicLocked(name)
		for p := range tp.partitions {
			id := stream.TopicPartition{Topic: name, Partition: int32(p)}
			cur := &cursor{tp: id, topic: tp, next: max(0, g.committed[id])}
			c.cursors = append(c.cursors, cur)
			c.byPartition[id] = cur
		}
	}
	g.consumer = c
	t.polling = append(t.polling, c)
	return c, nil
}

type consumer struct {
	t           *Transport
	group       *group
	cursors     []*cursor                         // guarded by t.mu
	byPartition map[stream.TopicPartition]*cursor // guarded by t.mu
	rotate      int                               // guarded by t.mu: first cursor of the next poll, for fairness
	closed      bool                              // guarded by t.mu
	wake        chan struct{}                     // see wakeLocked
	onRevoked   func([]stream.TopicPartition)
}

// Revoke simulates a rebalance that takes partitions away from group's
// consumer: it calls the consumer's OnRevoked (the App finishes their
// in-flight messages and marks them) and then stops polling them. It
// returns false if the group has no consumer.
func (t *Transport) Revoke(groupName string, partitions []stream.TopicPartition) bool {
	t.mu.Lock()
	g := t.groups[groupName]
	if g == nil || g.consumer == nil {
		t.mu.Unlock()
		return false
	}
	c := g.consumer
	t.mu.Unlock()
	if c.onRevoked != nil {
		c.onRevoked(partitions) // without t.mu: the App marks (and so locks) meanwhile
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tp := range partitions {
		if cur := c.byPartition[tp]; cur != nil {
			delete(c.byPartition, tp)
			c.cursors = slices.DeleteFunc(c.cursors, func(x *cursor) bool { return x == cur })
		}
	}
	return true
}

type cursor struct {
	tp     stream.TopicPartition
	topic  *topic
	next   int64
	paused bool
}

func (c *consumer) Poll(ctx context.Context, buf []*stream.Record) ([]*stream.Record, error) {
	buf = buf[:0]
	limit := max(cap(buf), 1)
	for {
		c.t.mu.Lock()
		if c.closed || c.t.closed {
			c.t.mu.Unlock()
			return buf, stream.ErrClosed
		}
		n := len(c.cursors)
		for i := 0; i < n && len(buf) < limit; i++ {
			cur := c.cursors[(c.rotate+i)%n]
			if cur.paused {
				continue
			}
			records := cur.topic.partitions[cur.tp.Partition]
			for cur.next < int64(len(records)) && len(buf) < limit {
				buf = append(buf, records[cur.next])
				cur.next++
			}
		}
		c.rotate++
		c.t.mu.Unlock()
		if len(buf) > 0 {
			return buf, nil
		}
		select {
		case <-ctx.Done():
			return buf, ctx.Err()
		case <-c.wake:
		}
	}
}

func (c *consumer) Mark(tp stream.TopicPartition, next int64) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.closed {
		return // a closed consumer commits nothing more
	}
	if cur, ok := c.group.committed[tp]; !ok || next > cur {
		c.group.committed[tp] = next
	}
}

func (c *consumer) Seek(tp stream.TopicPartition, offset int64) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if cur := c.byPartition[tp]; cur != nil {
		cur.next = offset
		c.t.wakeLocked()
	}
}

func (c *consumer) Pause(tp stream.TopicPartition) { c.setPaused(tp, true) }

func (c *consumer) Resume(tp stream.TopicPartition) { c.setPaused(tp, false) }

func (c *consumer) setPaused(tp stream.TopicPartition, paused bool) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if cur := c.byPartition[tp]; cur != nil && cur.paused != paused {
		cur.paused = paused
		c.t.wakeLocked()
	}
}

// Paused reports whether the group's consumer has paused the partition.
func (t *Transport) Paused(groupName string, tp stream.TopicPartition) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.groups[groupName]; g != nil && g.consumer != nil {
		if cur := g.consumer.byPartition[tp]; cur != nil {
			return cur.paused
		}
	}
	return false
}

func (c *consumer) Close(context.Context) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.group.consumer = nil
		c.t.wakeLocked()
		c.t.polling = slices.DeleteFunc(c.t.polling, func(p *consumer) bool { return p == c })
	}
	return nil
}

// fnv32a is FNV-1a, written out so that choosing a partition allocates
// nothing.
func fnv32a(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}
