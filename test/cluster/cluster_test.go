// Package cluster_test runs `sushka serve` as three nodes of a cluster,
// child processes of the built binary on 127.0.0.1 (issue 14 step 5,
// docs/replication.md section 4b): registration and fencing, Metadata from
// every node, a topic created through any node and served by the nodes
// its placement names, the active controller killed and restarted.
package cluster_test

import (
	"context"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/test/testbroker"
)

func TestMain(m *testing.M) { testbroker.Main(m) }

// sessionTimeout is the nodes' --broker-session-timeout: shorter than
// Kafka's 9 s so a killed node is fenced within the test's bounds.
const sessionTimeout = 3 * time.Second

// node is one `sushka serve` of the cluster: its ports and data directory
// stay across restarts.
type node struct {
	id        int32
	kafka     string // host:port of its PLAINTEXT listener
	peer      string // host:port of its peer listener
	dataDir   string
	cmd       *exec.Cmd
	log       *testbroker.SyncBuffer
	done      chan struct{}
	voters    string
	extraArgs []string
}

func (n *node) start(t *testing.T, bin string) {
	t.Helper()
	n.log, n.done = &testbroker.SyncBuffer{}, make(chan struct{})
	args := append([]string{"serve", "--node-id", strconv.Itoa(int(n.id)), "--listen", n.kafka, "--peer-listen", n.peer,
		"--controller-voters", n.voters, "--data-dir", n.dataDir, "--admin-listen", "",
		"--broker-session-timeout", sessionTimeout.String(), "--broker-heartbeat-interval", "500ms"}, n.extraArgs...)
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
}

// kill ends the node at once (SIGKILL: no shutdown, no final fsync).
func (n *node) kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

func (n *node) stop(t *testing.T) {
	select {
	case <-n.done:
		return
	default:
	}
	if testbroker.Terminate(n.cmd, n.done, 15*time.Second) {
		t.Logf("node %d did not stop within 15 s of SIGTERM; killed\n%s", n.id, n.log.String())
	}
}

// startCluster starts size nodes from empty data directories.
func startCluster(t *testing.T, bin string, size int, extraArgs ...string) []*node {
	t.Helper()
	return startClusterWith(t, bin, size, func(int32) []string { return extraArgs })
}

// startClusterWith is startCluster with each node's own extra arguments.
func startClusterWith(t *testing.T, bin string, size int, extraArgs func(id int32) []string) []*node {
	t.Helper()
	var nodes []*node
	var voters []string
	for i := range size {
		n := &node{id: int32(i), kafka: "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t)),
			peer: "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t)), dataDir: t.TempDir(), extraArgs: extraArgs(int32(i))}
		voters = append(voters, fmt.Sprintf("%d@%s", i, n.peer))
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.voters = strings.Join(voters, ",")
		n.start(t, bin)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(t)
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %d's log:\n%s", n.id, n.log.String())
			}
		}
	})
	return nodes
}

// client is a franz-go client bootstrapped on the nodes given.
func client(t *testing.T, nodes ...*node) *kgo.Client {
	t.Helper()
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.kafka)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DialTimeout(time.Second), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// directMetadata asks node n itself (not whichever broker the client
// picks) for the metadata of topics (nil: all).
func directMetadata(ctx context.Context, t *testing.T, n *node, topics ...string) (*kmsg.MetadataResponse, error) {
	t.Helper()
	cl := client(t, n)
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := cl.SeedBrokers()[0].Request(ctx, req) // n itself
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// eventually retries check every 50 ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < d {
		if err = check(); err == nil {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, d, err)
	return 0
}

// clusterView checks that n's Metadata lists the brokers want (by id) and
// a controller among them, and returns the controller.
func clusterView(ctx context.Context, t *testing.T, n *node, want []int32) (int32, error) {
	m, err := directMetadata(ctx, t, n)
	if err != nil {
		return -1, err
	}
	var got []int32
	for _, b := range m.Brokers {
		got = append(got, b.NodeID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return -1, fmt.Errorf("node %d lists brokers %v, want %v", n.id, got, want)
	}
	if !slices.Contains(want, m.ControllerID) {
		return -1, fmt.Errorf("node %d names controller %d", n.id, m.ControllerID)
	}
	return m.ControllerID, nil
}

// createTopic creates name through node n (CreateTopics sent to n itself:
// forwarded to the controller when n is not it).
func createTopic(ctx context.Context, t *testing.T, n *node, name string, partitions int32, rf int16) error {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	req.Topics = append(req.Topics, rt)
	resp, err := client(t, n).SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return err
	}
	st := resp.(*kmsg.CreateTopicsResponse).Topics[0]
	if err := kerr.ErrorForCode(st.ErrorCode); err != nil {
		msg := ""
		if st.ErrorMessage != nil {
			msg = *st.ErrorMessage
		}
		return fmt.Errorf("%w: %s", err, msg)
	}
	return nil
}

// produceAll produces perPartition records to each partition of topic
// (kgo routes each to its leader) and fails on any error.
func produceAll(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, partitions int32, perPartition int, tag string) {
	t.Helper()
	var rs []*kgo.Record
	for p := range partitions {
		for i := range perPartition {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", tag, p, i)})
		}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// consumeAll reads partitions of topic from the start until it has want
// records, and returns them by partition.
func consumeAll(ctx context.Context, t *testing.T, nodes []*node, topic string, partitions []int32, want int) map[int32][]string {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for _, p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.kafka)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[int32][]string{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", n, want, topic, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	return got
}

// TestThreeNodes: three nodes from empty directories register and are
// unfenced, each one's Metadata lists the three and one controller; a
// topic of 6 partitions created through a node that is not the controller
// is spread over the three, produced to and consumed back whole; the
// active controller killed (-9): another is active within the election
// time and creates topics, the killed node's partitions have no leader
// once it is fenced; restarted on its directory it has every topic (the
// one created while it was down included) and serves its partitions' data;
// the whole cluster stopped and started again keeps both topics and their
// records. `sushka cluster status` shows the fenced node, the controller
// and the partitions without a leader.
//
// Fails when: the quorum is not durable (MemStorage in broker/cluster.go:
// one restarted node catches up from the others, the whole cluster
// restarted has no topic: seen); assignments are not applied
// (no partition directories, every produce NOT_LEADER_OR_FOLLOWER);
// Metadata lists only the node itself (pre-cluster 03_metadata.go: the
// "three brokers" checks); a fenced broker's partitions keep their
// leader (partitionReplicas not consulting Fenced).
func TestThreeNodes(t *testing.T) {
	bin := testbroker.Binary(t)
	nodes := startCluster(t, bin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := []int32{0, 1, 2}

	var controller int32
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d lists three unfenced brokers and a controller", n.id), func() error {
			var err error
			controller, err = clusterView(ctx, t, n, all)
			return err
		})
	}
	t.Logf("controller: node %d", controller)

	// Through a node that is not the controller: forwarded.
	via := nodes[(controller+1)%3]
	if err := createTopic(ctx, t, via, "spread", 6, 1); err != nil {
		t.Fatalf("creating through node %d: %v", via.id, err)
	}
	if err := createTopic(ctx, t, via, "spread", 6, 1); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating it again: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if err := createTopic(ctx, t, via, "replicated", 3, 3); !errors.Is(err, kerr.InvalidReplicationFactor) || !strings.Contains(err.Error(), "not yet wired") {
		t.Fatalf("rf=3: %v, want INVALID_REPLICATION_FACTOR (replication not yet wired)", err)
	}
	leaders := map[int32]int32{}
	var topicID [16]byte
	eventually(t, 10*time.Second, "every node sees spread's 6 partitions with leaders", func() error {
		for _, n := range nodes {
			m, err := directMetadata(ctx, t, n, "spread")
			if err != nil {
				return err
			}
			if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 6 {
				return fmt.Errorf("node %d: %d topics", n.id, len(m.Topics))
			}
			for _, p := range m.Topics[0].Partitions {
				if p.ErrorCode != 0 || len(p.Replicas) != 1 || p.Leader != p.Replicas[0] {
					return fmt.Errorf("node %d: partition %d leader %d replicas %v error %d", n.id, p.Partition, p.Leader, p.Replicas, p.ErrorCode)
				}
				leaders[p.Partition] = p.Leader
			}
			topicID = m.Topics[0].TopicID
		}
		return nil
	})
	perNode := map[int32]int{}
	for _, l := range leaders {
		perNode[l]++
	}
	if len(perNode) != 3 {
		t.Fatalf("leaders %v: not on all three nodes", leaders)
	}
	for _, n := range nodes {
		for p, l := range leaders {
			_, err := os.Stat(filepath.Join(n.dataDir, fmt.Sprintf("spread-%d", p)))
			if (l == n.id) != (err == nil) {
				t.Fatalf("node %d: partition %d (leader %d) directory: %v", n.id, p, l, err)
			}
		}
	}

	// A produce to a node that does not hold the partition.
	for p, l := range leaders {
		other := nodes[(l+1)%3]
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = "spread", topicID // by id from v13
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = oneBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := client(t, other).SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("produce to partition %d on node %d (leader %d): error %d, want NOT_LEADER_OR_FOLLOWER", p, other.id, l, code)
		}
		break
	}

	cl := client(t, nodes...)
	produceAll(ctx, t, cl, "spread", 6, 50, "before")
	got := consumeAll(ctx, t, nodes, "spread", []int32{0, 1, 2, 3, 4, 5}, 300)
	for p := range int32(6) {
		if len(got[p]) != 50 || got[p][0] != fmt.Sprintf("before-%d-0", p) || got[p][49] != fmt.Sprintf("before-%d-49", p) {
			t.Fatalf("partition %d: %d records read back, want 50 in order", p, len(got[p]))
		}
	}

	checkOneGroup(ctx, t, nodes[0], nodes[2])

	// Kill the active controller.
	killed := nodes[controller]
	killedAt := time.Now()
	killed.kill()
	var live []*node
	var liveIDs []int32
	for _, n := range nodes {
		if n != killed {
			live, liveIDs = append(live, n), append(liveIDs, n.id)
		}
	}
	var newController int32
	took := eventually(t, 10*time.Second, "a new active controller", func() error {
		m, err := directMetadata(ctx, t, live[0])
		if err != nil {
			return err
		}
		if m.ControllerID == killed.id || m.ControllerID < 0 {
			return fmt.Errorf("controller %d", m.ControllerID)
		}
		newController = m.ControllerID
		return createTopic(ctx, t, live[1], "after-failover", 2, 1)
	})
	t.Logf("node %d killed; node %d active and a topic created %s later", killed.id, newController, took.Round(10*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("a new controller took %s (election: 1-2 s at 100 ms ticks)", took)
	}
	eventually(t, sessionTimeout+5*time.Second, "the killed node fenced: its partitions without a leader", func() error {
		if _, err := clusterView(ctx, t, live[0], liveIDs); err != nil {
			return err
		}
		m, err := directMetadata(ctx, t, live[1], "spread")
		if err != nil {
			return err
		}
		for _, p := range m.Topics[0].Partitions {
			orphan := leaders[p.Partition] == killed.id
			switch {
			case orphan && (p.Leader != -1 || p.ErrorCode != kerr.LeaderNotAvailable.Code):
				return fmt.Errorf("partition %d of the killed node: leader %d, error %d", p.Partition, p.Leader, p.ErrorCode)
			case !orphan && p.Leader != leaders[p.Partition]:
				return fmt.Errorf("partition %d: leader %d, want %d", p.Partition, p.Leader, leaders[p.Partition])
			}
		}
		return nil
	})
	status, errOut, err := testbroker.RunCommand("", bin, "cluster", "status", "-b", live[0].kafka)
	if err != nil {
		t.Fatalf("sushka cluster status: %v\n%s", err, errOut)
	}
	for _, want := range []string{fmt.Sprintf("controller  node %d", newController), fmt.Sprintf("\n%d ", killed.id), "fenced", "up, controller", "none (LEADER_NOT_AVAILABLE)"} {
		if !strings.Contains(status, want) {
			t.Fatalf("sushka cluster status lacks %q:\n%s", want, status)
		}
	}
	if since := time.Since(killedAt); since < sessionTimeout-time.Second {
		t.Errorf("fenced %s after the kill, before the %s session timeout", since, sessionTimeout)
	}
	orphanClient, err := kgo.NewClient(kgo.SeedBrokers(live[0].kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	orphanProduce := orphanClient.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: pickOrphan(leaders, killed.id), Value: []byte("lost?")}).FirstErr()
	orphanClient.Close()
	if orphanProduce == nil {
		t.Fatal("a produce to a partition of the killed node succeeded")
	}

	// Restart it on its directory: it replays the quorum's log.
	killed.start(t, bin)
	eventually(t, 20*time.Second, "the restarted node back and unfenced", func() error {
		_, err := clusterView(ctx, t, killed, all)
		return err
	})
	m, err := directMetadata(ctx, t, killed, "spread", "after-failover")
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range m.Topics {
		if tp.ErrorCode != 0 {
			t.Fatalf("restarted node: topic %s error %d", *tp.Topic, tp.ErrorCode)
		}
	}
	got = consumeAll(ctx, t, nodes, "spread", []int32{0, 1, 2, 3, 4, 5}, 300)
	for p := range int32(6) {
		if len(got[p]) != 50 {
			t.Fatalf("after the restart, partition %d: %d records, want 50", p, len(got[p]))
		}
	}
	produceAll(ctx, t, cl, "after-failover", 2, 5, "after")

	// The whole cluster stopped and started again: only the durable
	// quorum logs know the topics now.
	for _, n := range nodes {
		n.stop(t)
	}
	for _, n := range nodes {
		n.start(t, bin)
	}
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d back after the whole cluster restarted", n.id), func() error {
			_, err := clusterView(ctx, t, n, all)
			return err
		})
	}
	for _, n := range nodes {
		m, err := directMetadata(ctx, t, n)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tp := range m.Topics {
			if !tp.IsInternal {
				names = append(names, *tp.Topic)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"after-failover", "spread"}) {
			t.Fatalf("node %d after the cluster's restart: topics %v", n.id, names)
		}
	}
	got = consumeAll(ctx, t, nodes, "spread", []int32{0, 1, 2, 3, 4, 5}, 300)
	if len(got) != 6 {
		t.Fatalf("after the cluster's restart: %d partitions read", len(got))
	}
}

// pickOrphan is a partition the node dead led.
func pickOrphan(leaders map[int32]int32, dead int32) int32 {
	for p, l := range leaders {
		if l == dead {
			return p
		}
	}
	return -1
}

// oneBatch is one record batch of one record, as a producer sends it.
func oneBatch() []byte {
	return batch.Build(batch.BuildOptions{Records: 1, ValueSize: 1, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
}

// TestFlagsRefused: contradictory or incomplete cluster flags stop `sushka
// serve` at once with an error that names the flag.
func TestFlagsRefused(t *testing.T) {
	bin := testbroker.Binary(t)
	peer := "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))
	voters := "0@" + peer + ",1@127.0.0.1:1,2@127.0.0.1:2"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--peer-listen", peer}, "needs both --peer-listen and --controller-voters"},
		{[]string{"--controller-voters", voters}, "needs both --peer-listen and --controller-voters"},
		{[]string{"--peer-listen", peer, "--controller-voters", "0@" + peer + ",0@127.0.0.1:2"}, "node 0 named twice"},
		{[]string{"--peer-listen", peer, "--controller-voters", "0-" + peer}, "is not ID@HOST:PORT"},
		{[]string{"--peer-listen", peer, "--controller-voters", "x@" + peer}, `node id "x"`},
		{[]string{"--peer-listen", peer, "--controller-voters", "0@nohost"}, "is not a reachable HOST:PORT"},
		{[]string{"--node-id", "5", "--peer-listen", peer, "--controller-voters", voters}, "--node-id 5 is not one of --controller-voters"},
		{[]string{"--peer-listen", peer, "--controller-voters", voters, "--peer-tls-cert-file", "c.pem"}, "all three of --peer-tls-cert-file"},
		{[]string{"--peer-listen", peer, "--controller-voters", voters, "--broker-heartbeat-interval", "10s"}, "--broker-heartbeat-interval 10s must be above 0 and below --broker-session-timeout"},
		{[]string{"--rack", "a"}, "--rack \"a\": only for a node of a cluster"},
	} {
		args := append([]string{"serve", "--data-dir", t.TempDir(), "--admin-listen", "", "--listen", "127.0.0.1:0"}, c.args...)
		_, errOut, err := testbroker.RunCommand("", bin, args...)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("sushka %s: %v, stderr %q; want an error with %q", strings.Join(c.args, " "), err, errOut, c.want)
		}
	}
}

// TestClusterKeysNeedClusterAction: BrokerRegistration and BrokerHeartbeat
// are served only by a node of a cluster, and with --authorizer only to a
// principal with CLUSTER_ACTION on the cluster: an anonymous client cannot
// register or fence brokers (a one-voter cluster whose own node, anonymous
// on its PLAINTEXT listener, is refused too, as Kafka refuses a broker
// without the grant). A single node does not list them in ApiVersions.
func TestClusterKeysNeedClusterAction(t *testing.T) {
	bin := testbroker.Binary(t)
	nodes := startCluster(t, bin, 1, "--authorizer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := client(t, nodes[0])
	var resp kmsg.Response
	eventually(t, 10*time.Second, "the node answers", func() error {
		req := kmsg.NewPtrBrokerRegistrationRequest()
		req.BrokerID, req.ClusterID = 7, "any"
		var err error
		resp, err = cl.SeedBrokers()[0].Request(ctx, req)
		return err
	})
	if code := resp.(*kmsg.BrokerRegistrationResponse).ErrorCode; code != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("anonymous BrokerRegistration: error %d, want CLUSTER_AUTHORIZATION_FAILED", code)
	}
	hb := kmsg.NewPtrBrokerHeartbeatRequest()
	hb.BrokerID, hb.BrokerEpoch = 0, 1
	resp, err := cl.SeedBrokers()[0].Request(ctx, hb)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.BrokerHeartbeatResponse).ErrorCode; code != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("anonymous BrokerHeartbeat: error %d, want CLUSTER_AUTHORIZATION_FAILED", code)
	}

	single := testbroker.Start(t, bin)
	scl := client(t, &node{kafka: single.Addr})
	vresp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, scl)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range vresp.ApiKeys {
		if k.ApiKey == 62 || k.ApiKey == 63 {
			t.Fatalf("a single node lists key %d in ApiVersions", k.ApiKey)
		}
	}
}

// checkOneGroup: two members of group g, bootstrapped on different nodes,
// end up in one group (every node names the same coordinator): their
// assignments of spread's 6 partitions are disjoint and cover all six.
// Fails when each node coordinates its own groups (two groups of one
// member, 6 partitions each).
func checkOneGroup(ctx context.Context, t *testing.T, a, b *node) {
	t.Helper()
	var mu sync.Mutex
	assigned := map[int]map[int32]bool{}
	member := func(i int, n *node) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("spread"),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				for _, p := range m["spread"] {
					assigned[i][p] = true
				}
				mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				for _, p := range m["spread"] {
					delete(assigned[i], p)
				}
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil && !cl.PollFetches(ctx).IsClientClosed() {
			}
		}()
		return cl
	}
	assigned[0], assigned[1] = map[int32]bool{}, map[int32]bool{}
	c0 := member(0, a)
	defer c0.Close()
	c1 := member(1, b)
	defer c1.Close()
	eventually(t, 30*time.Second, "two members of one group share the 6 partitions", func() error {
		mu.Lock()
		defer mu.Unlock()
		all := map[int32]bool{}
		for _, m := range assigned {
			for p := range m {
				if all[p] {
					return fmt.Errorf("partition %d assigned to both members: %v", p, assigned)
				}
				all[p] = true
			}
		}
		if len(all) != 6 || len(assigned[0]) == 0 || len(assigned[1]) == 0 {
			return fmt.Errorf("assignments %v", assigned)
		}
		return nil
	})
}

// TestPeerTLS: three nodes whose peer link is mutual TLS (--peer-tls-*,
// node certificates with CN node-<node id + 1> from a CA of their own)
// form the quorum: all register and are unfenced, a topic is created.
// Fails when the flags' files do not reach raftnode.Config.TLS on every
// node (a node with TLS facing one without is refused at the first bytes).
func TestPeerTLS(t *testing.T) {
	bin := testbroker.Binary(t)
	dir := t.TempDir()
	ca, err := certs.NewCA(pkix.Name{CommonName: "sushka peer CA"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := startClusterWith(t, bin, 3, func(id int32) []string {
		pair, err := certs.Issue(ca, certs.Options{Subject: pkix.Name{CommonName: fmt.Sprintf("node-%d", id+1)}, Hosts: []string{"127.0.0.1"}, Peer: true})
		if err != nil {
			t.Fatal(err)
		}
		cert, key := filepath.Join(dir, fmt.Sprintf("n%d.crt", id)), filepath.Join(dir, fmt.Sprintf("n%d.key", id))
		if err := pair.Write(cert, key); err != nil {
			t.Fatal(err)
		}
		return []string{"--peer-tls-cert-file", cert, "--peer-tls-key-file", key, "--peer-tls-ca-file", caFile}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d lists three unfenced brokers", n.id), func() error {
			_, err := clusterView(ctx, t, n, []int32{0, 1, 2})
			return err
		})
	}
	if err := createTopic(ctx, t, nodes[1], "over-tls", 3, 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(nodes[0].log.String(), "(mutual TLS)") {
		t.Fatalf("node 0's banner does not say its peer link is mutual TLS:\n%s", nodes[0].log.String())
	}
}
