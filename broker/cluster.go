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
	mt, ok := c.ctrl.Machine().TopicByID(a.TopicID)
	if !ok {
		return
	}
	if err := c.b.handler.HostPartition(mt, a.Partition, slices.Contains(a.Replicas, c.node)); err != nil {
		c.b.log.Error("applying a partition assignment", "topic", mt.Name, "partition", a.Partition, "err", err)
	}
}

// --- api.Cluster ---

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
		for _, ep := range b.Listeners {
			if ep.Name == name {
				addr = net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
			}
		}
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
