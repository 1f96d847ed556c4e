package compat_test

import (
	"context"
	"fmt"
	"io"
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

// TestKafkaGoClientFetch: kafka-go's Client.Fetch sends a sessionless fetch
// (SessionID -1, SessionEpoch -1, KIP-227's FINAL_EPOCH), which Kafka
// serves in full whatever the session id. Sushka used to answer it
// FETCH_SESSION_ID_NOT_FOUND with no topics, which kafka-go reports as
// "no topic". Read from offset 0, from FirstOffset, from the middle, and
// past the records with a short wait.
func TestKafkaGoClientFetch(t *testing.T) {
	b := startBroker(t)
	const topic = "kafka-go-client-fetch"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(b.addr), Timeout: 10 * time.Second}
	cr, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}}})
	if err != nil || cr.Errors[topic] != nil {
		t.Fatalf("CreateTopics: %v %v", err, cr)
	}
	var records []kafka.Record
	for i := range 5 {
		records = append(records, kafka.Record{Key: kafka.NewBytes([]byte(fmt.Sprintf("k%d", i))), Value: kafka.NewBytes([]byte(fmt.Sprintf("v%d", i)))})
	}
	pr, err := cl.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: 1, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(records...)})
	if err != nil || pr.Error != nil {
		t.Fatalf("Produce: %v %+v", err, pr)
	}
	read := func(offset int64, maxWait time.Duration) (*kafka.FetchResponse, []string) {
		t.Helper()
		fr, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 1, Offset: offset, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: maxWait})
		if err != nil {
			t.Fatalf("Client.Fetch from %d: %v", offset, err)
		}
		if fr.Error != nil || fr.Topic != topic || fr.Partition != 1 || fr.HighWatermark != 5 {
			t.Fatalf("Client.Fetch from %d: %+v", offset, fr)
		}
		var got []string
		for {
			r, err := fr.Records.ReadRecord()
			if err != nil {
				break
			}
			v, _ := io.ReadAll(r.Value)
			if r.Offset >= offset {
				got = append(got, fmt.Sprintf("%d:%s", r.Offset, v))
			}
		}
		return fr, got
	}
	for _, offset := range []int64{0, kafka.FirstOffset} {
		if _, got := read(offset, time.Second); fmt.Sprint(got) != "[0:v0 1:v1 2:v2 3:v3 4:v4]" {
			t.Fatalf("Client.Fetch from %d: %v", offset, got)
		}
	}
	if _, got := read(3, time.Second); fmt.Sprint(got) != "[3:v3 4:v4]" {
		t.Fatalf("Client.Fetch from 3: %v", got)
	}
	start := time.Now()
	if _, got := read(5, 300*time.Millisecond); len(got) != 0 {
		t.Fatalf("Client.Fetch at the end: %v", got)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("Client.Fetch at the end answered after %v, want the 300ms long poll", waited)
	}
}
