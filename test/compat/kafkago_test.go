package compat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// segmentio/kafka-go, in process: Client (CreateTopics, Metadata,
// ListGroups, DescribeGroups, OffsetFetch), a Writer with each codec
// (kafka-go has no idempotent producer), and a Reader with a GroupID that
// stops after 400 records and commits them (CommitMessages), then a new
// Reader of the same group that resumes with exactly the rest.

func kafkaGoConsume(t *testing.T, addr, group, topic string, max int) []record {
	t.Helper()
	got, err := kafkaGoRead(t, kafkaGoReaderConfig(addr, group, topic), max)
	if err != nil {
		t.Fatalf("kafka-go FetchMessage after %d records: %v", len(got), err)
	}
	return got
}

// kafkaGoReaderConfig is the Reader of the tests: a group member reading
// from the first offset, with short waits and backoffs.
func kafkaGoReaderConfig(addr, group, topic string) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:           []string{addr},
		GroupID:           group,
		Topic:             topic,
		MaxWait:           200 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		ReadBackoffMin:    50 * time.Millisecond,
		ReadBackoffMax:    200 * time.Millisecond,
	}
}

// kafkaGoRead reads max records with a Reader of cfg, commits them
// (CommitMessages) and closes it; an error of FetchMessage ends it early
// and is returned.
func kafkaGoRead(t *testing.T, cfg kafka.ReaderConfig, max int) ([]record, error) {
	t.Helper()
	r := kafka.NewReader(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []record
	var msgs []kafka.Message
	for len(got) < max {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			r.Close()
			return got, err
		}
		got = append(got, record{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)})
		msgs = append(msgs, m)
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go CommitMessages: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("kafka-go Reader.Close: %v", err)
	}
	return got, nil
}

func TestKafkaGo(t *testing.T) {
	goModuleVersions(t, "github.com/segmentio/kafka-go")
	b := startBroker(t)
	const topic, group = "kafka-go", "kafka-go-g"
	addr := kafka.TCP(b.addr)
	cl := &kafka.Client{Addr: addr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cr, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}}})
	if err != nil || cr.Errors[topic] != nil {
		t.Fatalf("CreateTopics: %v %v", err, cr)
	}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) != 3 || len(md.Brokers) != 1 {
		t.Fatalf("Metadata: %v %+v", err, md)
	}

	all := map[string]string{}
	for _, codec := range []kafka.Compression{0, kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd} {
		name := "none"
		if codec != 0 {
			name = codec.String()
		}
		w := &kafka.Writer{
			Addr:         addr,
			Topic:        topic,
			Balancer:     &kafka.Hash{},
			RequiredAcks: kafka.RequireAll,
			Compression:  codec,
			BatchTimeout: 10 * time.Millisecond,
		}
		prefix := "kafka-go-" + name
		vals := want(prefix, perCodec)
		var msgs []kafka.Message
		for i := range perCodec {
			k := fmt.Sprintf("%s-k%d", prefix, i)
			msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(vals[k])})
			all[k] = vals[k]
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("%s WriteMessages: %v", name, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	checkRecords(t, "written by kafka-go, read by franz-go", b.readAll(topic, len(all)), all)

	first := kafkaGoConsume(t, b.addr, group, topic, 400)
	b.checkCommittedCount(group, topic, 400)
	second := kafkaGoConsume(t, b.addr, group, topic, len(all)-400)
	checkResume(t, first, second, all)
	b.checkCommittedAtEnd(group, topic)

	// The group as kafka-go's Client sees it.
	lg, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil || lg.Error != nil {
		t.Fatalf("ListGroups: %v %v", err, lg)
	}
	found := false
	for _, g := range lg.Groups {
		found = found || g.GroupID == group && g.ProtocolType == "consumer"
	}
	if !found {
		t.Fatalf("ListGroups: %+v", lg.Groups)
	}
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(dg.Groups) != 1 || dg.Groups[0].Error != nil || dg.Groups[0].GroupState != "Empty" {
		t.Fatalf("DescribeGroups: %v %+v", err, dg)
	}
	of, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1, 2}}})
	if err != nil || of.Error != nil {
		t.Fatalf("OffsetFetch: %v %+v", err, of)
	}
	var sum int64
	for _, p := range of.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("OffsetFetch partition %+v", p)
		}
		sum += p.CommittedOffset
	}
	if sum != int64(len(all)) {
		t.Fatalf("OffsetFetch: committed offsets add up to %d, want %d (%+v)", sum, len(all), of.Topics)
	}
}
