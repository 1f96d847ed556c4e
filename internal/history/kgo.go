package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Producer is a franz-go client whose produces are recorded.
type Producer struct {
	Client     *kgo.Client
	rec        *Recorder
	name       string
	idempotent bool
	inFlight   sync.WaitGroup
}

// NewProducer makes a kgo client with opts (seed brokers, acks, retries)
// and records its produces under name. It is idempotent unless opts
// disable it (kgo.DisableIdempotentWrite).
func NewProducer(r *Recorder, name string, opts ...kgo.Opt) (*Producer, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	disabled, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool)
	return &Producer{Client: cl, rec: r, name: name, idempotent: !disabled}, nil
}

// Produce produces value to topic asynchronously and records the outcome.
// It blocks while the client's buffer is full (or until ctx ends).
func (p *Producer) Produce(ctx context.Context, topic, value string) {
	op := p.rec.ProduceInvoked(p.name, topic, value, p.idempotent)
	p.inFlight.Add(1)
	p.Client.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}, func(rec *kgo.Record, err error) {
		defer p.inFlight.Done()
		if err != nil {
			p.rec.ProduceFailed(op, err, DefiniteFailure(err))
			return
		}
		p.rec.ProduceAcked(op, rec.Partition, rec.Offset)
	})
}

// Close closes the client, which fails what is still buffered (recorded
// as indefinite), and waits for every produce's outcome.
func (p *Producer) Close() {
	p.Client.Close()
	p.inFlight.Wait()
}

// DefiniteFailure reports whether a produce that failed with err is surely
// in no log: the broker answered with an error that refuses the batch
// before it is appended (the record is too large, invalid, not
// authorized). Everything else (a timeout, a lost connection, retries
// exhausted, a canceled context, NOT_LEADER) is indefinite: an earlier
// attempt may have been appended.
func DefiniteFailure(err error) bool {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTopicException,
		kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
		kerr.InvalidRequiredAcks, kerr.UnsupportedForMessageFormat, kerr.PolicyViolation, kerr.InvalidTimestamp:
		return true
	}
	return false
}

// Consumer is a franz-go consumer whose reads, and for a group member its
// commits, are recorded.
//
// A group member (group non-empty) commits what each Poll returned,
// synchronously, before the group may rebalance (the helper sets
// kgo.BlockRebalanceOnPoll, kgo.DisableAutoCommit and the
// OnPartitionsAssigned callback, which opens a new session of every
// assigned partition). A direct consumer (group empty: opts assign
// partitions with kgo.ConsumePartitions or kgo.ConsumeTopics) reads each
// partition in one session per Consumer.
type Consumer struct {
	Client *kgo.Client
	rec    *Recorder
	name   string
	group  string
	adm    *kadm.Client
}

// NewConsumer makes a kgo consumer with opts (seed brokers, topics, reset
// offset) that records under name; group non-empty makes it a member of
// that group. A new Consumer with the name of an earlier one starts new
// sessions.
func NewConsumer(r *Recorder, name, group string, opts ...kgo.Opt) (*Consumer, error) {
	r.EndSessions(name)
	if group != "" {
		opts = append(opts, kgo.ConsumerGroup(group), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
				for topic, ps := range assigned {
					for _, p := range ps {
						r.NewSession(name, topic, p)
					}
				}
			}))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &Consumer{Client: cl, rec: r, name: name, group: group, adm: kadm.NewClient(cl)}, nil
}

// Poll polls once (until records arrive or ctx ends), records every
// record, and for a group member commits them; it returns how many
// records it read. Fetch errors other than ctx's end are returned
// (after the records are recorded).
func (c *Consumer) Poll(ctx context.Context) (int, error) {
	fs := c.Client.PollFetches(ctx)
	if c.group != "" {
		defer c.Client.AllowRebalance()
	}
	next := map[string]map[int32]kgo.EpochOffset{}
	n := 0
	fs.EachRecord(func(rec *kgo.Record) {
		n++
		c.rec.Polled(c.name, rec.Topic, rec.Partition, rec.Offset, string(rec.Value))
		if next[rec.Topic] == nil {
			next[rec.Topic] = map[int32]kgo.EpochOffset{}
		}
		next[rec.Topic][rec.Partition] = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	})
	var err error
	fs.EachError(func(topic string, partition int32, ferr error) {
		if err == nil && !errors.Is(ferr, context.Canceled) && !errors.Is(ferr, context.DeadlineExceeded) {
			err = fmt.Errorf("fetching %s/%d: %w", topic, partition, ferr)
		}
	})
	if c.group != "" && len(next) > 0 {
		c.commit(ctx, next)
	}
	return n, err
}

// commit commits offsets synchronously and records the outcome of each
// partition.
func (c *Consumer) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	plain := map[string]map[int32]int64{}
	for topic, ps := range offsets {
		plain[topic] = map[int32]int64{}
		for p, eo := range ps {
			plain[topic][p] = eo.Offset
		}
	}
	op := c.rec.CommitInvoked(c.name, c.group, plain)
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.Client.CommitOffsetsSync(commitCtx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		answered := map[string]map[int32]bool{}
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if answered[t.Topic] == nil {
						answered[t.Topic] = map[int32]bool{}
					}
					answered[t.Topic][p.Partition] = true
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
						c.rec.CommitFailed(op, t.Topic, p.Partition, perr)
					} else {
						c.rec.CommitAcked(op, t.Topic, p.Partition)
					}
				}
			}
		}
		for topic, ps := range plain {
			for p := range ps {
				if !answered[topic][p] {
					c.rec.CommitFailed(op, topic, p, cmpOr(err, errors.New("no answer for the partition")))
				}
			}
		}
	})
}

func cmpOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// EndOffsets asks for the end offsets of topic and records the answers.
func (c *Consumer) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	op := c.rec.EndOffsetsInvoked(c.name, topic)
	listed, err := c.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	var perr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			perr = cmpOr(perr, fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		ends[o.Partition] = o.Offset
		c.rec.EndOffset(op, c.name, o.Topic, o.Partition, o.Offset)
	})
	return ends, perr
}

// FetchCommitted asks for the group's committed offsets (OffsetFetch) and
// records them; only for a group member.
func (c *Consumer) FetchCommitted(ctx context.Context) error {
	if c.group == "" {
		return errors.New("history: FetchCommitted of a consumer in no group")
	}
	op := c.rec.FetchCommittedInvoked(c.name, c.group)
	offsets, err := c.adm.FetchOffsets(ctx, c.group)
	if err != nil {
		return err
	}
	if err := offsets.Error(); err != nil {
		return err
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		c.rec.FetchedCommitted(op, c.group, o.Topic, o.Partition, o.At)
	})
	return nil
}

// Drain polls until this consumer (a direct consumer) or its group (a
// member) has read topic to the end offsets answered when Drain began:
// a direct consumer until it read each non-empty partition's last offset,
// a member until the group's acknowledged commits reach every end. A log
// whose last offsets are transaction markers never ends this way: use
// Poll.
func (c *Consumer) Drain(ctx context.Context, topic string) error {
	ends, err := c.EndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	for {
		done := true
		for p, end := range ends {
			if end == 0 {
				continue
			}
			if c.group != "" {
				done = done && c.rec.committed(c.group, topic, p) >= end
			} else {
				done = done && c.rec.highestRead(c.name, topic, p) >= end-1
			}
		}
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("draining %s to %v: %w", topic, ends, err)
		}
		pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := c.Poll(pollCtx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			time.Sleep(50 * time.Millisecond) // a broker restarting: the client retries
		}
	}
}

// Close leaves the group (a member) and closes the client; its sessions
// end.
func (c *Consumer) Close() {
	c.Client.Close()
	c.rec.EndSessions(c.name)
}
