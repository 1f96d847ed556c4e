package api

import (
	"context"
	"fmt"
	"slices"
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
// (the first replica while that broker is unfenced, rf=1 until the
// replicated partition is wired; -1 and LEADER_NOT_AVAILABLE otherwise),
// replicas and in-sync replicas (the unfenced ones).
func (h *Handler) partitionReplicas(t *topic, p int32) (leader int32, replicas, isr []int32, code int16) {
	if !h.clusterMode() || t == nil || meta.IsInternalTopic(t.meta.Name) {
		return h.cfg.NodeID, []int32{h.cfg.NodeID}, []int32{h.cfg.NodeID}, 0
	}
	all := h.cfg.Cluster.Replicas(t.meta.ID)
	if int(p) >= len(all) || len(all[p]) == 0 {
		return -1, []int32{}, []int32{}, kerr.LeaderNotAvailable.Code
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
	if !slices.Contains(isr, replicas[0]) {
		return -1, replicas, isr, kerr.LeaderNotAvailable.Code
	}
	return replicas[0], replicas, isr, 0
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
// DATA/<topic>-<partition>. Applying the same record again (a restart
// replays the quorum's log) changes nothing.
func (h *Handler) HostPartition(mt meta.Topic, p int32, hosted bool) error {
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
		t = &topic{meta: mt, parts: append(slices.Clone(t.parts), make([]*plog.Log, grown)...)}
	}
	if p < 0 || p >= int32(len(t.parts)) {
		return fmt.Errorf("api: topic %s has no partition %d", mt.Name, p)
	}
	var l *plog.Log
	if hosted && t.parts[p] == nil {
		var err error
		if l, err = h.openLog(mt, p); err != nil {
			h.log.Error("partition refuses to serve: its log could not be opened", "topic", mt.Name, "partition", p, "err", err)
			l = plog.Failed(h.logConfig(mt, p), err)
		}
	}
	h.mu.Lock()
	if l != nil {
		parts := slices.Clone(t.parts) // readers hold the old slice
		parts[p] = l
		t = &topic{meta: t.meta, parts: parts}
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
	return h.cfg.Cluster.CreateTopic(ctx, name, partitions, rf, configs, validateOnly)
}

// clusterCreateTimeout bounds a creation through the controller when the
// request gives no timeout of its own (Kafka's default request timeout).
const clusterCreateTimeout = 30 * time.Second
