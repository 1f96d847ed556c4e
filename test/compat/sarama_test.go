package compat_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// IBM/sarama, in process: ClusterAdmin (create, list, describe topics and
// configs, groups and their offsets, delete group), the idempotent
// SyncProducer with each codec, and a ConsumerGroup that stops after 400
// records with a synchronous commit, then a new one of the same group that
// resumes with exactly the rest.

func saramaConfig(t *testing.T) *sarama.Config {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.ClientID = "sushka-compat"
	cfg.Version = sarama.V3_6_0_0
	cfg.Net.DialTimeout = 5 * time.Second
	return cfg
}

// saramaGroupHandler consumes up to max records, marks and commits them
// and then cancels the session's parent context.
type saramaGroupHandler struct {
	mu     sync.Mutex
	max    int
	got    []record
	cancel context.CancelFunc
	err    error
}

func (h *saramaGroupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaGroupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaGroupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.take(sess, m)
		}
	}
}

func (h *saramaGroupHandler) take(sess sarama.ConsumerGroupSession, m *sarama.ConsumerMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) >= h.max {
		return // not marked: the next consumer of the group gets it
	}
	h.got = append(h.got, record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)})
	sess.MarkMessage(m, "")
	if len(h.got) == h.max {
		sess.Commit() // synchronous with auto commit off
		h.cancel()
	}
}

// saramaConsume runs a consumer group member until it has max records.
func saramaConsume(t *testing.T, addr, group, topic string, max int, configure ...func(*sarama.Config)) []record {
	t.Helper()
	cfg := saramaConfig(t)
	for _, c := range configure {
		c(cfg)
	}
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := &saramaGroupHandler{max: max, cancel: cancel}
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				done <- err
				return
			}
		}
		done <- nil
	}()
	go func() {
		for err := range cg.Errors() {
			h.mu.Lock()
			if h.err == nil {
				h.err = err
			}
			h.mu.Unlock()
		}
	}()
	if err := <-done; err != nil {
		t.Fatalf("sarama Consume: %v", err)
	}
	if err := cg.Close(); err != nil {
		t.Fatalf("sarama consumer group close: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		t.Fatalf("sarama consumer group error: %v", h.err)
	}
	if len(h.got) != max {
		t.Fatalf("sarama consumer group got %d records in a minute, want %d", len(h.got), max)
	}
	return h.got
}

func TestSarama(t *testing.T) {
	goModuleVersions(t, "github.com/IBM/sarama")
	b := startBroker(t)
	const topic, group = "sarama", "sarama-g"

	adm, err := sarama.NewClusterAdmin([]string{b.addr}, saramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1, ConfigEntries: map[string]*string{"retention.ms": strPtr("86400000")}}, false); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Fatalf("second CreateTopic: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics[topic]; !ok || d.NumPartitions != 3 || d.ConfigEntries["retention.ms"] == nil || *d.ConfigEntries["retention.ms"] != "86400000" {
		t.Fatalf("ListTopics: %+v", topics[topic])
	}
	md, err := adm.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 || !errors.Is(md[0].Err, sarama.ErrNoError) || len(md[0].Partitions) != 3 {
		t.Fatalf("DescribeTopics: %v %+v", err, md)
	}

	cfg := saramaConfig(t)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	all := map[string]string{}
	for _, codec := range []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionGZIP, sarama.CompressionSnappy, sarama.CompressionLZ4, sarama.CompressionZSTD} {
		cfg.Producer.Compression = codec
		p, err := sarama.NewSyncProducer([]string{b.addr}, cfg)
		if err != nil {
			t.Fatalf("%s producer: %v", codec, err)
		}
		prefix := "sarama-" + codec.String()
		w := want(prefix, perCodec)
		var msgs []*sarama.ProducerMessage
		for i := range perCodec {
			k := fmt.Sprintf("%s-k%d", prefix, i)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(w[k])})
			all[k] = w[k]
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatalf("%s SendMessages: %v", codec, err)
		}
		for _, m := range msgs {
			if m.Offset < 0 {
				t.Fatalf("%s: message without an offset: %+v", codec, m)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	checkRecords(t, "written by sarama, read by franz-go", b.readAll(topic, len(all)), all)

	first := saramaConsume(t, b.addr, group, topic, 400)
	b.checkCommittedCount(group, topic, 400)
	second := saramaConsume(t, b.addr, group, topic, len(all)-400)
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)

	// The group as sarama's admin sees it.
	groups, err := adm.ListConsumerGroups()
	if err != nil || groups[group] != "consumer" {
		t.Fatalf("ListConsumerGroups: %v %v", err, groups)
	}
	desc, err := adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(desc) != 1 || desc[0].State != "Empty" || desc[0].ProtocolType != "consumer" {
		t.Fatalf("DescribeConsumerGroups: %v %+v", err, desc)
	}
	offs, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets: %v", err)
	}
	var sum int64
	for p := int32(0); p < 3; p++ {
		blk := offs.GetBlock(topic, p)
		if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
			t.Fatalf("offset block %d: %+v", p, blk)
		}
		sum += blk.Offset
	}
	if sum != int64(len(all)) {
		t.Fatalf("ListConsumerGroupOffsets: committed offsets add up to %d, want %d", sum, len(all))
	}
	if err := adm.DeleteConsumerGroup(group); err != nil {
		t.Fatalf("DeleteConsumerGroup: %v", err)
	}
	if groups, err := adm.ListConsumerGroups(); err != nil || groups[group] != "" {
		t.Fatalf("after DeleteConsumerGroup: %v %v", err, groups)
	}
}

func strPtr(s string) *string { return &s }
