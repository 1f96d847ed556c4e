// Package controller is the cluster's metadata quorum (issue 14 step 4,
// docs/replication.md sections 4 and 4a), in KRaft's shape: internal/meta's
// records, replicated by one raft group (__cluster_metadata, MetadataGroup)
// on internal/raftnode, applied in commit order by every node to its own
// meta.Machine.
//
// The group's voters are the controller nodes (KRaft's
// controller.quorum.voters); every other node is a raft learner of it: it
// receives and applies every record, never votes or leads. The raft leader
// is the active controller once it has applied everything committed before
// its term (its term's first entry): only then does it decide anything, so
// it decides on the whole history. What it decides it proposes as one raft
// entry (one batch of records, applied all or nothing) and answers once the
// entry is applied: topics created with their replicas placed
// (placeReplicas), brokers registered, fenced when their session times out
// (broker.session.timeout.ms, 9 s) and unfenced by their next heartbeat.
//
// Why a package of its own and not more of internal/meta: meta is the data
// (records, the pure apply, snapshots) and the single-node broker's durable
// catalogue, which must not change; this package is behaviour over time
// (who is the active controller, sessions, placement) and the only one of
// the two that knows raft. meta gives it meta.Machine, the apply without
// storage.
//
// # Durability
//
// The raft log is whatever raftnode.Storage the owner gives (MemStorage in
// the tests: nothing is durable, a node restarted in the same process keeps
// its storage). The state machine is in memory and rebuilt by replaying the
// log from its start (GroupConfig.Applied 0): a restarted node's listeners
// see every record again, in the same order. Durable raft storage is step 2
// of docs/replication.md section 7.
//
// # Ownership and locks
//
// Apply (the records, the listeners) runs on the metadata group's raft
// worker, one entry after another. Controller.mu guards the active term, the
// sessions and the waiters; it is a leaf, never held while proposing,
// waiting or calling a listener. meta.Machine has its own lock, taken
// under mu only for reads.
package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/raftnode"
)

// MetadataGroup is the raft group id of __cluster_metadata on every node.
// Partition groups take other ids.
const MetadataGroup uint64 = 0

// DefaultSessionTimeout is Kafka's broker.session.timeout.ms: a broker not
// heard from for this long is fenced.
const DefaultSessionTimeout = 9 * time.Second

// RaftID is a node's raft id: Kafka's broker ids start at 0, raft's at 1.
func RaftID(node int32) uint64 { return uint64(node) + 1 }

// NodeOf is RaftID's inverse.
func NodeOf(raftID uint64) int32 { return int32(raftID) - 1 }

// Change is one applied record and the raft entry it came in.
type Change struct {
	Index, Term uint64
	Record      meta.Record
}

// Listener learns every applied record, in order, on the group's worker
// (a broker creates and removes its local replicas from them). It must
// not block long: the metadata group waits for it.
type Listener func(Change)

// Config is a node's controller. Zero fields take the defaults.
type Config struct {
	// Node is this node's id (a Kafka broker id, ≥ 0).
	Node int32
	// Voters are the controller nodes (controller.quorum.voters); Learners
	// every other node of the cluster. The same on every node; used when
	// Storage is empty.
	Voters, Learners []int32
	// Raft is this node's raftnode.Node (its ID is RaftID(Node)); New adds
	// the metadata group to it.
	Raft *raftnode.Node
	// Storage is the metadata group's raft log.
	Storage raftnode.Storage
	// Clock times the brokers' sessions (clock.Real).
	Clock clock.Clock
	// SessionTimeout is broker.session.timeout.ms (9 s).
	SessionTimeout time.Duration
	// Listeners learn every applied record, in order.
	Listeners []Listener
	// Seed seeds replica placement's random start (0: random).
	Seed   uint64
	Logger *slog.Logger
}

// Controller is one node's replica of the metadata quorum.
type Controller struct {
	cfg     Config
	raft    *raftnode.Node
	machine *meta.Machine

	// listened is the index of the last entry whose records every
	// listener has been given (after the machine's Applied).
	listened atomic.Uint64

	// decideMu makes the decisions of changes.go (and CreateTopic) one at
	// a time, each planned on a state with the ones before applied.
	decideMu sync.Mutex

	mu sync.Mutex
	// leaderTerm is the term of the last leader's first entry (raft's empty
	// entry) applied here: a node leading in that term has applied every
	// entry of the terms before, and is the active controller.
	leaderTerm uint64
	// activeTerm is the term this node last became active in.
	activeTerm uint64
	// sessions are the brokers' last heartbeats, kept by the active
	// controller only (KRaft's BrokerHeartbeatManager: never replicated).
	sessions map[int32]time.Time
	// registeredAt is the index of each broker's registration.
	registeredAt map[int32]uint64
	// fencing are the fences proposed and not yet applied.
	fencing map[int32]bool
	// waiters wait for their entry (by its bytes) to be applied.
	waiters map[string][]chan error
	rng     *mrand.Rand
}

// New makes the node's controller and adds the metadata group to its raft
// node.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Raft == nil || cfg.Storage == nil:
		return nil, errors.New("controller: no raft node or storage")
	case cfg.Raft.ID() != RaftID(cfg.Node):
		return nil, fmt.Errorf("controller: raft node %d is not node %d's", cfg.Raft.ID(), cfg.Node)
	case len(cfg.Voters) == 0:
		return nil, errors.New("controller: no voters (controller.quorum.voters)")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	c := &Controller{cfg: cfg, raft: cfg.Raft, machine: meta.NewMachine(),
		sessions: map[int32]time.Time{}, registeredAt: map[int32]uint64{}, fencing: map[int32]bool{},
		waiters: map[string][]chan error{}, rng: mrand.New(mrand.NewPCG(seed, seed>>1|1))}
	raftIDs := func(ids []int32) []uint64 {
		out := make([]uint64, len(ids))
		for i, id := range ids {
			out[i] = RaftID(id)
		}
		return out
	}
	err := cfg.Raft.AddGroup(raftnode.GroupConfig{ID: MetadataGroup, Voters: raftIDs(cfg.Voters),
		Learners: raftIDs(cfg.Learners), Storage: cfg.Storage, Apply: c.apply})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Machine is the node's applied metadata (read-only use).
func (c *Controller) Machine() *meta.Machine { return c.machine }

// Applied is the index of the last entry this node applied (its machine's:
// a change seen in the machine is never ahead of it).
func (c *Controller) Applied() uint64 { return c.machine.Applied() }

// Leader is the node this replica takes for the controller's raft leader
// (ok false: none known).
func (c *Controller) Leader() (node int32, ok bool) {
	l, _ := c.raft.Leader(MetadataGroup)
	return NodeOf(l), l != 0
}

// Active reports whether this node is the active controller.
func (c *Controller) Active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.activeLocked()
}

func (c *Controller) activeLocked() bool {
	leader, term := c.raft.Leader(MetadataGroup)
	if leader != c.raft.ID() || term != c.leaderTerm || term == 0 {
		return false
	}
	if c.activeTerm != term {
		c.becomeActiveLocked(term)
	}
	return true
}

// apply is the metadata group's Apply: every committed entry in order.
func (c *Controller) apply(entries []*pb.Entry) {
	for _, e := range entries {
		c.applyEntry(e)
		c.listened.Store(max(c.listened.Load(), e.GetIndex()))
	}
}

// Listened is the index of the last entry whose records the listeners
// have been given: a change seen in the machine is also the broker's
// (its topics, logs, authorizer) once Listened reaches the machine's
// Applied of that moment.
func (c *Controller) Listened() uint64 { return c.listened.Load() }

func (c *Controller) applyEntry(e *pb.Entry) {
	if e.GetType() != pb.EntryType_EntryNormal {
		c.machine.Skip(e.GetIndex())
		return // configuration changes: raftnode applied them
	}
	if len(e.Data) == 0 {
		// A leader's first entry: everything before it is applied.
		c.machine.Skip(e.GetIndex())
		c.mu.Lock()
		c.leaderTerm = e.GetTerm()
		c.mu.Unlock()
		return
	}
	rs, err := meta.DecodeEntry(e.Data)
	if err == nil {
		err = c.machine.Apply(e.GetIndex(), rs)
	} else {
		c.machine.Skip(e.GetIndex())
	}
	if err != nil {
		// Refused alike by every replica (the same records on the same
		// state): nothing changed anywhere; the proposer hears why.
		c.cfg.Logger.Debug("metadata entry refused", "node", c.cfg.Node, "index", e.GetIndex(), "err", err)
	}
	c.mu.Lock()
	if err == nil {
		for _, r := range rs {
			c.appliedLocked(e.GetIndex(), r)
		}
	}
	c.wakeLocked(entryKey(e.Data), err)
	c.mu.Unlock()
	if err == nil {
		for _, r := range rs {
			for _, l := range c.cfg.Listeners {
				l(Change{Index: e.GetIndex(), Term: e.GetTerm(), Record: r})
			}
		}
	}
}

// becomeActiveLocked starts a term as the active controller: every
// registered broker gets a fresh session (KRaft does the same at a
// failover: the new controller never heard their heartbeats).
func (c *Controller) becomeActiveLocked(term uint64) {
	c.activeTerm = term
	c.failWaitersLocked() // of an earlier term: answered NOT_CONTROLLER (they may still commit)
	now := c.cfg.Clock.Now()
	clear(c.sessions)
	clear(c.fencing)
	for _, b := range c.machine.Brokers() {
		c.sessions[b.ID] = now
	}
	c.cfg.Logger.Info("active controller", "node", c.cfg.Node, "term", term)
}

// appliedLocked keeps the controller's own bookkeeping of a record.
func (c *Controller) appliedLocked(index uint64, r meta.Record) {
	switch r := r.(type) {
	case *meta.RegisterBrokerRecord:
		c.registeredAt[r.ID] = index
		if c.activeLocked() {
			c.sessions[r.ID] = c.cfg.Clock.Now()
		}
	case *meta.FenceBrokerRecord:
		delete(c.fencing, r.ID)
	}
}

func (c *Controller) wakeLocked(key string, err error) {
	ws := c.waiters[key]
	if len(ws) == 0 {
		return
	}
	ws[0] <- err
	if len(ws) == 1 {
		delete(c.waiters, key)
	} else {
		c.waiters[key] = ws[1:]
	}
}

// propose commits records as one entry through this node, which must be
// the active controller, and returns once the entry is applied here: nil,
// or why every replica refused it. ErrNotController: this node does not
// lead (or stopped leading before the entry applied: it may still commit,
// under the next controller).
func (c *Controller) propose(ctx context.Context, rs ...meta.Record) error {
	data := meta.EncodeEntry(c.cfg.Clock.Now().UnixMilli(), rs...)
	key := entryKey(data)
	w := make(chan error, 1)
	c.mu.Lock()
	if !c.activeLocked() {
		c.mu.Unlock()
		return c.notController()
	}
	c.waiters[key] = append(c.waiters[key], w)
	c.mu.Unlock()
	c.raft.Propose(MetadataGroup, data, func(err error) {
		if err == nil {
			return
		}
		if errors.Is(err, raftnode.ErrProposalDropped) {
			err = c.notController()
		}
		c.mu.Lock()
		if c.dropWaiterLocked(key, w) { // else already answered
			w <- err
		}
		c.mu.Unlock()
	})
	select {
	case err := <-w:
		return err
	case <-ctx.Done():
		c.mu.Lock()
		c.dropWaiterLocked(key, w)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// entryKey is what a waiter waits for: the entry's batch from its magic
// byte on (attributes, timestamps, records: what its CRC covers). Not the
// whole batch: the durable storage (plog.RaftStorage) stamps the base
// offset and the partition leader epoch (the term) into the header of the
// entry's own bytes when it saves it, so the bytes applied are not the
// bytes proposed.
func entryKey(data []byte) string {
	const magicOffset = 16 // baseOffset 8, batchLength 4, partitionLeaderEpoch 4
	if len(data) <= magicOffset {
		return string(data)
	}
	return string(data[magicOffset:])
}

// dropWaiterLocked removes w, reporting whether it was still waiting.
func (c *Controller) dropWaiterLocked(key string, w chan error) bool {
	ws := c.waiters[key]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	ws = slices.Delete(ws, i, i+1)
	if len(ws) == 0 {
		delete(c.waiters, key)
	} else {
		c.waiters[key] = ws
	}
	return true
}

// failWaitersLocked answers every waiter NOT_CONTROLLER: this node stopped
// leading, and whether their entries commit is the next controller's.
func (c *Controller) failWaitersLocked() {
	for key, ws := range c.waiters {
		for _, w := range ws {
			w <- meta.ErrNotController
		}
		delete(c.waiters, key)
	}
}

// notController is ErrNotController naming the leader this node knows.
func (c *Controller) notController() error {
	if l, ok := c.Leader(); ok && l != c.cfg.Node {
		return fmt.Errorf("%w (the controller is node %d)", meta.ErrNotController, l)
	}
	return meta.ErrNotController
}

// Tick is the controller's periodic work: a node that no longer leads
// fails its waiters (NOT_CONTROLLER: their entries may still commit), and
// the active controller fences the brokers whose session timed out. The
// owner calls it with every raft tick, or has Run call it.
func (c *Controller) Tick(ctx context.Context) {
	c.mu.Lock()
	if !c.activeLocked() {
		if c.activeTerm != 0 {
			c.cfg.Logger.Info("no longer the active controller", "node", c.cfg.Node, "term", c.activeTerm)
			c.activeTerm = 0
			clear(c.sessions)
			clear(c.fencing)
			c.failWaitersLocked()
		}
		c.mu.Unlock()
		return
	}
	now := c.cfg.Clock.Now()
	var fence []meta.Record
	for _, b := range c.machine.Brokers() {
		if last, ok := c.sessions[b.ID]; ok && !b.Fenced && !c.fencing[b.ID] && now.Sub(last) >= c.cfg.SessionTimeout {
			c.fencing[b.ID] = true
			fence = append(fence, &meta.FenceBrokerRecord{ID: b.ID, Incarnation: b.Incarnation})
		}
	}
	c.mu.Unlock()
	for _, r := range fence {
		c.cfg.Logger.Warn("fencing a broker: its session timed out", "node", c.cfg.Node,
			"broker", r.(*meta.FenceBrokerRecord).ID, "session_timeout", c.cfg.SessionTimeout)
		go func() { // answered by apply; a failed proposal is retried next tick
			if err := c.propose(ctx, r); err != nil {
				c.mu.Lock()
				delete(c.fencing, r.(*meta.FenceBrokerRecord).ID)
				c.mu.Unlock()
			}
		}()
	}
}

// Run calls Tick every interval until ctx ends: the controller of a node
// whose raft ticks on its own ticker (raftnode's TickInterval is the
// natural interval).
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Tick(ctx)
		}
	}
}

// NewIncarnation returns a new incarnation id for a starting broker: 16
// random bytes in hex (KRaft's incarnation UUID).
func NewIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Registration is what a starting broker tells the controller (KRaft's
// BrokerRegistrationRequest).
type Registration struct {
	ID          int32
	Incarnation string
	Listeners   []meta.BrokerEndpoint
	Rack        string
}

// RegisterBroker registers a broker's incarnation (fenced until its next
// heartbeat). The same incarnation registered again is accepted as it is
// (a retry); a new one replaces the old, whose heartbeats are then stale.
func (c *Controller) RegisterBroker(ctx context.Context, reg Registration) error {
	if reg.ID < 0 || reg.Incarnation == "" {
		return fmt.Errorf("%w: broker id %d, incarnation %q", meta.ErrBrokerNotRegistered, reg.ID, reg.Incarnation)
	}
	if b, ok := c.machine.Broker(reg.ID); ok && b.Incarnation == reg.Incarnation && c.Active() {
		return nil
	}
	return c.propose(ctx, &meta.RegisterBrokerRecord{ID: reg.ID, Incarnation: reg.Incarnation,
		Listeners: reg.Listeners, Rack: reg.Rack})
}

// BrokerEpoch is a registered broker's epoch, KRaft's broker epoch: the
// index of its current registration in the metadata log (known on every
// node that applied it), and its incarnation.
func (c *Controller) BrokerEpoch(id int32) (epoch uint64, incarnation string, ok bool) {
	b, ok := c.machine.Broker(id)
	if !ok {
		return 0, "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	epoch, ok = c.registeredAt[id]
	return epoch, b.Incarnation, ok
}

// Heartbeat is a broker's heartbeat (KRaft's BrokerHeartbeatRequest):
// it renews the broker's session and, for a fenced broker that has
// applied the metadata up to its own registration, unfences it (once that
// is applied). It answers whether the broker is fenced.
func (c *Controller) Heartbeat(ctx context.Context, id int32, incarnation string, appliedIndex uint64) (fenced bool, err error) {
	c.mu.Lock()
	if !c.activeLocked() {
		c.mu.Unlock()
		return true, c.notController()
	}
	b, ok := c.machine.Broker(id)
	switch {
	case !ok:
		c.mu.Unlock()
		return true, fmt.Errorf("%w: broker %d", meta.ErrBrokerNotRegistered, id)
	case b.Incarnation != incarnation:
		c.mu.Unlock()
		return true, fmt.Errorf("%w: broker %d incarnation %s, registered %s", meta.ErrStaleBrokerEpoch, id, incarnation, b.Incarnation)
	}
	c.sessions[id] = c.cfg.Clock.Now()
	// Caught up once it applied its own registration (known here once this
	// node's bookkeeping of it, just after the machine's, is done).
	at, known := c.registeredAt[id]
	caughtUp := known && appliedIndex >= at
	c.mu.Unlock()
	if !b.Fenced || !caughtUp {
		return b.Fenced, nil
	}
	if err := c.propose(ctx, &meta.UnfenceBrokerRecord{ID: id, Incarnation: incarnation}); err != nil {
		return true, err
	}
	return false, nil
}

// CreateTopic creates a topic with replicationFactor replicas of each
// partition, placed on the unfenced brokers (placeReplicas), committed as
// one entry: the TopicRecord and one PartitionAssignmentRecord per
// partition, applied together or not at all. It answers the topic and its
// replicas once applied here.
func (c *Controller) CreateTopic(ctx context.Context, name string, partitions int32, replicationFactor int16,
	configs map[string]string) (meta.Topic, [][]int32, error) {
	switch err := meta.ValidateTopicName(name); {
	case err != nil:
		return meta.Topic{}, nil, err
	case meta.IsInternalTopic(name):
		return meta.Topic{}, nil, fmt.Errorf("%w: %s is internal", meta.ErrTopicExists, name)
	case partitions < 1:
		return meta.Topic{}, nil, fmt.Errorf("%w: %d, must be at least 1", meta.ErrBadPartitions, partitions)
	case replicationFactor < 1:
		return meta.Topic{}, nil, fmt.Errorf("%w: %d, must be at least 1", meta.ErrInvalidReplicationFactor, replicationFactor)
	}
	if err := meta.ValidateConfigs(configs); err != nil {
		return meta.Topic{}, nil, err
	}
	c.decideMu.Lock()
	defer c.decideMu.Unlock()
	if !c.Active() {
		return meta.Topic{}, nil, c.notController()
	}
	if _, ok := c.machine.Topic(name); ok {
		return meta.Topic{}, nil, fmt.Errorf("%w: %s", meta.ErrTopicExists, name)
	}
	c.mu.Lock()
	replicas, err := placeReplicas(c.liveBrokers(), partitions, int(replicationFactor), c.rng)
	c.mu.Unlock()
	if err != nil {
		return meta.Topic{}, nil, err
	}
	id, err := c.machine.NewTopicID()
	if err != nil {
		return meta.Topic{}, nil, err
	}
	rs := make([]meta.Record, 0, 1+len(replicas))
	rs = append(rs, &meta.TopicRecord{Name: name, ID: id, Partitions: partitions, Configs: configs})
	for p, r := range replicas {
		rs = append(rs, &meta.PartitionAssignmentRecord{TopicID: id, Partition: int32(p), Replicas: r})
	}
	if err := c.propose(ctx, rs...); err != nil {
		return meta.Topic{}, nil, err
	}
	t, _ := c.machine.Topic(name)
	return t, c.machine.Replicas(id), nil
}
