package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// TestReplicatedTopicChanges: changes through the quorum reach a
// replicated topic's replicas. A topic of rf=3 grown from 1 to 2
// partitions, then given min.insync.replicas=3 through a follower: with
// one follower killed, an acks=all produce to partition 0's leader is not
// acknowledged (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND or
// REQUEST_TIMED_OUT: fewer than 3 replicas hold it), and once the follower
// is back it is; then the topic deleted through a node is gone from every
// node and a topic of the same name is created and served again.
//
// Fails when: a config change republishes the topic without its
// replicated partitions or does not pass min.insync.replicas to them, or
// a grown topic drops them (the produce with a follower down is
// acknowledged by the raft majority, min.isr still 1: both seen before the
// fix of the merge of branches rf3 and clustermeta).
func TestReplicatedTopicChanges(t *testing.T) {
	bin := testbroker.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nodes := startReady(ctx, t, bin)
	const topic = "changes"
	if err := createTopic(ctx, t, nodes[0], topic, 1, 3); err != nil {
		t.Fatal(err)
	}
	agreedLeaders(ctx, t, nodes, topic, 1, 15*time.Second)
	if code := createPartitions(ctx, t, nodes[1], topic, 2); code != 0 {
		t.Fatalf("CreatePartitions 1 → 2: %v", kerr.ErrorForCode(code))
	}
	leaders := agreedLeaders(ctx, t, nodes, topic, 2, 15*time.Second)
	leader := nodes[leaders[0].leader]
	follower := nodes[(leaders[0].leader+1)%3]
	if code := alterConfig(ctx, t, follower, topic, "min.insync.replicas", "3"); code != 0 {
		t.Fatalf("min.insync.replicas=3: %v", kerr.ErrorForCode(code))
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d applies min.insync.replicas=3", n.id), func() error {
			v, err := topicConfig(ctx, t, n, topic, "min.insync.replicas")
			if err == nil && v != "3" {
				err = fmt.Errorf("node %d: min.insync.replicas %s", n.id, v)
			}
			return err
		})
	}
	_, topicID, err := replicatedView(ctx, t, leader, topic, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	produce := func() int16 {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 3000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = 0, oneBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return request(ctx, t, leader, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	if code := produce(); code != 0 {
		t.Fatalf("acks=all with every replica up: %v", kerr.ErrorForCode(code))
	}

	follower.kill()
	switch code := produce(); code {
	case kerr.NotEnoughReplicas.Code, kerr.NotEnoughReplicasAfterAppend.Code, kerr.RequestTimedOut.Code:
	default:
		t.Fatalf("acks=all with min.insync.replicas=3 and node %d down: %v, want it not acknowledged", follower.id, kerr.ErrorForCode(code))
	}
	follower.start(t, bin)
	eventually(t, 30*time.Second, fmt.Sprintf("acks=all again once node %d is back", follower.id), func() error {
		if code := produce(); code != 0 {
			return kerr.ErrorForCode(code)
		}
		return nil
	})

	if code := deleteTopic(ctx, t, follower, topic); code != 0 {
		t.Fatalf("DeleteTopics: %v", kerr.ErrorForCode(code))
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d removes the deleted topic's replicas", n.id), func() error {
			if dirs := partitionDirs(t, n, topic); len(dirs) != 0 {
				return fmt.Errorf("node %d still has %v", n.id, dirs)
			}
			return nil
		})
	}
	// The restarted node was fenced while it was down (3 s sessions):
	// rf=3 needs it unfenced again.
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d lists three unfenced brokers", n.id), func() error {
			_, err := clusterView(ctx, t, n, []int32{0, 1, 2})
			return err
		})
	}
	if err := createTopic(ctx, t, nodes[2], topic, 2, 3); err != nil {
		t.Fatalf("recreating %s: %v", topic, err)
	}
	agreedLeaders(ctx, t, nodes, topic, 2, 15*time.Second)
	cl := client(t, nodes...)
	produceAll(ctx, t, cl, topic, 2, 20, "again")
	if got := consumeAll(ctx, t, nodes, topic, []int32{0, 1}, 40); len(got[0]) != 20 || len(got[1]) != 20 {
		t.Fatalf("the recreated topic: %d and %d records, want 20 each", len(got[0]), len(got[1]))
	}
	for _, n := range nodes {
		if out := n.log.String(); strings.Contains(out, "panic") {
			t.Fatalf("node %d:\n%s", n.id, out)
		}
	}
}
