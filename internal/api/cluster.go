package api

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// Cluster is the seam between the request code and where the cluster's
// catalogue comes from (docs/architecture.md, "Cluster mode"). Metadata,
// DescribeCluster, CreateTopics, Produce and Fetch ask it who the brokers
// are, who the controller is and where each partition's replicas are; the
// same request code serves both modes:
//
//   - single node (Config.Cluster nil): singleNode, this node is the only
//     broker and the controller, it holds every partition, and topics are
//     created in the local catalogue (DATA/meta);
//   - a node of a cluster (broker's cluster.go): the metadata quorum's
//     applied state (internal/controller), topics created through the
//     active controller, the local replicas opened by the broker when an
//     assignment naming this node is applied (Handler.HostPartition).
type Cluster interface {
	// ClusterID is the cluster's id (Metadata, DescribeCluster).
	ClusterID() string
	// Brokers are the registered brokers, fenced ones included, by id.
	Brokers() []meta.Broker
	// Controller is the active controller's node (false: none known).
	Controller() (int32, bool)
	// Replicas are the replicas of each partition of the topic (nil for a
	// topic the cluster does not have).
	Replicas(topicID [16]byte) [][]int32
	// CreateTopic creates a topic through the active controller (forwarded
	// when this node is not it, KIP-590's effect) and returns once this
	// node has applied it; validateOnly checks without creating.
	CreateTopic(ctx context.Context, name string, partitions int32, replicationFactor int16,
		configs map[string]string, validateOnly bool) (meta.Topic, error)
	// RegisterBroker and BrokerHeartbeat serve KRaft's BrokerRegistration
	// (62) and BrokerHeartbeat (63) when this node is the active
	// controller, and answer NOT_CONTROLLER otherwise.
	RegisterBroker(ctx context.Context, req *kmsg.BrokerRegistrationRequest) (epoch int64, err error)
	BrokerHeartbeat(ctx context.Context, req *kmsg.BrokerHeartbeatRequest) (fenced bool, err error)
	// PartitionLeader is the leader (broker id) and leader epoch (raft
	// term) of a replicated partition this node holds no replica of, as
	// its replicas report it (ok false: not known yet; the answer is then
	// LEADER_NOT_AVAILABLE and the client asks again).
	PartitionLeader(topicID [16]byte, partition int32) (leader, epoch int32, ok bool)
}

// ReplicatedPartition is this node's replica of a partition served by a
// raft group (rf > 1 in cluster mode; the broker's cluster.go opens it
// with internal/replica). Its log is in the topic's parts like any other;
// this says who leads it.
type ReplicatedPartition interface {
	// Leading reports whether this replica leads and takes appends.
	Leading() bool
	// Leader is the leader this replica knows (broker id, -1 for none)
	// and its epoch (the raft term).
	Leader() (leader, epoch int32)
	// EndOffsetForEpoch is OffsetForLeaderEpoch's answer for epoch: the
	// largest epoch at most epoch in the committed log and the offset
	// where the next epoch begins (the high watermark for the latest);
	// -1, -1 when the log holds no entry of such an epoch.
	EndOffsetForEpoch(epoch int32) (int32, int64)
	// ISR is the in-sync replicas (broker ids, ascending, the leader
	// included) as the leader sees them (replica's §3d), nil on a
	// follower.
	ISR() []int32
	// SetMinInsyncReplicas changes the partition's min.insync.replicas
	// (a topic config change applied).
	SetMinInsyncReplicas(n int)
	// Close closes the replica's log.
	Close() error
}

// PartitionOpener opens the log of a replicated partition this node holds
// a replica of, with cfg (the handler's configuration for it) and the
// topic's effective min.insync.replicas.
type PartitionOpener func(cfg plog.Config, minInsyncReplicas int) (*plog.Log, ReplicatedPartition, error)

// minInsyncReplicas is the topic's effective min.insync.replicas: its own
// config, else the broker's default (Defaults, its one home).
func (h *Handler) minInsyncReplicas(mt meta.Topic) int {
	if v, ok := mt.Configs["min.insync.replicas"]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return int(h.cfg.Defaults.MinInsyncReplicas)
}

// MetadataTopic is the cluster's metadata quorum (KRaft's
// __cluster_metadata): its raft log is DATA/__cluster_metadata-0 on every
// node (broker/cluster.go), which the start-up scan leaves alone and no
// topic may take.
const MetadataTopic = "__cluster_metadata"

// clusterMode reports whether the handler is a node of a multi-node
// cluster (Config.Cluster set).
func (h *Handler) clusterMode() bool { return h.cfg.Cluster != nil }

// brokers are the brokers Metadata and DescribeCluster list: the cluster's
// registered brokers (fenced ones only with includeFenced), or this node.
func (h *Handler) brokers(includeFenced bool) []meta.Broker {
	if !h.clusterMode() {
		eps := h.endpoints()
		b := meta.Broker{ID: h.cfg.NodeID}
		for _, ep := range eps {
			b.Listeners = append(b.Listeners, meta.BrokerEndpoint{Name: ep.Listener, Host: ep.Host, Port: ep.Port, SecurityProtocol: ep.Protocol.String()})
		}
		return []meta.Broker{b}
	}
	bs := h.cfg.Cluster.Brokers()
	if !includeFenced {
		bs = slices.DeleteFunc(bs, func(b meta.Broker) bool { return b.Fenced })
	}
	return bs
}

// listedBroker is a broker as Metadata and DescribeCluster list it.
type listedBroker struct {
	id     int32
	host   string
	port   int32
	rack   *string
	fenced bool
}

// listedBrokers are the brokers Metadata and DescribeCluster answer creq
// with: those with an endpoint for its listener (brokers, brokerAddr).
func (h *Handler) listedBrokers(creq *server.Request, includeFenced bool) []listedBroker {
	var out []listedBroker
	for _, b := range h.brokers(includeFenced) {
		host, port, ok := h.brokerAddr(creq, b)
		if !ok {
			continue
		}
		lb := listedBroker{id: b.ID, host: host, port: port, fenced: b.Fenced}
		if b.Rack != "" {
			lb.rack = &b.Rack
		}
		out = append(out, lb)
	}
	return out
}

// brokerAddr is broker b's endpoint for the listener creq came through, as
// Kafka answers (ok false: b has no such listener, so the client cannot
// reach it through this one and it is left out).
func (h *Handler) brokerAddr(creq *server.Request, b meta.Broker) (host string, port int32, ok bool) {
	if !h.clusterMode() {
		host, port = h.advertisedAddr(creq)
		return host, port, true
	}
	name := ""
	if creq != nil && creq.Session != nil {
		name = creq.Session.Listener
	}
	for _, ep := range b.Listeners {
		if ep.Name == name || name == "" {
			return ep.Host, ep.Port, true
		}
	}
	return "", 0, false
}

// controllerID is the active controller's id for Metadata and
// DescribeCluster (-1: none known, as Kafka answers).
func (h *Handler) controllerID() int32 {
	if !h.clusterMode() {
		return h.cfg.NodeID
	}
	if id, ok := h.cfg.Cluster.Controller(); ok {
		return id
	}
	return -1
}

// clusterID is the cluster's id.
func (h *Handler) clusterID() string {
	if !h.clusterMode() {
		return h.cfg.Catalog.ClusterID()
	}
	return h.cfg.Cluster.ClusterID()
}

// partitionReplicas is partition p of t as Metadata shows it: its leader
// and leader epoch, replicas and in-sync replicas (on a replicated
// partition's leader its own view, raft's progress; elsewhere the
// unfenced replicas). A
// partition of one replica is led by it while that broker is unfenced
// (epoch 0); a replicated one by its raft leader (epoch: the raft term),
// as this node's replica knows it or, without one here, as the replicas
// report it (Cluster.PartitionLeader). -1 and LEADER_NOT_AVAILABLE when no
// leader is known.
func (h *Handler) partitionReplicas(t *topic, p int32) (leader, epoch int32, replicas, isr []int32, code int16) {
	if !h.clusterMode() || t == nil || meta.IsInternalTopic(t.meta.Name) {
		return h.cfg.NodeID, LeaderEpoch, []int32{h.cfg.NodeID}, []int32{h.cfg.NodeID}, 0
	}
	all := h.cfg.Cluster.Replicas(t.meta.ID)
	if int(p) >= len(all) || len(all[p]) == 0 {
		return -1, -1, []int32{}, []int32{}, kerr.LeaderNotAvailable.Code
	}
	replicas = all[p]
	fenced := map[int32]bool{}
	for _, b := range h.cfg.Cluster.Brokers() {
		fenced[b.ID] = b.Fenced
	}
	isr = []int32{}
	for _, r := range replicas {
		if f, known := fenced[r]; known && !f {
			isr = append(isr, r)
		}
	}
	if len(replicas) > 1 {
		var ok bool
		if r := t.replicated(p); r != nil {
			leader, epoch = r.Leader()
			ok = leader >= 0
			if leaderISR := r.ISR(); leaderISR != nil {
				isr = leaderISR // the leader's own view (raft's progress)
			}
		} else {
			leader, epoch, ok = h.cfg.Cluster.PartitionLeader(t.meta.ID, p)
		}
		if f, known := fenced[leader]; !ok || !slices.Contains(replicas, leader) || !known || f {
			return -1, max(epoch, -1), replicas, isr, kerr.LeaderNotAvailable.Code
		}
		return leader, epoch, replicas, isr, 0
	}
	if !slices.Contains(isr, replicas[0]) {
		return -1, -1, replicas, isr, kerr.LeaderNotAvailable.Code
	}
	return replicas[0], LeaderEpoch, replicas, isr, 0
}

// replicated is this node's replica of partition p when the partition is
// served by a raft group (nil: a plain log, or none here).
func (t *topic) replicated(p int32) ReplicatedPartition {
	if t == nil || p < 0 || int(p) >= len(t.reps) {
		return nil
	}
	return t.reps[p]
}

// closePartition closes partition p's log here: a replicated partition's
// through its replica (its raft group removed from the node, the commit
// index recorded by its storage's Close), a plain one's directly. The
// one way to close a partition (Close, a deletion).
func (t *topic) closePartition(p int32) error {
	if r := t.replicated(p); r != nil {
		return r.Close()
	}
	if l := t.parts[p]; l != nil {
		return l.Close()
	}
	return nil
}

// replicatedCount is how many entries t.reps has (0 for a nil t).
func (t *topic) replicatedCount() int {
	if t == nil {
		return 0
	}
	return len(t.reps)
}

// followerHere reports whether this node holds a replica of partition p
// of t that does not lead it: Produce, Fetch, ListOffsets and
// OffsetForLeaderEpoch answer NOT_LEADER_OR_FOLLOWER (fetching from
// followers, KIP-392, is not served).
func (t *topic) followerHere(p int32) bool {
	r := t.replicated(p)
	return r != nil && !r.Leading()
}

// epochOf is partition p's leader epoch as this node answers it in
// ListOffsets and Fetch: the raft term of a replicated partition, else
// LeaderEpoch.
func (t *topic) epochOf(p int32) int32 {
	if r := t.replicated(p); r != nil {
		_, epoch := r.Leader()
		return epoch
	}
	return LeaderEpoch
}

// clusterCoordinator is the group and transaction coordinator of cluster
// mode: the unfenced broker of the lowest id that has an endpoint for
// creq's listener (false on a single node, or when none is known).
// Internal topics are each node's own until they are replicated, so every
// node must send clients to the same one.
func (h *Handler) clusterCoordinator(creq *server.Request) (meta.Broker, bool) {
	if !h.clusterMode() {
		return meta.Broker{}, false
	}
	for _, b := range h.brokers(false) { // sorted by id
		if _, _, ok := h.brokerAddr(creq, b); ok {
			return b, true
		}
	}
	return meta.Broker{}, false
}

// notHostedHere reports whether partition p of t exists in the cluster but
// has no replica on this node: Produce and Fetch answer
// NOT_LEADER_OR_FOLLOWER, and the client's Metadata refresh sends it to the
// leader.
func (t *topic) notHostedHere(p int32) bool {
	return t != nil && p >= 0 && p < t.meta.Partitions && t.partition(p) == nil
}

// HostPartition is the broker's hook when the metadata quorum applies an
// assignment (cluster mode): it makes the topic known here (every node
// knows every topic, to answer NOT_LEADER_OR_FOLLOWER rather than
// UNKNOWN_TOPIC_OR_PARTITION for partitions it does not hold) and, when
// hosted, opens (creating or recovering) the partition's local log under
// DATA/<topic>-<partition>: with open when the partition is replicated
// (served by its raft group), as a plain log when open is nil. Applying
// the same record again (a restart replays the quorum's log) changes
// nothing.
func (h *Handler) HostPartition(mt meta.Topic, p int32, hosted bool, open PartitionOpener) error {
	if !h.clusterMode() {
		return fmt.Errorf("api: HostPartition without a cluster")
	}
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	h.mu.RLock()
	t := h.byID[mt.ID]
	h.mu.RUnlock()
	if t == nil {
		if old := h.lookup(mt.Name); old != nil {
			return fmt.Errorf("api: topic %s applied with id %x, open with %x", mt.Name, mt.ID, old.meta.ID)
		}
		t = &topic{meta: mt, parts: make([]*plog.Log, mt.Partitions)}
	} else if grown := int(mt.Partitions) - len(t.parts); grown > 0 {
		// CreatePartitions applied: the new partitions' assignments follow.
		t = &topic{meta: mt, parts: append(slices.Clone(t.parts), make([]*plog.Log, grown)...), reps: t.reps}
	}
	if p < 0 || p >= int32(len(t.parts)) {
		return fmt.Errorf("api: topic %s has no partition %d", mt.Name, p)
	}
	var l *plog.Log
	var rep ReplicatedPartition
	if hosted && t.parts[p] == nil {
		var err error
		if open != nil {
			l, rep, err = open(h.logConfig(mt, p), h.minInsyncReplicas(mt))
		} else {
			l, err = h.openLog(mt, p)
		}
		if err != nil {
			h.log.Error("partition refuses to serve: its log could not be opened", "topic", mt.Name, "partition", p, "err", err)
			l, rep = plog.Failed(h.logConfig(mt, p), err), nil
		}
	}
	h.mu.Lock()
	if l != nil {
		parts := slices.Clone(t.parts) // readers hold the old slices
		parts[p] = l
		reps := t.reps
		if rep != nil {
			reps = make([]ReplicatedPartition, len(parts))
			copy(reps, t.reps)
			reps[p] = rep
		}
		t = &topic{meta: t.meta, parts: parts, reps: reps}
	}
	h.topics[mt.Name] = t
	h.byID[mt.ID] = t
	h.mu.Unlock()
	return nil
}

// createInCluster creates a topic through the cluster (CreateTopics and
// auto-creation in cluster mode) and returns it as this node opened it.
func (h *Handler) createInCluster(ctx context.Context, name string, partitions int32, rf int16,
	configs map[string]string, validateOnly bool) (meta.Topic, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterCreateTimeout)
	defer cancel()
	mt, err := h.cfg.Cluster.CreateTopic(ctx, name, partitions, rf, configs, validateOnly)
	if err == nil && !validateOnly && rf > 1 {
		h.awaitLocalLeaders(ctx, mt.ID)
	}
	return mt, err
}

// awaitLocalLeaders waits, up to awaitLeadersTimeout, until this node's
// replicas of a new topic's partitions know their leader (the preferred
// replica campaigns at once: tens of milliseconds), so a client that
// asks Metadata right after CreateTopics finds the leaders, as a Kafka
// controller's answer comes once the partitions are online. Not
// waiting longer: a partition without a leader is LEADER_NOT_AVAILABLE,
// which clients retry.
func (h *Handler) awaitLocalLeaders(ctx context.Context, topicID [16]byte) {
	ctx, cancel := context.WithTimeout(ctx, awaitLeadersTimeout)
	defer cancel()
	for {
		t := h.lookupID(topicID) // nil until this node's apply reached it
		led := t != nil
		for p := range t.replicatedCount() {
			if r := t.reps[p]; r != nil {
				if leader, _ := r.Leader(); leader < 0 {
					led = false
				}
			}
		}
		if led {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// awaitLeadersTimeout bounds awaitLocalLeaders.
const awaitLeadersTimeout = 5 * time.Second

// clusterCreateTimeout bounds a creation through the controller when the
// request gives no timeout of its own (Kafka's default request timeout).
const clusterCreateTimeout = 30 * time.Second

// nextProducerID hands out a producer id (InitProducerId, the transaction
// coordinator). Each node's catalogue counts its own ids from the same
// start, so in cluster mode the node id goes in the low bits: ids from
// different nodes never meet in one partition's producer table (two
// producers given the same id by two nodes would be taken for one, and
// one's batches deduplicated against the other's: acknowledged, not
// written). KRaft allocates blocks through the quorum instead; this needs
// no round trip and stays unique across restarts (the catalogue's counter
// is durable). A single node keeps its ids unchanged.
func (h *Handler) nextProducerID() (int64, error) {
	id, err := h.cfg.Catalog.NextProducerID()
	if err != nil || !h.clusterMode() {
		return id, err
	}
	if h.cfg.NodeID < 0 || h.cfg.NodeID >= 1<<producerIDNodeBits || id >= 1<<(63-producerIDNodeBits) {
		return -1, fmt.Errorf("api: producer id %d of node %d outside the cluster's id space", id, h.cfg.NodeID)
	}
	return id<<producerIDNodeBits | int64(h.cfg.NodeID), nil
}

// producerIDNodeBits are the low bits of a cluster-mode producer id that
// name the node that handed it out (node ids below 65,536).
const producerIDNodeBits = 16
