package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/history"
	"github.com/sushka-io/sushka/test/testbroker"
)

// startReady starts three nodes and waits until each lists the three
// unfenced.
func startReady(ctx context.Context, t *testing.T, bin string) []*node {
	t.Helper()
	nodes := startCluster(t, bin, 3)
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d lists three unfenced brokers", n.id), func() error {
			_, err := clusterView(ctx, t, n, []int32{0, 1, 2})
			return err
		})
	}
	return nodes
}

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
// Metadata names the first replica rather than raft's leader (seen: kgo's
// produce spins on NOT_LEADER_OR_FOLLOWER until the test's deadline);
// followers serve Fetch.
func TestReplicated(t *testing.T) {
	bin := testbroker.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := startReady(ctx, t, bin)
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

// failoverRounds is how many times TestReplicatedLeaderKilled kills a
// leader: 3, or $SUSHKA_FAILOVER_ROUNDS (for measuring: docs/benchmarks.md).
func failoverRounds(t *testing.T) int {
	if s := os.Getenv("SUSHKA_FAILOVER_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SUSHKA_FAILOVER_ROUNDS=%q: want a count", s)
		}
		return n
	}
	return 3
}

// TestReplicatedLeaderKilled: a topic of 3 partitions rf=3 produced to
// with acks=all by two idempotent producers and a probe (synchronous, to
// partition 0), read throughout by two consumers; partition 0's leader
// is killed -9, then restarted on its directory, three times. The history
// checker passes (every acknowledged record read back at its offset by
// both consumers, no offset with two values, each partition linearizable)
// and the failover (kill → the probe's first acknowledged produce on the
// new leader) is logged.
//
// Fails when: acks=all is answered at the leader's save rather than at
// commit (an acknowledged record the killed leader had alone is lost:
// the checker's lost-write); the leader in Metadata is the first replica
// rather than raft's (produce never reaches the new leader: no
// acknowledgement after the kill); OffsetForLeaderEpoch answers epoch 0
// (consumers take the new epoch for a truncation and reset).
func TestReplicatedLeaderKilled(t *testing.T) {
	bin := testbroker.Binary(t)
	rounds := failoverRounds(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(60+30*rounds)*time.Second)
	defer cancel()
	nodes := startReady(ctx, t, bin)
	const topic = "failover"
	if err := createTopic(ctx, t, nodes[0], topic, 3, 3); err != nil {
		t.Fatal(err)
	}
	agreedLeaders(ctx, t, nodes, topic, 3, 15*time.Second)

	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.kafka)
	}
	// Clients refresh metadata at most every 100 ms (kgo's default
	// MetadataMinAge is 5 s, which would be the failover time measured).
	common := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(time.Second), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })}
	// A restarted node answers UNKNOWN_TOPIC_OR_PARTITION until it has
	// replayed the metadata log (KRaft's broker waits for that catch-up
	// before it serves; ours does not yet: docs/replication.md 4c). kgo
	// counts those answers per partition and, past 4, fails the next
	// retriable error too (seen in a CI-like run: the tail record failed
	// NOT_LEADER_OR_FOLLOWER). What this test checks is that nothing
	// acknowledged is lost, so the producers keep retrying them.
	producerOpts := []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.UnknownTopicRetries(-1)}
	rec := history.NewRecorder()
	var producers []*history.Producer
	for _, name := range []string{"p1", "p2"} {
		p, err := history.NewProducer(rec, name, append(append(common, producerOpts...), kgo.RecordRetries(1<<30))...)
		if err != nil {
			t.Fatal(err)
		}
		producers = append(producers, p)
	}
	probe, err := kgo.NewClient(append(append(common, producerOpts...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	var consumers []*history.Consumer
	for _, name := range []string{"c1", "c2"} {
		c, err := history.NewConsumer(rec, name, "", append(common, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p.Produce(ctx, topic, fmt.Sprintf("%s-%d", pName(p, producers), i))
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	for _, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, _ = c.Poll(pctx)
				pcancel()
			}
		}()
	}
	var acksMu sync.Mutex
	var probeAcks []time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			value := fmt.Sprintf("probe-%d", i)
			op := rec.ProduceInvoked("probe", topic, value, true)
			pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
			r, err := probe.ProduceSync(pctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(value)}).First()
			pcancel()
			if err != nil {
				rec.ProduceFailed(op, err, history.DefiniteFailure(err))
				continue
			}
			rec.ProduceAcked(op, r.Partition, r.Offset)
			acksMu.Lock()
			probeAcks = append(probeAcks, time.Now())
			acksMu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	firstAckAfter := func(at time.Time) (time.Duration, bool) {
		acksMu.Lock()
		defer acksMu.Unlock()
		for _, a := range probeAcks {
			if a.After(at) {
				return a.Sub(at), true
			}
		}
		return 0, false
	}

	time.Sleep(time.Second)
	var failovers []time.Duration
	for round := range rounds {
		views, _, err := replicatedView(ctx, t, nodes[(round+1)%3], topic, 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		victim := nodes[views[0].leader]
		killed := time.Now()
		victim.kill()
		var took time.Duration
		eventually(t, 20*time.Second, fmt.Sprintf("round %d: a produce acknowledged after node %d (partition 0's leader) was killed", round, victim.id), func() error {
			var ok bool
			if took, ok = firstAckAfter(killed); !ok {
				return errors.New("none yet")
			}
			return nil
		})
		failovers = append(failovers, took)
		t.Logf("round %d: killed node %d (leader of partition 0, epoch %d): first acknowledged produce after %v", round, victim.id, views[0].epoch, took.Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond) // production goes on without it
		victim.start(t, bin)
		agreedLeaders(ctx, t, nodes, topic, 3, 30*time.Second)
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	for _, p := range producers {
		p.Close()
	}
	// A partition whose leader changed after its last record ends with
	// the new leader's LEADER_CHANGE control batch, which no consumer
	// reads (Drain would wait for it): one more record in each, recorded.
	for p := range int32(3) {
		value := fmt.Sprintf("tail-%d", p)
		op := rec.ProduceInvoked("probe", topic, value, true)
		r, err := probe.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}).First()
		if err != nil {
			rec.ProduceFailed(op, err, history.DefiniteFailure(err))
			t.Fatalf("the tail record of partition %d: %v", p, err)
		}
		rec.ProduceAcked(op, r.Partition, r.Offset)
	}
	for _, c := range consumers {
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.Drain(dctx, topic); err != nil {
			t.Errorf("%v", err)
		}
		dcancel()
		c.Close()
	}
	slices.Sort(failovers)
	t.Logf("failover (kill → first acknowledged produce) over %d rounds: best %v, median %v, worst %v", len(failovers),
		failovers[0].Round(time.Millisecond), failovers[len(failovers)/2].Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
	history.Require(t, rec, history.Options{})
}

// pName is p's name among producers (p1, p2).
func pName(p *history.Producer, producers []*history.Producer) string {
	return fmt.Sprintf("p%d", slices.Index(producers, p)+1)
}

// segmentBytes are the record bytes of a partition directory: its
// segments (.log files) concatenated in offset order.
func segmentBytes(t *testing.T, dir string) []byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names) // 20-digit base offsets
	var all []byte
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// segmentSize is the size of a partition directory's segments (0 while
// it does not exist).
func segmentSize(dir string) int64 {
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var n int64
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestReplicatedFollowerCatchesUp: a follower of a 1-partition rf=3 topic
// is stopped while 24 MiB are produced acks=all (committed by the other
// two), then restarted: its log reaches the leader's size, and once the
// cluster is stopped its segments hold the leader's bytes exactly. The
// catch-up speed (the log's bytes over the time from the restart until
// the follower has them) is logged.
//
// Fails when: a restarted replica does not rejoin its group (the group
// not reopened from its directory at the quorum's replay: the follower
// never grows); entries reach it in another order or with other offsets
// (the bytes differ).
func TestReplicatedFollowerCatchesUp(t *testing.T) {
	bin := testbroker.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nodes := startReady(ctx, t, bin)
	const topic = "catchup"
	if err := createTopic(ctx, t, nodes[0], topic, 1, 3); err != nil {
		t.Fatal(err)
	}
	leader := nodes[agreedLeaders(ctx, t, nodes, topic, 1, 15*time.Second)[0].leader]
	follower := nodes[(leader.id+1)%3]
	follower.stop(t)

	cl := client(t, leader, nodes[(leader.id+2)%3])
	const total, valueSize = 24 << 20, 16 << 10
	rnd := rand.New(rand.NewPCG(1, 2)) // incompressible values: the log holds total bytes
	var rs []*kgo.Record
	for range total / valueSize {
		v := make([]byte, valueSize)
		for i := range v {
			v[i] = byte(rnd.Uint32())
		}
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: v})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing with a follower down: %v", err)
	}
	leaderDir := filepath.Join(leader.dataDir, topic+"-0")
	followerDir := filepath.Join(follower.dataDir, topic+"-0")
	want := segmentSize(leaderDir)
	before := segmentSize(followerDir)

	follower.start(t, bin)
	took := eventually(t, 60*time.Second, "the restarted follower has the leader's log", func() error {
		if got := segmentSize(followerDir); got < want {
			return fmt.Errorf("%d of %d bytes", got, want)
		}
		return nil
	})
	mb := float64(want-before) / (1 << 20)
	t.Logf("catch-up: %.1f MiB in %v from the restart (process start included): %.1f MiB/s", mb, took.Round(time.Millisecond), mb/took.Seconds())

	for _, n := range nodes {
		n.stop(t)
	}
	lb, fb := segmentBytes(t, leaderDir), segmentBytes(t, followerDir)
	if len(lb) != len(fb) {
		t.Fatalf("leader's segments hold %d bytes, the follower's %d", len(lb), len(fb))
	}
	for i := range lb {
		if lb[i] != fb[i] {
			t.Fatalf("leader's and follower's segments differ at byte %d of %d", i, len(lb))
		}
	}
}
