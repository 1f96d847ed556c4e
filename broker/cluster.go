package broker

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/api"
	"github.com/sushka-io/sushka/internal/controller"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/raftnode"
	"github.com/sushka-io/sushka/internal/replica"
	"github.com/sushka-io/sushka/internal/server"
)

// ClusterConfig makes the broker a node of a multi-node cluster (issue 14
// step 5, docs/replication.md section 4b): the metadata quorum runs in the
// broker on its peer listener, durable under DATA/__cluster_metadata-0,
// and the broker registers and heartbeats with the active controller.
type ClusterConfig struct {
	// PeerListener is the peer listener (--peer-listen): raft's transport.
	PeerListener net.Listener
	// Voters are the controller voters (--controller-voters, KRaft's
	// controller.quorum.voters): node id → its peer listener's host:port.
	// The same on every node; Config.NodeID must be one of them (every
	// node a voter: KRaft's combined mode; learners are not wired yet).
	Voters map[int32]string
	// Rack is the broker's rack (broker.rack), for rack-aware placement.
	Rack string
	// PeerTLS, when set, runs the peer link over mutual TLS
	// (raftnode.Config.TLS): a node certificate with CN node-<raft id>.
	PeerTLS *tls.Config
	// HeartbeatInterval is broker.heartbeat.interval.ms (2 s).
	HeartbeatInterval time.Duration
	// SessionTimeout is broker.session.timeout.ms (9 s).
	SessionTimeout time.Duration
}

// Defaults of ClusterConfig (Kafka's).
const (
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultSessionTimeout    = controller.DefaultSessionTimeout
)

// MetadataTopic is the metadata quorum's name (KRaft's); its raft log is
// MetadataDir under the data directory, and no topic may take the name.
const (
	MetadataTopic = api.MetadataTopic
	MetadataDir   = MetadataTopic + "-0"
)

// clusterNode is the broker's side of the cluster: the metadata quorum's
// replica (raft node, durable storage, controller), the api.Cluster the
// request code asks, and the broker's lifecycle (registration and
// heartbeats). Made in New before the handler (which it serves) and
// started after it (its apply opens partitions in the handler).
type clusterNode struct {
	b           *Broker
	cfg         ClusterConfig
	node        int32
	clusterID   string
	incarnation [16]byte

	raft    *raftnode.Node
	storage *plog.RaftStorage
	ctrl    *controller.Controller

	stop context.CancelFunc
	done sync.WaitGroup

	mu     sync.Mutex
	epoch  int64 // the broker's epoch from its registration (-1: not registered)
	fenced bool

	// Owned by the metadata group's apply (its worker): the entry whose
	// assignments applied counts, and how many it has counted
	// (partitionGroup).
	assignIndex, assignOrdinal uint64

	// hintsMu guards the leaders of replicated partitions held elsewhere
	// as their replicas reported them (PartitionLeader), and the topics
	// being asked about.
	hintsMu sync.Mutex
	hints   map[partitionKey]leaderHint
	asking  map[[16]byte]bool
}

type partitionKey struct {
	topic     [16]byte
	partition int32
}

// leaderHint is a replicated partition's leader as a replica answered.
type leaderHint struct {
	leader, epoch int32
	at            time.Time
}

// ClusterIDFromVoters is the cluster's id: a digest of the voters list, so
// every node given the same --controller-voters agrees without a format
// step (KRaft's kafka-storage format --cluster-id). 22 characters of
// base64 as Kafka's cluster ids.
func ClusterIDFromVoters(voters map[int32]string) string {
	sum := votersDigest(voters)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

func votersDigest(voters map[int32]string) [32]byte {
	var sb strings.Builder
	for _, id := range voterIDs(voters) {
		fmt.Fprintf(&sb, "%d@%s,", id, voters[id])
	}
	return sha256.Sum256([]byte(sb.String()))
}

// newClusterNode checks cfg; the quorum starts in start.
func newClusterNode(b *Broker, cfg ClusterConfig) (*clusterNode, error) {
	switch {
	case cfg.PeerListener == nil:
		return nil, errors.New("broker: cluster mode needs a peer listener")
	case len(cfg.Voters) == 0:
		return nil, errors.New("broker: cluster mode needs the controller voters")
	}
	if _, ok := cfg.Voters[b.cfg.NodeID]; !ok {
		return nil, fmt.Errorf("broker: node %d is not one of the controller voters %v: every node of a cluster is a voter in this version (learners are not wired yet)", b.cfg.NodeID, voterIDs(cfg.Voters))
	}
	if b.cfg.Listeners[0].Protocol != server.Plaintext {
		return nil, fmt.Errorf("broker: cluster mode: the first listener (%s, %s) carries the nodes' own requests to the controller and must be PLAINTEXT in this version", b.cfg.Listeners[0].Name, b.cfg.Listeners[0].Protocol)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	c := &clusterNode{b: b, cfg: cfg, node: b.cfg.NodeID, clusterID: ClusterIDFromVoters(cfg.Voters), epoch: -1, fenced: true}
	inc, err := hex.DecodeString(controller.NewIncarnation())
	if err != nil {
		return nil, err
	}
	copy(c.incarnation[:], inc)
	return c, nil
}

func voterIDs(voters map[int32]string) []int32 {
	ids := make([]int32, 0, len(voters))
	for id := range voters {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// start opens the quorum's durable log, joins the metadata group and
// starts the broker's lifecycle. The handler exists: applied assignments
// open partitions in it.
func (c *clusterNode) start() error {
	digest := votersDigest(c.cfg.Voters)
	rn, err := raftnode.New(raftnode.Config{ID: controller.RaftID(c.node), Cluster: binary.BigEndian.Uint64(digest[:8]),
		Listener: c.cfg.PeerListener, TLS: c.cfg.PeerTLS, Logger: c.b.log.With("component", "raft")})
	if err != nil {
		return fmt.Errorf("broker: raft node: %w", err)
	}
	for id, addr := range c.cfg.Voters {
		if id != c.node {
			if err := rn.AddPeer(controller.RaftID(id), addr); err != nil {
				return fmt.Errorf("broker: peer %d at %s: %w", id, addr, err)
			}
		}
	}
	pcfg := plog.DefaultConfig(c.b.cfg.FS, filepath.Join(c.b.cfg.DataDir, MetadataDir))
	pcfg.Logger = c.b.log
	pcfg.RetentionTime, pcfg.RetentionBytes = -1, -1 // the quorum's log is compacted by snapshots, later
	storage, err := plog.OpenRaftStorage(pcfg)
	if err != nil {
		rn.Stop()
		return fmt.Errorf("broker: the metadata quorum's log %s: %w", pcfg.Dir, err)
	}
	ctrl, err := controller.New(controller.Config{Node: c.node, Voters: voterIDs(c.cfg.Voters), Raft: rn, Storage: storage,
		SessionTimeout: c.cfg.SessionTimeout, Listeners: []controller.Listener{c.applied}, Logger: c.b.log.With("component", "controller")})
	if err != nil {
		rn.Stop()
		storage.Close()
		return fmt.Errorf("broker: %w", err)
	}
	c.raft, c.storage, c.ctrl = rn, storage, ctrl
	rn.Start()
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.done.Add(2)
	go func() { defer c.done.Done(); ctrl.Run(ctx, raftnode.DefaultConfig().TickInterval) }()
	go func() { defer c.done.Done(); c.lifecycle(ctx) }()
	return nil
}

// close stops the lifecycle and the quorum's replica, then its log.
func (c *clusterNode) close() error {
	if c.raft == nil {
		return nil
	}
	c.stop()
	c.done.Wait()
	c.raft.Stop()
	return c.storage.Close()
}

// applied is the quorum's listener: an assignment opens (or, replayed at a
// restart, reopens) this node's replica of the partition, and makes the
// topic known here for the partitions held elsewhere.
func (c *clusterNode) applied(ch controller.Change) {
	c.appliedMeta(ch) // cluster_meta.go
	a, ok := ch.Record.(*meta.PartitionAssignmentRecord)
	if !ok {
		return
	}
	group := c.partitionGroup(ch.Index)
	mt, ok := c.ctrl.Machine().TopicByID(a.TopicID)
	if !ok {
		return
	}
	hosted := slices.Contains(a.Replicas, c.node)
	var open api.PartitionOpener
	if len(a.Replicas) > 1 {
		voters := make([]uint64, len(a.Replicas))
		for i, r := range a.Replicas {
			voters[i] = controller.RaftID(r)
		}
		preferred := a.Replicas[0] == c.node
		open = func(cfg plog.Config, minISR int) (*plog.Log, api.ReplicatedPartition, error) {
			return c.openReplica(group, voters, preferred, cfg, minISR)
		}
	}
	if err := c.b.handler.HostPartition(mt, a.Partition, hosted, open); err != nil {
		c.b.log.Error("applying a partition assignment", "topic", mt.Name, "partition", a.Partition, "err", err)
	}
}

// partitionGroup is the raft group id of the partition the assignment
// record being applied, in the metadata log's entry at index, names: the
// entry's index and the record's ordinal among the entry's assignments
// (index<<24 | ordinal). The same on every node (every node applies the
// same entries in the same order, a restart replays them), unique by
// construction (one entry, one index; an entry holds fewer than 2^24
// assignments: a topic's partitions are bounded far below), never the
// metadata group's 0 (index ≥ 2 above raft's bootstrap snapshot), and no
// field in the record: its format is unchanged. A snapshot of the
// metadata log (not built) must keep each assignment's group id.
func (c *clusterNode) partitionGroup(index uint64) uint64 {
	if index != c.assignIndex {
		c.assignIndex, c.assignOrdinal = index, 0
	}
	g := index<<24 | c.assignOrdinal
	c.assignOrdinal++
	return g
}

// openReplica opens this node's replica of a replicated partition on the
// node's one raft node (the metadata group's: one transport, one ticker).
// A new partition's preferred replica (its first) campaigns at once, so a
// topic is led within a round trip of its creation rather than an
// election timeout, by the broker Kafka would have chosen.
func (c *clusterNode) openReplica(group uint64, voters []uint64, preferred bool, cfg plog.Config, minISR int) (*plog.Log, api.ReplicatedPartition, error) {
	cfg.WritePath = plog.WriteSyscall // the raft storage's only path
	p, err := replica.Open(replica.Config{Node: c.raft, Group: group, Voters: voters, Log: cfg, MinInsyncReplicas: minISR})
	if err != nil {
		return nil, nil, err
	}
	if last, _ := p.Storage().LastIndex(); preferred && last == 0 {
		if err := c.raft.Campaign(group); err != nil {
			c.b.log.Warn("a new partition's preferred replica could not campaign", "group", group, "err", err)
		}
	}
	return p.Log(), replicatedPartition{p}, nil
}

// replicatedPartition is a replica.Partition as the request code asks it
// (api.ReplicatedPartition): broker ids, not raft ids.
type replicatedPartition struct{ p *replica.Partition }

func (r replicatedPartition) Leading() bool { return r.p.Leading() }

func (r replicatedPartition) Leader() (leader, epoch int32) {
	l, term := r.p.Leader()
	if l == 0 {
		return -1, int32(term)
	}
	return int32(l - 1), int32(term)
}

// EndOffsetForEpoch: the applied log's terms are non-decreasing by index,
// so the last entry of a term at most epoch is found by bisection, and
// the next epoch begins at that entry's end.
func (r replicatedPartition) EndOffsetForEpoch(epoch int32) (int32, int64) {
	rs := r.p.Storage()
	first, _ := rs.FirstIndex()
	last := rs.Applied()
	termAt := func(i uint64) int64 {
		t, err := rs.Term(i)
		if err != nil {
			return -1
		}
		return int64(t)
	}
	if last < first || termAt(first) > int64(epoch) {
		return -1, -1
	}
	lo, hi := first, last // termAt(lo) ≤ epoch
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if termAt(mid) <= int64(epoch) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == last {
		return int32(termAt(lo)), r.p.Log().HighWatermark()
	}
	return int32(termAt(lo)), rs.EndOffset(lo)
}

func (r replicatedPartition) ISR() []int32 {
	ids := r.p.ISR()
	if ids == nil {
		return nil
	}
	isr := make([]int32, len(ids))
	for i, id := range ids {
		isr[i] = int32(id - 1)
	}
	return isr
}

func (r replicatedPartition) SetMinInsyncReplicas(n int) { r.p.SetMinInsyncReplicas(n) }

func (r replicatedPartition) Close() error { return r.p.Close() }

// --- api.Cluster ---

// PartitionLeader is the leader of a replicated partition this node holds
// no replica of: as a replica last answered it, asked again (in the
// background, one topic at a time) when older than leaderHintTTL. Not
// known yet: the client is answered LEADER_NOT_AVAILABLE and asks again.
func (c *clusterNode) PartitionLeader(topicID [16]byte, partition int32) (int32, int32, bool) {
	c.hintsMu.Lock()
	defer c.hintsMu.Unlock()
	h, ok := c.hints[partitionKey{topicID, partition}]
	if (!ok || time.Since(h.at) > leaderHintTTL) && !c.asking[topicID] {
		if c.asking == nil {
			c.asking = map[[16]byte]bool{}
		}
		c.asking[topicID] = true
		go c.askLeaders(topicID)
	}
	return h.leader, h.epoch, ok
}

// leaderHintTTL is how long a leader another node reported is answered
// before it is asked again. A stale one costs the client one
// NOT_LEADER_OR_FOLLOWER and a refresh.
const leaderHintTTL = time.Second

// askLeaders asks the replicas of a topic's replicated partitions (a
// Metadata request to each unfenced one's first listener) who leads each
// partition, and keeps, per partition, the answer of a replica of it with
// the highest epoch.
func (c *clusterNode) askLeaders(topicID [16]byte) {
	defer func() {
		c.hintsMu.Lock()
		delete(c.asking, topicID)
		c.hintsMu.Unlock()
	}()
	m := c.ctrl.Machine()
	mt, ok := m.TopicByID(topicID)
	if !ok {
		return
	}
	replicas := m.Replicas(topicID)
	asked := map[int32]bool{}
	best := map[int32]leaderHint{}
	for _, rs := range replicas {
		for _, r := range rs {
			if r == c.node || asked[r] || len(rs) < 2 {
				continue
			}
			asked[r] = true
			b, ok := m.Broker(r)
			if !ok || b.Fenced {
				continue
			}
			addr := brokerListenerAddr(b, c.b.cfg.Listeners[0].Name)
			if addr == "" {
				continue
			}
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 9
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &mt.Name
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := nodeRoundTrip(ctx, addr, "sushka-node-"+strconv.Itoa(int(c.node)), req)
			cancel()
			if err != nil {
				continue
			}
			for _, st := range resp.(*kmsg.MetadataResponse).Topics {
				for _, sp := range st.Partitions {
					p := sp.Partition
					if p < 0 || int(p) >= len(replicas) || !slices.Contains(replicas[p], r) || sp.Leader < 0 {
						continue // only a replica of p knows its leader
					}
					if old, ok := best[p]; !ok || old.epoch < sp.LeaderEpoch {
						best[p] = leaderHint{leader: sp.Leader, epoch: sp.LeaderEpoch}
					}
				}
			}
		}
	}
	now := time.Now()
	c.hintsMu.Lock()
	defer c.hintsMu.Unlock()
	if c.hints == nil {
		c.hints = map[partitionKey]leaderHint{}
	}
	for p, h := range best {
		h.at = now
		c.hints[partitionKey{topicID, p}] = h
	}
}

// brokerListenerAddr is b's host:port on the listener named name ("": it
// registered none).
func brokerListenerAddr(b meta.Broker, name string) string {
	for _, ep := range b.Listeners {
		if ep.Name == name {
			return net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
		}
	}
	return ""
}

func (c *clusterNode) ClusterID() string { return c.clusterID }

func (c *clusterNode) Brokers() []meta.Broker { return c.ctrl.Machine().Brokers() }

func (c *clusterNode) Controller() (int32, bool) { return c.ctrl.Leader() }

func (c *clusterNode) Replicas(topicID [16]byte) [][]int32 { return c.ctrl.Machine().Replicas(topicID) }

// CreateTopic creates through the active controller: this node's
// controller when it is active, else a CreateTopics forwarded to the
// controller's listener; NOT_CONTROLLER (a controller that just lost its
// term) is retried on the leader this node learns next, until ctx ends.
// It returns once this node's replica of the quorum has the topic.
func (c *clusterNode) CreateTopic(ctx context.Context, name string, partitions int32, rf int16,
	configs map[string]string, validateOnly bool) (meta.Topic, error) {
	if name == MetadataTopic {
		// Its partition 0 would be the quorum's own directory.
		return meta.Topic{}, fmt.Errorf("%w: %s is the metadata quorum's", meta.ErrInvalidTopic, name)
	}
	if validateOnly {
		return c.checkCreate(name, partitions, rf, configs)
	}
	for {
		var err error
		retry := false
		if c.ctrl.Active() {
			_, _, err = c.ctrl.CreateTopic(ctx, name, partitions, rf, configs)
		} else {
			err = c.forwardCreate(ctx, name, partitions, rf, configs)
			// Not an answer (a controller that died, a connection
			// refused): the next leader is asked.
			var answer *kerr.Error
			retry = err != nil && !errors.As(err, &answer)
		}
		if err == nil {
			return c.awaitTopic(ctx, name)
		}
		if !retry && !errors.Is(err, meta.ErrNotController) && !errors.Is(err, kerr.NotController) && !errors.Is(err, errNoController) {
			return meta.Topic{}, err
		}
		select {
		case <-ctx.Done():
			return meta.Topic{}, fmt.Errorf("%w: no active controller answered in time (%v)", meta.ErrNotController, err)
		case <-time.After(controllerRetryBackoff):
		}
	}
}

// controllerRetryBackoff is the pause before a request to the controller
// is retried (no controller known, NOT_CONTROLLER, a failed connection).
const controllerRetryBackoff = 100 * time.Millisecond

// checkCreate is a ValidateOnly creation: the controller's checks on this
// node's replica of the quorum, nothing proposed.
func (c *clusterNode) checkCreate(name string, partitions int32, rf int16, configs map[string]string) (meta.Topic, error) {
	if err := meta.ValidateTopicName(name); err != nil {
		return meta.Topic{}, err
	}
	if partitions < 1 {
		return meta.Topic{}, fmt.Errorf("%w: %d, must be at least 1", meta.ErrBadPartitions, partitions)
	}
	if err := meta.ValidateConfigs(configs); err != nil {
		return meta.Topic{}, err
	}
	if _, ok := c.ctrl.Machine().Topic(name); ok {
		return meta.Topic{}, fmt.Errorf("%w: %s", meta.ErrTopicExists, name)
	}
	live := 0
	for _, b := range c.Brokers() {
		if !b.Fenced {
			live++
		}
	}
	if int(rf) > live {
		return meta.Topic{}, fmt.Errorf("%w: replication factor: %d larger than available brokers: %d", meta.ErrInvalidReplicationFactor, rf, live)
	}
	return meta.Topic{Name: name, Partitions: partitions, Configs: configs}, nil
}

// forwardCreate sends one topic's CreateTopics to the active controller
// and returns its answer as an error (nil: created).
func (c *clusterNode) forwardCreate(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	req.TimeoutMillis = 30000
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = int32(max(time.Until(d).Milliseconds(), 1))
	}
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, &v
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := c.toController(ctx, req)
	if err != nil {
		return err
	}
	topics := resp.(*kmsg.CreateTopicsResponse).Topics
	if len(topics) != 1 {
		return fmt.Errorf("%w: the controller answered %d topics for 1", kerr.UnknownServerError, len(topics))
	}
	return relayed(topics[0].ErrorCode, topics[0].ErrorMessage)
}

// relayed is another node's answer as an error that keeps its code
// (api's errorCode passes a *kerr.Error through).
func relayed(code int16, msg *string) error {
	err := kerr.ErrorForCode(code)
	if err == nil || msg == nil || *msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, *msg)
}

// awaitTopic waits until this node's replica of the quorum has the topic
// (the controller answered once it applied it; this node may be behind).
func (c *clusterNode) awaitTopic(ctx context.Context, name string) (meta.Topic, error) {
	for {
		if t, ok := c.ctrl.Machine().Topic(name); ok {
			// and the handler has it (HostPartition ran): cluster_meta.go
			return t, c.awaitApplied(ctx, nil)
		}
		select {
		case <-ctx.Done():
			return meta.Topic{}, fmt.Errorf("%w: topic %s created, not yet applied on this node", kerr.RequestTimedOut, name)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RegisterBroker serves BrokerRegistration (62) on the active controller.
func (c *clusterNode) RegisterBroker(ctx context.Context, req *kmsg.BrokerRegistrationRequest) (int64, error) {
	if req.ClusterID != c.clusterID {
		return -1, fmt.Errorf("%w: broker %d has cluster id %q, this cluster is %q (give every node the same --controller-voters)",
			kerr.InconsistentClusterID, req.BrokerID, req.ClusterID, c.clusterID)
	}
	reg := controller.Registration{ID: req.BrokerID, Incarnation: hex.EncodeToString(req.IncarnationID[:])}
	if req.Rack != nil {
		reg.Rack = *req.Rack
	}
	for _, l := range req.Listeners {
		reg.Listeners = append(reg.Listeners, meta.BrokerEndpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port),
			SecurityProtocol: server.SecurityProtocol(l.SecurityProtocol).String()})
	}
	if err := c.ctrl.RegisterBroker(ctx, reg); err != nil {
		return -1, err
	}
	epoch, inc, ok := c.ctrl.BrokerEpoch(req.BrokerID)
	if !ok || inc != reg.Incarnation {
		return -1, fmt.Errorf("%w: broker %d registered again meanwhile", meta.ErrStaleBrokerEpoch, req.BrokerID)
	}
	return int64(epoch), nil
}

// BrokerHeartbeat serves BrokerHeartbeat (63) on the active controller.
func (c *clusterNode) BrokerHeartbeat(ctx context.Context, req *kmsg.BrokerHeartbeatRequest) (bool, error) {
	if !c.ctrl.Active() {
		return true, meta.ErrNotController
	}
	epoch, inc, ok := c.ctrl.BrokerEpoch(req.BrokerID)
	switch {
	case !ok:
		return true, fmt.Errorf("%w: broker %d", meta.ErrBrokerNotRegistered, req.BrokerID)
	case int64(epoch) != req.BrokerEpoch:
		return true, fmt.Errorf("%w: broker %d epoch %d, registered at %d", meta.ErrStaleBrokerEpoch, req.BrokerID, req.BrokerEpoch, epoch)
	}
	return c.ctrl.Heartbeat(ctx, req.BrokerID, inc, uint64(max(req.CurrentMetadataOffset, 0)))
}

// --- the broker's lifecycle (KRaft's BrokerLifecycleManager) ---

// lifecycle registers the broker with the active controller once its
// listeners are served, then heartbeats: every HeartbeatInterval once
// unfenced, every controllerRetryBackoff while fenced (catching up) or
// when the controller could not be reached. A heartbeat answered
// STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED registers again.
func (c *clusterNode) lifecycle(ctx context.Context) {
	var listeners []kmsg.BrokerRegistrationRequestListener
	for {
		listeners = listeners[:0]
		for i, ln := range c.b.Listeners() {
			host, port, err := net.SplitHostPort(ln.Advertised)
			pn, _ := strconv.Atoi(port)
			if err != nil {
				break
			}
			l := kmsg.NewBrokerRegistrationRequestListener()
			l.Name, l.Host, l.Port, l.SecurityProtocol = ln.Name, host, uint16(pn), int16(c.b.cfg.Listeners[i].Protocol)
			listeners = append(listeners, l)
		}
		if len(listeners) == len(c.b.cfg.Listeners) {
			break
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
	}
	log := c.b.log.With("component", "lifecycle", "node", c.node)
	for {
		c.mu.Lock()
		epoch, fenced := c.epoch, c.fenced
		c.mu.Unlock()
		wait := controllerRetryBackoff
		if epoch < 0 {
			req := kmsg.NewPtrBrokerRegistrationRequest()
			req.Version = 0
			req.BrokerID, req.ClusterID, req.IncarnationID, req.Listeners = c.node, c.clusterID, c.incarnation, listeners
			if c.cfg.Rack != "" {
				req.Rack = &c.cfg.Rack
			}
			resp, err := c.toController(ctx, req)
			if err == nil {
				r := resp.(*kmsg.BrokerRegistrationResponse)
				if err = kerr.ErrorForCode(r.ErrorCode); err == nil {
					c.mu.Lock()
					c.epoch = r.BrokerEpoch
					c.mu.Unlock()
					log.Info("registered with the controller", "epoch", r.BrokerEpoch)
					wait = 0
				}
			}
			if err != nil {
				log.Debug("registration not accepted yet", "err", err)
			}
		} else {
			req := kmsg.NewPtrBrokerHeartbeatRequest()
			req.Version = 0
			req.BrokerID, req.BrokerEpoch, req.CurrentMetadataOffset = c.node, epoch, int64(c.ctrl.Applied())
			resp, err := c.toController(ctx, req)
			if err == nil {
				r := resp.(*kmsg.BrokerHeartbeatResponse)
				err = kerr.ErrorForCode(r.ErrorCode)
				switch {
				case err == nil:
					if r.IsFenced != fenced {
						log.Info("fencing changed", "fenced", r.IsFenced)
					}
					c.mu.Lock()
					c.fenced = r.IsFenced
					c.mu.Unlock()
					if !r.IsFenced {
						wait = c.cfg.HeartbeatInterval
					}
				case errors.Is(err, kerr.StaleBrokerEpoch), errors.Is(err, kerr.BrokerIDNotRegistered):
					log.Warn("registering again", "err", err)
					c.mu.Lock()
					c.epoch, c.fenced = -1, true
					c.mu.Unlock()
				}
			}
			if err != nil {
				log.Debug("heartbeat not accepted", "err", err)
			}
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// errNoController: no controller is known yet, or not where to reach it.
var errNoController = errors.New("no active controller known yet")

// toController sends req to the controller this node takes for the raft
// leader of the metadata group, on that node's first listener (the
// nodes' PLAINTEXT listener) as it registered it, or this node's own
// when it leads: the controller's Kafka address comes from its
// registration, so every node registers with the first leader, itself
// included, before the others can reach it.
func (c *clusterNode) toController(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	leader, ok := c.ctrl.Leader()
	if !ok {
		return nil, errNoController
	}
	name := c.b.cfg.Listeners[0].Name
	var addr string
	if leader == c.node {
		addr = c.b.AdvertisedAddr()
	} else if b, ok := c.ctrl.Machine().Broker(leader); ok {
		addr = brokerListenerAddr(b, name)
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: node %d leads, its listener %s is not registered yet", errNoController, leader, name)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeRequestTimeout)
	defer cancel()
	return nodeRoundTrip(ctx, addr, "sushka-node-"+strconv.Itoa(int(c.node)), req)
}

// nodeRequestTimeout bounds one request of a node to the controller
// (a creation waits for the quorum to apply it).
const nodeRequestTimeout = 30 * time.Second

// maxNodeResponseBytes bounds the answer a node reads from another.
const maxNodeResponseBytes = 16 << 20

// nodeRoundTrip sends one request on a new connection to addr and reads its
// answer: the nodes' requests are few (a heartbeat every 2 s, creations),
// so no connection is kept.
func nodeRoundTrip(ctx context.Context, addr, clientID string, req kmsg.Request) (kmsg.Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	const correlationID = 1
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)).AppendRequest(nil, req, correlationID)
	if _, err := conn.Write(frame); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > maxNodeResponseBytes {
		return nil, fmt.Errorf("answer of %d bytes from %s", n, addr)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != correlationID {
		return nil, fmt.Errorf("answer with correlation id %d from %s", got, addr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() {
		// The response header's tagged fields (none are defined).
		if len(body) == 0 || body[0] != 0 {
			return nil, fmt.Errorf("answer from %s with response header tags", addr)
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding the answer from %s: %w", addr, err)
	}
	return resp, nil
}
