package group

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/coordloop"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/kvlog"
	"github.com/sushka-io/sushka/internal/meta"
)

// OffsetsTopic is the internal topic holding committed offsets and group
// metadata, Kafka's name.
const OffsetsTopic = meta.OffsetsTopic

// Kafka's broker defaults for groups.
const (
	DefaultMinSessionTimeout      = 6 * time.Second    // group.min.session.timeout.ms
	DefaultMaxSessionTimeout      = 30 * time.Minute   // group.max.session.timeout.ms
	DefaultOffsetMetadataMaxSize  = 4096               // offset.metadata.max.bytes
	DefaultConsumerSessionTimeout = 45 * time.Second   // group.consumer.session.timeout.ms
	DefaultConsumerHeartbeat      = 5 * time.Second    // group.consumer.heartbeat.interval.ms
	DefaultOffsetsRetention       = 7 * 24 * time.Hour // offsets.retention.minutes (10080)
)

// Topics tells the coordinator which topics exist (Kafka's API layer
// refuses commits for unknown partitions; KIP-848 assignors need the
// partition counts). It must be cheap and must not block: the catalogue is
// in memory.
type Topics interface {
	// Partitions returns the topic's ID and partition count.
	Partitions(topic string) (id [16]byte, partitions int32, ok bool)
	// TopicByID returns the name and partition count of a topic ID.
	TopicByID(id [16]byte) (name string, partitions int32, ok bool)
}

// Config configures a Coordinator. Zero values take Kafka's defaults.
type Config struct {
	NodeID int32
	Host   string
	Port   int32

	// OffsetsPartitions is the partition count of __consumer_offsets
	// (default 1). Owns reports whether this node coordinates a partition;
	// nil: all of them.
	OffsetsPartitions int32
	Owns              func(partition int32) bool

	MinSessionTimeout     time.Duration
	MaxSessionTimeout     time.Duration
	OffsetMetadataMaxSize int
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms: how long
	// the first rebalance of an empty group waits for more members. Kafka
	// defaults to 3s; Sushka to 0 (tests and single consumers start at
	// once).
	InitialRebalanceDelay time.Duration

	// ConsumerSessionTimeout and ConsumerHeartbeatInterval are the
	// KIP-848 group settings.
	ConsumerSessionTimeout    time.Duration
	ConsumerHeartbeatInterval time.Duration

	// OffsetsRetention is offsets.retention.minutes: the committed offsets
	// of a group with no members expire this long after their commit
	// (KIP-211), and the group with them. Negative: never.
	OffsetsRetention time.Duration

	// Topics is the topic catalogue; nil means every partition exists and
	// no KIP-848 assignment is possible.
	Topics Topics

	// NewID returns a fresh unique string for member IDs (default: a random
	// UUID). Tests inject a counter for golden traces.
	NewID func() string
}

func (c *Config) setDefaults() {
	if c.OffsetsPartitions <= 0 {
		c.OffsetsPartitions = 1
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if c.OffsetMetadataMaxSize == 0 {
		c.OffsetMetadataMaxSize = DefaultOffsetMetadataMaxSize
	}
	if c.ConsumerSessionTimeout == 0 {
		c.ConsumerSessionTimeout = DefaultConsumerSessionTimeout
	}
	if c.ConsumerHeartbeatInterval == 0 {
		c.ConsumerHeartbeatInterval = DefaultConsumerHeartbeat
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = DefaultOffsetsRetention
	}
	if c.NewID == nil {
		c.NewID = randomUUID
	}
}

func randomUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Request is one input: a decoded request and its handle.
type Request struct {
	// ID is the handle the response carries; unique among unanswered
	// requests.
	ID         uint64
	Now        time.Time
	ClientID   string
	ClientHost string
	Body       kmsg.Request
}

// Response answers the request with handle ID.
type Response struct {
	ID   uint64
	Body kmsg.Response
}

// Record is one record for a __consumer_offsets partition. A nil Value is
// a tombstone.
type Record = kvlog.Record

// Ready is what the inputs since the last Ready produced: persist Records
// (all of them, durably), then send Responses.
type Ready struct {
	Records   []Record
	Responses []Response
}

// Empty reports whether there is nothing to do.
func (rd Ready) Empty() bool { return len(rd.Records) == 0 && len(rd.Responses) == 0 }

// Coordinator is the group coordinator state machine. It is not safe for
// concurrent use: one owner (the Service) drives it.
type Coordinator struct {
	cfg    Config
	loaded bool
	now    time.Time
	groups map[string]*group
	out    Ready
	// unloaded are the __consumer_offsets partitions whose groups are not
	// in memory (their log failed; see UnloadPartition).
	unloaded map[int32]bool
	// loading are the unloaded partitions being replayed
	// (LoadingPartition): their groups answer COORDINATOR_LOAD_IN_PROGRESS.
	loading coordloop.PartitionSet
	// markedEpochs is, per producer id, the epoch of the last transaction
	// marker written here (txn.go): a TxnOffsetCommit of an older epoch
	// arrived late (its transaction ended) and is fenced.
	markedEpochs map[int64]markedEpoch
}

// New returns an empty coordinator; Load the log, then call Loaded.
func New(cfg Config) *Coordinator {
	cfg.setDefaults()
	return &Coordinator{cfg: cfg, groups: make(map[string]*group)}
}

// SetAddress changes the address FindCoordinator answers.
func (c *Coordinator) SetAddress(host string, port int32) {
	c.cfg.Host, c.cfg.Port = host, port
}

// Loaded ends loading: from now on requests are served. now is the time
// the replayed members' sessions start from.
func (c *Coordinator) Loaded(now time.Time) {
	c.loaded = true
	c.now = now
	for _, g := range c.sortedGroups() {
		c.startSessions(g)
	}
}

// Ready returns the outputs accumulated since the last call and forgets
// them.
func (c *Coordinator) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	return rd
}

func (c *Coordinator) respond(id uint64, body kmsg.Response) {
	c.out.Responses = append(c.out.Responses, Response{ID: id, Body: body})
}

func (c *Coordinator) persist(r Record) { c.out.Records = append(c.out.Records, r) }

// PartitionFor is the __consumer_offsets partition of a group: Kafka's
// abs(groupId.hashCode()) % partitions (kvlog.PartitionFor).
func PartitionFor(group string, partitions int32) int32 { return kvlog.PartitionFor(group, partitions) }

func (c *Coordinator) partitionFor(group string) int32 {
	return PartitionFor(group, c.cfg.OffsetsPartitions)
}

// checkCoordinator returns the error a request for group gets before the
// group is even looked at: NOT_COORDINATOR for a group another node
// coordinates, COORDINATOR_LOAD_IN_PROGRESS while loading.
func (c *Coordinator) checkCoordinator(group string) int16 {
	if p := c.partitionFor(group); c.cfg.Owns != nil && !c.cfg.Owns(p) || c.unloaded[p] {
		if c.loading[p] {
			return kerr.CoordinatorLoadInProgress.Code
		}
		return kerr.NotCoordinator.Code
	}
	if !c.loaded {
		return kerr.CoordinatorLoadInProgress.Code
	}
	return 0
}

// checkGroup is checkCoordinator for a request that must name its group:
// INVALID_GROUP_ID for an empty name.
func (c *Coordinator) checkGroup(group string) int16 {
	if group == "" {
		return kerr.InvalidGroupID.Code
	}
	return c.checkCoordinator(group)
}

// Handle takes one request. The response, now or later, comes out of
// Ready.
func (c *Coordinator) Handle(r Request) {
	if r.Now.After(c.now) {
		c.now = r.Now
	}
	switch req := r.Body.(type) {
	case *kmsg.FindCoordinatorRequest:
		c.respond(r.ID, c.findCoordinator(req))
	case *kmsg.JoinGroupRequest:
		c.join(r, req)
	case *kmsg.SyncGroupRequest:
		c.sync(r, req)
	case *kmsg.HeartbeatRequest:
		c.respond(r.ID, c.heartbeat(req))
	case *kmsg.LeaveGroupRequest:
		c.respond(r.ID, c.leave(req))
	case *kmsg.OffsetCommitRequest:
		c.respond(r.ID, c.offsetCommit(req))
	case *kmsg.OffsetFetchRequest:
		c.respond(r.ID, c.offsetFetch(req))
	case *kmsg.ListGroupsRequest:
		c.respond(r.ID, c.listGroups(req))
	case *kmsg.DescribeGroupsRequest:
		c.respond(r.ID, c.describeGroups(req))
	case *kmsg.DeleteGroupsRequest:
		c.respond(r.ID, c.deleteGroups(req))
	case *kmsg.OffsetDeleteRequest:
		c.respond(r.ID, c.offsetDelete(req))
	case *kmsg.ConsumerGroupHeartbeatRequest:
		c.respond(r.ID, c.consumerHeartbeat(r, req))
	case *kmsg.ConsumerGroupDescribeRequest:
		c.respond(r.ID, c.consumerDescribe(req))
	case *kmsg.TxnOffsetCommitRequest:
		c.respond(r.ID, c.txnOffsetCommit(req))
	case *kmsg.WriteTxnMarkersRequest:
		c.respond(r.ID, c.writeTxnMarkers(req))
	default:
		// Not a group request: the caller routed it wrong. Never a bare
		// response (error code 0 reads as success): UNKNOWN_SERVER_ERROR in
		// the request's own shape, or, for a type without one, nil, which
		// Service.Do returns as ErrUnsupported (the connection closes).
		c.respond(r.ID, errresp.For(r.Body, kerr.UnknownServerError.Code))
	}
}

// Tick lets time pass to now: expired sessions leave their groups,
// rebalance and sync deadlines fire.
func (c *Coordinator) Tick(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
	if !c.loaded {
		return
	}
	for _, g := range c.sortedGroups() {
		if g.kind == kindConsumer {
			c.tickConsumer(g)
			continue
		}
		c.tickClassic(g)
	}
	c.expireOffsets()
	c.expireMarkedEpochs()
}

// expireOffsets drops the committed offsets that are older than
// OffsetsRetention in groups with no members (KIP-211: a live group's
// offsets never expire), writing tombstones as DeleteGroups does; a group
// left with no offsets by this goes too. Kafka checks every
// offsets.retention.check.interval.ms (10 min); the driver ticks at least
// that often.
func (c *Coordinator) expireOffsets() {
	if c.cfg.OffsetsRetention < 0 {
		return
	}
	cutoff := c.now.Add(-c.cfg.OffsetsRetention).UnixMilli()
	for _, g := range c.sortedGroups() {
		if !g.empty() || g.kind == kindClassic && g.state != stateEmpty || len(g.offsets) == 0 {
			continue
		}
		expired := 0
		for _, tp := range g.sortedOffsets() {
			if g.offsets[tp].commitTimestamp <= cutoff {
				c.dropOffset(g, tp)
				expired++
			}
		}
		if expired > 0 && len(g.offsets) == 0 {
			c.dropGroup(g)
		}
	}
}

// dropOffset forgets a committed offset and persists its tombstone.
func (c *Coordinator) dropOffset(g *group, tp topicPartition) {
	c.persist(c.offsetRecord(g.name, tp, nil))
	delete(g.offsets, tp)
}

// dropGroup forgets a group and persists its tombstone; its offsets must
// have been dropped first (replay deletes them only by their own
// tombstones).
func (c *Coordinator) dropGroup(g *group) {
	c.persist(c.groupRecord(g.name, nil))
	delete(c.groups, g.name)
}

// NextDeadline is the earliest time a Tick has something to do; zero if
// nothing is scheduled.
func (c *Coordinator) NextDeadline() time.Time {
	var next time.Time
	for _, g := range c.groups {
		for _, m := range g.members {
			if m.joinReply == nil && m.syncReply == nil {
				next = coordloop.Earliest(next, m.sessionDeadline)
			}
		}
		for _, d := range g.pending {
			next = coordloop.Earliest(next, d)
		}
		next = coordloop.Earliest(next, g.joinDeadline, g.delayDeadline, g.syncDeadline)
		for _, m := range g.cmembers {
			next = coordloop.Earliest(next, m.sessionDeadline, m.rebalanceDeadline)
		}
	}
	return next
}

func (c *Coordinator) sortedGroups() []*group {
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
	return gs
}

func (c *Coordinator) newMemberID(clientID string, instanceID *string) string {
	if instanceID != nil {
		return *instanceID + "-" + c.cfg.NewID()
	}
	return clientID + "-" + c.cfg.NewID()
}
