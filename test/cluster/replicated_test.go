package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// partitionView is one partition as a node's Metadata answers it.
type partitionView struct {
	leader, epoch int32
	replicas      []int32
}

// replicatedView asks node n for topic's partitions and checks that each
// has a leader and want replicas.
func replicatedView(ctx context.Context, t *testing.T, n *node, topic string, partitions, want int) ([]partitionView, [16]byte, error) {
	m, err := directMetadata(ctx, t, n, topic)
	if err != nil {
		return nil, [16]byte{}, err
	}
	if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != partitions {
		return nil, [16]byte{}, fmt.Errorf("node %d: %d topics", n.id, len(m.Topics))
	}
	views := make([]partitionView, partitions)
	for _, p := range m.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.Leader < 0 || len(p.Replicas) != want {
			return nil, [16]byte{}, fmt.Errorf("node %d: partition %d leader %d epoch %d replicas %v error %d", n.id, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ErrorCode)
		}
		views[p.Partition] = partitionView{leader: p.Leader, epoch: p.LeaderEpoch, replicas: slices.Sorted(slices.Values(p.Replicas))}
	}
	return views, m.Topics[0].TopicID, nil
}

// agreedLeaders waits until every node of nodes names the same leader and
// epoch for each partition of topic, with replicas [0 1 2], and returns
// them.
func agreedLeaders(ctx context.Context, t *testing.T, nodes []*node, topic string, partitions int, d time.Duration) []partitionView {
	t.Helper()
	var agreed []partitionView
	eventually(t, d, "every node names the same leader of each partition of "+topic, func() error {
		agreed = nil
		for _, n := range nodes {
			views, _, err := replicatedView(ctx, t, n, topic, partitions, 3)
			if err != nil {
				return err
			}
			for p, v := range views {
				if !slices.Equal(v.replicas, []int32{0, 1, 2}) {
					return fmt.Errorf("node %d: partition %d replicas %v", n.id, p, v.replicas)
				}
			}
			if agreed == nil {
				agreed = views
				continue
			}
			for p := range views {
				if views[p].leader != agreed[p].leader || views[p].epoch != agreed[p].epoch {
					return fmt.Errorf("partition %d: node %d names leader %d epoch %d, node %d leader %d epoch %d",
						p, n.id, views[p].leader, views[p].epoch, nodes[0].id, agreed[p].leader, agreed[p].epoch)
				}
			}
		}
		return nil
	})
	return agreed
}

// TestReplicated: three nodes, a topic of 3 partitions with replication
// factor 3: every node's Metadata names the same leader (and epoch, the
// raft term) of each partition and the three replicas; kgo produces
// acks=all to every partition and reads every record back in order; a
// follower refuses Produce, Fetch, ListOffsets and OffsetForLeaderEpoch
// with NOT_LEADER_OR_FOLLOWER; a replication factor above the brokers is
// INVALID_REPLICATION_FACTOR.
//
// Fails when: rf > 1 is refused at creation (step 5b's CreateTopics);
// partitions are opened as plain logs on each replica (each node takes
// appends alone: a follower's Produce succeeds, or the nodes disagree on
// the records read back through different leaders after a restart);
// Metadata names the first replica rather than raft's leader (the nodes'
// leaders disagree with the one that takes appends: kgo's produce spins on
// NOT_LEADER_OR_FOLLOWER until its timeout); followers serve Fetch.
func TestReplicated(t *testing.T) {
	bin := testbroker.Binary(t)
	nodes := startCluster(t, bin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d lists three unfenced brokers", n.id), func() error {
			_, err := clusterView(ctx, t, n, []int32{0, 1, 2})
			return err
		})
	}
	if err := createTopic(ctx, t, nodes[1], "rf3", 3, 3); err != nil {
		t.Fatalf("creating rf=3: %v", err)
	}
	if err := createTopic(ctx, t, nodes[1], "rf4", 1, 4); !errors.Is(err, kerr.InvalidReplicationFactor) {
		t.Fatalf("rf=4 on three brokers: %v, want INVALID_REPLICATION_FACTOR", err)
	}
	leaders := agreedLeaders(ctx, t, nodes, "rf3", 3, 15*time.Second)
	t.Logf("leaders: %+v", leaders)
	_, topicID, err := replicatedView(ctx, t, nodes[0], "rf3", 3, 3)
	if err != nil {
		t.Fatal(err)
	}

	cl := client(t, nodes...)
	const perPartition = 200
	produceAll(ctx, t, cl, "rf3", 3, perPartition, "a")
	got := consumeAll(ctx, t, nodes, "rf3", []int32{0, 1, 2}, 3*perPartition)
	for p := range int32(3) {
		if len(got[p]) != perPartition {
			t.Fatalf("partition %d: %d records read, want %d", p, len(got[p]), perPartition)
		}
		for i, v := range got[p] {
			if want := fmt.Sprintf("a-%d-%d", p, i); v != want {
				t.Fatalf("partition %d record %d: %q, want %q", p, i, v, want)
			}
		}
	}

	// A follower of partition 0 refuses what only a leader serves.
	follower := nodes[(leaders[0].leader+1)%3]
	fc := client(t, follower)
	broker := fc.SeedBrokers()[0]
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks, produce.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic, pt.TopicID = "rf3", topicID // by id from v13
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition, pp.Records = 0, oneBatch()
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	resp, err := broker.Request(ctx, produce)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce to follower %d: error %v, want NOT_LEADER_OR_FOLLOWER", follower.id, kerr.ErrorForCode(code))
	}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MaxBytes, fetch.SessionEpoch = 10, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "rf3", topicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.PartitionMaxBytes = 0, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	if resp, err = broker.Request(ctx, fetch); err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch from follower %d: error %v, want NOT_LEADER_OR_FOLLOWER", follower.id, kerr.ErrorForCode(code))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "rf3"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 0, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	if resp, err = broker.Request(ctx, lo); err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("list offsets on follower %d: error %v, want NOT_LEADER_OR_FOLLOWER", follower.id, kerr.ErrorForCode(code))
	}
	ofe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "rf3"
	op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	op.Partition, op.CurrentLeaderEpoch, op.LeaderEpoch = 0, -1, leaders[0].epoch
	ot.Partitions = append(ot.Partitions, op)
	ofe.Topics = append(ofe.Topics, ot)
	if resp, err = broker.Request(ctx, ofe); err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("offset for leader epoch on follower %d: error %v, want NOT_LEADER_OR_FOLLOWER", follower.id, kerr.ErrorForCode(code))
	}
	// The leader's answer: the current epoch ends at the high watermark.
	lc := client(t, nodes[leaders[0].leader])
	if resp, err = lc.SeedBrokers()[0].Request(ctx, ofe); err != nil {
		t.Fatal(err)
	}
	sp := resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	if sp.ErrorCode != 0 || sp.LeaderEpoch != leaders[0].epoch || sp.EndOffset < perPartition {
		t.Fatalf("offset for leader epoch %d on the leader: epoch %d end %d error %v, want epoch %d, end ≥ %d",
			leaders[0].epoch, sp.LeaderEpoch, sp.EndOffset, kerr.ErrorForCode(sp.ErrorCode), leaders[0].epoch, perPartition)
	}
}
