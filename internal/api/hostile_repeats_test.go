package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The requests below are small; naming one thing many times used to make
// the broker build one (large) answer per repeat.

// TestHostileMetadataRepeatsOneTopic: a 13 kB Metadata request naming a
// 1,000-partition topic 1,000 times used to build a million partition
// answers (about 40 MB on the wire); Kafka answers the topic once.
func TestHostileMetadataRepeatsOneTopic(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1000)
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	for range 1000 {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = ptr("t")
		req.Topics = append(req.Topics, rt)
	}
	r, err := c.roundTrip(req, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1000 {
		t.Fatalf("want the topic once with its 1000 partitions, got %d topics", len(resp.Topics))
	}
}

// TestHostileDescribeLogDirsRepeatsOnePartition: a 4 MB request naming a
// partition a million times is answered with the partition once, as Kafka
// does.
func TestHostileDescribeLogDirsRepeatsOnePartition(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Version = 4
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic = "t"
	rt.Partitions = make([]int32, 1_000_001)
	rt.Partitions[len(rt.Partitions)-1] = 1
	req.Topics = append(req.Topics, rt)
	r, err := c.roundTrip(req, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.DescribeLogDirsResponse)
	if len(resp.Dirs) != 1 || len(resp.Dirs[0].Topics) != 1 || len(resp.Dirs[0].Topics[0].Partitions) != 2 {
		t.Fatalf("want partitions 0 and 1 once each, got %+v", resp.Dirs[0].Topics[0].Partitions[:min(3, len(resp.Dirs[0].Topics[0].Partitions))])
	}
}

// TestHostileDescribeConfigsRepeatsOneResource: each answer lists every
// topic config, so a topic named 100,000 times (0.4 MB) used to be answered
// with a hundred times as many bytes. The repeated resource is
// INVALID_REQUEST, once; another resource is answered normally.
func TestHostileDescribeConfigsRepeatsOneResource(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	tb.createTopic(t, "u", 1)
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version = 4
	for range 100_000 {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
		req.Resources = append(req.Resources, rr)
	}
	other := kmsg.NewDescribeConfigsRequestResource()
	other.ResourceType, other.ResourceName = kmsg.ConfigResourceTypeTopic, "u"
	req.Resources = append(req.Resources, other)
	r, err := c.roundTrip(req, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.DescribeConfigsResponse)
	if len(resp.Resources) != 2 {
		t.Fatalf("want two answers, got %d", len(resp.Resources))
	}
	if r0 := resp.Resources[0]; r0.ResourceName != "t" || r0.ErrorCode != kerr.InvalidRequest.Code || len(r0.Configs) != 0 {
		t.Errorf("repeated resource answered %d with %d configs, want INVALID_REQUEST", r0.ErrorCode, len(r0.Configs))
	}
	if r1 := resp.Resources[1]; r1.ResourceName != "u" || r1.ErrorCode != 0 || len(r1.Configs) == 0 {
		t.Errorf("the other resource answered %d with %d configs", r1.ErrorCode, len(r1.Configs))
	}
}

// TestHostileOffsetForLeaderEpochRepeatsOnePartition: a partition named a
// million times is answered once.
func TestHostileOffsetForLeaderEpochRepeatsOnePartition(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version = 4
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "t"
	rt.Partitions = make([]kmsg.OffsetForLeaderEpochRequestTopicPartition, 1_000_000)
	for i := range rt.Partitions {
		rt.Partitions[i] = kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	}
	req.Topics = append(req.Topics, rt)
	r, err := c.roundTrip(req, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.OffsetForLeaderEpochResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("want one answer, got %d topics, %d partitions", len(resp.Topics), len(resp.Topics[0].Partitions))
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.EndOffset != 0 {
		t.Errorf("answer %+v", p)
	}
}

// TestHostileAlterConfigsRepeatsOneResource: every alteration rewrites the
// catalogue under the admin lock, so a request naming a topic 20,000 times
// used to rewrite it 20,000 times. As in Kafka, a repeated resource is
// INVALID_REQUEST and left alone (answered once); the others are altered.
func TestHostileAlterConfigsRepeatsOneResource(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	tb.createTopic(t, "u", 1)
	c := dialRaw(t, tb.addr)
	set := func(name, value string) kmsg.IncrementalAlterConfigsRequestResource {
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
		rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		rc.Name, rc.Value = "retention.ms", ptr(value)
		rr.Configs = append(rr.Configs, rc)
		return rr
	}
	for _, copies := range []int{2, 20_000} {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.Version = 1
		for i := range copies {
			req.Resources = append(req.Resources, set("t", fmt.Sprint(1000+i)))
		}
		req.Resources = append(req.Resources, set("u", "5000"))
		start := time.Now()
		r, err := c.roundTrip(req, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.IncrementalAlterConfigsResponse)
		t.Logf("%d copies: answered in %v", copies, time.Since(start))
		if len(resp.Resources) != 2 {
			t.Fatalf("%d copies: want two answers, got %d", copies, len(resp.Resources))
		}
		if r0 := resp.Resources[0]; r0.ResourceName != "t" || r0.ErrorCode != kerr.InvalidRequest.Code {
			t.Errorf("%d copies: repeated resource answered %d, want INVALID_REQUEST", copies, r0.ErrorCode)
		}
		if r1 := resp.Resources[1]; r1.ResourceName != "u" || r1.ErrorCode != 0 {
			t.Errorf("%d copies: the other resource answered %d", copies, r1.ErrorCode)
		}
	}
	if v, ok := tb.lookup("t").meta.Configs["retention.ms"]; ok {
		t.Errorf("the repeated topic was altered: retention.ms=%s", v)
	}
	if v := tb.lookup("u").meta.Configs["retention.ms"]; v != "5000" {
		t.Errorf("the other topic has retention.ms=%q, want 5000", v)
	}
}

// TestHostileRequestsNamingTooManyPartitions: a 5 MB Produce naming a
// million partitions that do not exist used to allocate 440 MB for its
// answers. A request naming more distinct partitions (or config resources)
// than Config.MaxPartitionsPerRequest closes its connection, like a frame
// over the size limit; at the limit it is answered.
func TestHostileRequestsNamingTooManyPartitions(t *testing.T) {
	const limit = 1000
	tb := startTestBroker(t, Config{MaxPartitionsPerRequest: limit}) // AutoCreateTopics off
	tb.createTopic(t, "t", 1)
	produce := func(n int) kmsg.Request {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks = 9, 1
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		for p := range n {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = int32(p + 1)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return req
	}
	fetch := func(n int) kmsg.Request {
		req := fetchRequest("t", n, 0, 0)
		for i := range req.Topics[0].Partitions {
			req.Topics[0].Partitions[i].Partition = int32(i)
		}
		return req
	}
	listOffsets := func(n int) kmsg.Request {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 7
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "t"
		for p := range n {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = int32(p)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return req
	}
	describeConfigs := func(n int) kmsg.Request {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version = 4
		for i := range n {
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, fmt.Sprint("no-such-topic-", i)
			req.Resources = append(req.Resources, rr)
		}
		return req
	}
	metadata := func(n int) kmsg.Request {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		for i := range n {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = ptr(fmt.Sprint("no-such-topic-", i))
			req.Topics = append(req.Topics, rt)
		}
		return req
	}
	offsetForLeaderEpoch := func(n int) kmsg.Request {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version, req.ReplicaID = 4, -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "t"
		for p := range n {
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.Partition = int32(p)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return req
	}
	for name, build := range map[string]func(int) kmsg.Request{
		"Produce": produce, "Fetch": fetch, "ListOffsets": listOffsets, "DescribeConfigs": describeConfigs,
		"Metadata": metadata, "OffsetForLeaderEpoch": offsetForLeaderEpoch,
	} {
		c := dialRaw(t, tb.addr)
		if _, err := c.roundTrip(build(limit), 10*time.Second); err != nil {
			t.Errorf("%s naming %d partitions: %v", name, limit, err)
		}
		c.send(build(limit + 1))
		c.expectClosed(fmt.Sprintf("%s naming %d partitions", name, limit+1))
	}
}
