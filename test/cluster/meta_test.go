package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// request sends req to node n itself and returns its answer.
func request(ctx context.Context, t *testing.T, n *node, req kmsg.Request) kmsg.Response {
	t.Helper()
	resp, err := client(t, n).SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatalf("%T to node %d: %v", req, n.id, err)
	}
	return resp
}

// notController is a node other than the active controller (as node
// nodes[0] sees it).
func notController(ctx context.Context, t *testing.T, nodes []*node) (*node, *node) {
	t.Helper()
	var ctl int32
	eventually(t, 20*time.Second, "a controller", func() (err error) {
		ctl, err = clusterView(ctx, t, nodes[0], []int32{0, 1, 2})
		return err
	})
	var others []*node
	for _, n := range nodes {
		if n.id != ctl {
			others = append(others, n)
		}
	}
	return others[0], others[1]
}

// topicConfig is DescribeConfigs' value of a topic config on node n.
func topicConfig(ctx context.Context, t *testing.T, n *node, topic, name string) (string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, []string{name}
	req.Resources = append(req.Resources, rr)
	resp, err := client(t, n).SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return "", err
	}
	r := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return "", err
	}
	for _, c := range r.Configs {
		if c.Name == name && c.Value != nil {
			return *c.Value, nil
		}
	}
	return "", fmt.Errorf("node %d: no %s", n.id, name)
}

func alterConfig(ctx context.Context, t *testing.T, n *node, topic, name, value string) int16 {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value, rc.Op = name, &value, kmsg.IncrementalAlterConfigOpSet
	rr.Configs = append(rr.Configs, rc)
	req.Resources = append(req.Resources, rr)
	r := request(ctx, t, n, req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
	return r.ErrorCode
}

func createPartitions(ctx context.Context, t *testing.T, n *node, topic string, count int32) int16 {
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	req.Topics = append(req.Topics, rt)
	return request(ctx, t, n, req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
}

func deleteTopic(ctx context.Context, t *testing.T, n *node, topic string) int16 {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 10000
	req.TopicNames = []string{topic} // v0-5
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = &topic // v6
	req.Topics = append(req.Topics, rt)
	return request(ctx, t, n, req).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode
}

// partitionLeaders is node n's Metadata of topic: the leader of each
// partition (error: unknown topic, or a partition without a leader).
func partitionLeaders(ctx context.Context, t *testing.T, n *node, topic string) (map[int32]int32, error) {
	m, err := directMetadata(ctx, t, n, topic)
	if err != nil {
		return nil, err
	}
	mt := m.Topics[0]
	if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
		return nil, err
	}
	out := map[int32]int32{}
	for _, p := range mt.Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
		}
		out[p.Partition] = p.Leader
	}
	return out, nil
}

// partitionDirs are node n's directories of topic's partitions.
func partitionDirs(t *testing.T, n *node, topic string) []string {
	entries, err := os.ReadDir(n.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), topic+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// quotaOf is DescribeClientQuotas' producer_byte_rate of client id on n
// (false: none, or n did not answer).
func quotaOf(ctx context.Context, t *testing.T, n *node, clientID string) (float64, bool) {
	req := kmsg.NewPtrDescribeClientQuotasRequest()
	c := kmsg.NewDescribeClientQuotasRequestComponent()
	c.EntityType, c.MatchType, c.Match = "client-id", 0, &clientID
	req.Components = append(req.Components, c)
	resp, err := client(t, n).SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return 0, false
	}
	for _, e := range resp.(*kmsg.DescribeClientQuotasResponse).Entries {
		for _, v := range e.Values {
			if v.Key == "producer_byte_rate" {
				return v.Value, true
			}
		}
	}
	return 0, false
}

// TestConfigsPartitionsQuotasDeleteThroughQuorum (docs/replication.md
// section 4e): three nodes; a topic's retention.ms altered through a node
// that is not the controller is what DescribeConfigs answers on all three,
// and incremental changes of two keys through two nodes at once are both
// kept;
// CreatePartitions 3→6 through a non-controller places the new partitions
// (every node's Metadata has six with leaders, kgo produces to all six and
// reads them back); a client quota set through one node is what every node
// describes and throttles a produce on a node that holds a partition;
// invalid input gets the single node's codes (INVALID_CONFIG,
// UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS); the whole cluster
// restarted keeps configs, partitions and quotas; DeleteTopics through a
// non-controller removes the topic from every node's Metadata and its
// directories from every node, and the name can be created again.
//
// Fails when: a change is applied on the receiving node only (the pre-4e
// Catalog path: the other nodes describe the old value); the applied
// ConfigsRecord is not handed to the handler (appliedMeta: DescribeConfigs
// on the others keeps the default); IncrementalAlterConfigs forwarded as
// the set computed on the receiving node (one of two concurrent changes
// lost); HostPartition does not grow a known
// topic (the new partitions have no log anywhere: produce fails);
// TopicRemoved not called (directories stay).
func TestConfigsPartitionsQuotasDeleteThroughQuorum(t *testing.T) {
	bin := testbroker.Binary(t)
	nodes := startCluster(t, bin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	via, other := notController(ctx, t, nodes)
	eventually(t, 20*time.Second, "topic created", func() error { return createTopic(ctx, t, via, "metatopic", 3, 1) })

	// Configs.
	if code := alterConfig(ctx, t, via, "metatopic", "retention.ms", "123456"); code != 0 {
		t.Fatalf("IncrementalAlterConfigs through node %d: error %d", via.id, code)
	}
	if v, err := topicConfig(ctx, t, via, "metatopic", "retention.ms"); err != nil || v != "123456" {
		t.Fatalf("node %d answered the change before applying it: %q %v", via.id, v, err)
	}
	for _, n := range nodes {
		eventually(t, 5*time.Second, fmt.Sprintf("node %d describes retention.ms", n.id), func() error {
			v, err := topicConfig(ctx, t, n, "metatopic", "retention.ms")
			if err == nil && v != "123456" {
				err = fmt.Errorf("retention.ms %s", v)
			}
			return err
		})
	}
	// Incremental changes of two keys through two nodes at once: both kept
	// (the operations are applied on the controller's state).
	for round := range 5 {
		value := strconv.Itoa(3_600_000 + round)
		codes := make(chan int16, 2)
		go func() { codes <- alterConfig(ctx, t, via, "metatopic", "segment.ms", value) }()
		go func() { codes <- alterConfig(ctx, t, other, "metatopic", "retention.bytes", value) }()
		for range 2 {
			if code := <-codes; code != 0 {
				t.Fatalf("round %d: IncrementalAlterConfigs: error %d", round, code)
			}
		}
		for _, n := range nodes {
			eventually(t, 5*time.Second, fmt.Sprintf("round %d: node %d has both changes", round, n.id), func() error {
				for _, name := range []string{"segment.ms", "retention.bytes", "retention.ms"} {
					want := value
					if name == "retention.ms" {
						want = "123456"
					}
					if v, err := topicConfig(ctx, t, n, "metatopic", name); err != nil || v != want {
						return fmt.Errorf("%s %q %v", name, v, err)
					}
				}
				return nil
			})
		}
	}
	if code := alterConfig(ctx, t, other, "metatopic", "retention.ms", "soon"); code != kerr.InvalidConfig.Code {
		t.Fatalf("retention.ms=soon: error %d, want INVALID_CONFIG", code)
	}
	if code := alterConfig(ctx, t, other, "nosuchtopic", "retention.ms", "1"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: error %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}

	// Partitions.
	if code := createPartitions(ctx, t, via, "metatopic", 6); code != 0 {
		t.Fatalf("CreatePartitions 3→6 through node %d: error %d", via.id, code)
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d has six partitions with leaders", n.id), func() error {
			ls, err := partitionLeaders(ctx, t, n, "metatopic")
			if err == nil && len(ls) != 6 {
				err = fmt.Errorf("%d partitions", len(ls))
			}
			return err
		})
	}
	for code, count := range map[int16]int32{kerr.InvalidPartitions.Code: 4} {
		if got := createPartitions(ctx, t, other, "metatopic", count); got != code {
			t.Fatalf("CreatePartitions 6→%d: error %d, want %d", count, got, code)
		}
	}
	if got := createPartitions(ctx, t, other, "nosuchtopic", 2); got != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("CreatePartitions of an unknown topic: error %d", got)
	}
	cl := client(t, nodes...)
	produceAll(ctx, t, cl, "metatopic", 6, 5, "grown")
	got := consumeAll(ctx, t, nodes, "metatopic", []int32{0, 1, 2, 3, 4, 5}, 30)
	for p := range int32(6) {
		if len(got[p]) != 5 {
			t.Fatalf("partition %d: %d records", p, len(got[p]))
		}
	}

	// Quotas: set through one node, enforced on another.
	qreq := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	ee := kmsg.NewAlterClientQuotasRequestEntryEntity()
	ee.Type, ee.Name = "client-id", kmsg.StringPtr("slow")
	e.Entity = append(e.Entity, ee)
	op := kmsg.NewAlterClientQuotasRequestEntryOp()
	op.Key, op.Value = "producer_byte_rate", 64
	e.Ops = append(e.Ops, op)
	qreq.Entries = append(qreq.Entries, e)
	if code := request(ctx, t, via, qreq).(*kmsg.AlterClientQuotasResponse).Entries[0].ErrorCode; code != 0 {
		t.Fatalf("AlterClientQuotas: error %d", code)
	}
	for _, n := range nodes {
		eventually(t, 5*time.Second, fmt.Sprintf("node %d describes the quota", n.id), func() error {
			if v, ok := quotaOf(ctx, t, n, "slow"); !ok || v != 64 {
				return fmt.Errorf("quota %v %v", v, ok)
			}
			return nil
		})
	}
	leaders, err := partitionLeaders(ctx, t, via, "metatopic")
	if err != nil {
		t.Fatal(err)
	}
	throttledOn := other
	p := int32(slices.IndexFunc([]int32{0, 1, 2, 3, 4, 5}, func(p int32) bool { return leaders[p] == throttledOn.id }))
	if p < 0 {
		t.Fatalf("node %d leads none of %v", throttledOn.id, leaders)
	}
	md, err := directMetadata(ctx, t, throttledOn, "metatopic")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := kgo.NewClient(kgo.SeedBrokers(throttledOn.kafka), kgo.ClientID("slow"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	throttled := false
	for i := 0; i < 20 && !throttled; i++ {
		preq := kmsg.NewPtrProduceRequest()
		preq.Acks, preq.TimeoutMillis = 1, 5000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic, pt.TopicID = "metatopic", md.Topics[0].TopicID // by id from v13
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = p, oneBatch()
		pt.Partitions = append(pt.Partitions, pp)
		preq.Topics = append(preq.Topics, pt)
		resp, err := slow.SeedBrokers()[0].Request(ctx, preq)
		if err != nil {
			t.Fatal(err)
		}
		pr := resp.(*kmsg.ProduceResponse)
		if code := pr.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce as slow to node %d partition %d: error %d", throttledOn.id, p, code)
		}
		throttled = pr.ThrottleMillis > 0
	}
	if !throttled {
		t.Fatalf("node %d never throttled client slow (quota set through node %d)", throttledOn.id, via.id)
	}

	// A restart of the whole cluster keeps all of it.
	for _, n := range nodes {
		n.stop(t)
	}
	for _, n := range nodes {
		n.start(t, bin)
	}
	for _, n := range nodes {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d after the restart", n.id), func() error {
			if v, err := topicConfig(ctx, t, n, "metatopic", "retention.ms"); err != nil || v != "123456" {
				return fmt.Errorf("retention.ms %q %v", v, err)
			}
			if v, ok := quotaOf(ctx, t, n, "slow"); !ok || v != 64 {
				return fmt.Errorf("quota %v %v", v, ok)
			}
			ls, err := partitionLeaders(ctx, t, n, "metatopic")
			if err == nil && len(ls) != 6 {
				err = fmt.Errorf("%d partitions", len(ls))
			}
			return err
		})
	}

	// Deletion through a node that is not the controller.
	via, _ = notController(ctx, t, nodes)
	if code := deleteTopic(ctx, t, via, "metatopic"); code != 0 {
		t.Fatalf("DeleteTopics through node %d: error %d", via.id, code)
	}
	if code := deleteTopic(ctx, t, via, "metatopic"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("DeleteTopics again: error %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d forgot the topic", n.id), func() error {
			if _, err := partitionLeaders(ctx, t, n, "metatopic"); err != kerr.UnknownTopicOrPartition {
				return fmt.Errorf("Metadata: %v", err)
			}
			if dirs := partitionDirs(t, n, "metatopic"); len(dirs) != 0 {
				return fmt.Errorf("directories %v", dirs)
			}
			return nil
		})
	}
	if err := createTopic(ctx, t, via, "metatopic", 2, 1); err != nil {
		t.Fatalf("recreating the deleted topic: %v", err)
	}
	produceAll(ctx, t, client(t, nodes...), "metatopic", 2, 3, "again")
	if got := consumeAll(ctx, t, nodes, "metatopic", []int32{0, 1}, 6); len(got[0]) != 3 || len(got[1]) != 3 {
		t.Fatalf("the recreated topic holds %v", got)
	}
}
