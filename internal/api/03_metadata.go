package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
)

// Metadata: v0-13
//
// Behavior:
// * Lists this broker and the requested topics (all on a null list; v0: on
//   an empty list), each partition led by this node at epoch 0 with
//   replicas and ISR [node].
// * Cluster mode (cluster.go, the Cluster seam): every unfenced registered
//   broker at its endpoint for the request's listener, the active
//   controller (-1: none known), each partition led by its first replica
//   while that broker is unfenced (LEADER_NOT_AVAILABLE and leader -1
//   otherwise), replicas from the assignment, ISR the unfenced replicas.
//   Auto-creation goes through the controller as CreateTopics does; the
//   internal topics are this node's own.
// * Unknown topics are created with the default partition count when auto
//   creation is on and the request allows it (v0-3 always allow it, v4+ say
//   so with AllowAutoTopicCreation), else UNKNOWN_TOPIC_OR_PARTITION.
// * v10+: topics may be named by ID; an unknown ID is UNKNOWN_TOPIC_ID.
// * __consumer_offsets (the group coordinator's, groups.go) and
//   __transaction_state (the transaction coordinator's, txns.go) are listed
//   as internal topics, and never auto-created.
// * A topic named more than once is answered once, as Kafka does (it
//   collects the requested topics in a set): a 20 kB request naming a
//   10,000-partition topic a thousand times must not build ten million
//   partition answers.
//
// Version notes:
// * v1: ControllerID, IsInternal, Rack; null topics means all
// * v2: ClusterID
// * v3: ThrottleMillis
// * v4: AllowAutoTopicCreation
// * v5: OfflineReplicas
// * v7: LeaderEpoch
// * v8-10: authorized operations (KIP-430: -2147483648 when not requested;
//   the cluster's only with DESCRIBE on it)
// * Authorization (authz.go): a request for all topics lists those the
//   principal may DESCRIBE; a named topic it may not is
//   TOPIC_AUTHORIZATION_FAILED (whether it exists or not); auto-creation
//   needs CREATE on the cluster or the topic.
// * v9: flexible versions
// * v10: TopicID
// * v13: top-level ErrorCode

func init() { regKey(3, 0, 13, (*Handler).handleMetadata) }

func (h *Handler) handleMetadata(_ context.Context, creq *server.Request, req *kmsg.MetadataRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)

	for _, lb := range h.listedBrokers(creq, false) {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = lb.id, lb.host, lb.port, lb.rack
		resp.Brokers = append(resp.Brokers, b)
	}
	clusterID := h.clusterID()
	resp.ClusterID = &clusterID
	resp.ControllerID = h.controllerID()

	// KIP-430 (v8+): the cluster's authorized operations, when asked for
	// and the principal may describe the cluster (v8-10 only: v11 dropped
	// the field for DescribeCluster's).
	if req.Version >= 8 && req.IncludeClusterAuthorizedOperations && h.allowedCluster(creq, acl.Describe) {
		resp.AuthorizedOperations = h.authorizedOperations(creq, acl.Cluster, acl.ClusterName)
	}
	// describe is a topic in the answer, with its authorized operations
	// when asked for; a principal sees only topics it may describe.
	describe := func(st kmsg.MetadataResponseTopic) {
		if req.Version >= 8 && req.IncludeTopicAuthorizedOperations && st.Topic != nil {
			st.AuthorizedOperations = h.authorizedOperations(creq, acl.Topic, *st.Topic)
		}
		resp.Topics = append(resp.Topics, st)
	}

	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		for _, t := range h.sortedTopics() {
			if h.allowed(creq, acl.Topic, t.meta.Name, acl.Describe) {
				describe(h.metadataTopic(t))
			}
		}
		names, _ := h.internalTopics()
		for _, name := range names {
			if h.allowed(creq, acl.Topic, name, acl.Describe) {
				st, _ := h.internalTopicMetadata(name)
				describe(st)
			}
		}
		return reply(resp)
	}
	_, distinctTopics := repeatedPartitions(req.Topics, func(rt *kmsg.MetadataRequestTopic) (topicKey, int) {
		return metadataTopicKey(rt), 1
	}, func(*kmsg.MetadataRequestTopic, int) int32 { return 0 })
	if refused, ok := h.tooManyPartitions(creq, distinctTopics); ok {
		return refused
	}

	allowCreate := h.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
	var seen requestPartitions
	for i, rt := range req.Topics {
		if seen.topic(metadataTopicKey(&rt)) != int32(i) {
			continue // answered with its first entry
		}
		var t *topic
		if rt.Topic == nil {
			// v10+: by topic ID. Kafka answers an ID the principal may
			// not describe TOPIC_AUTHORIZATION_FAILED (IDs are not
			// secret), without the name.
			if t = h.lookupID(rt.TopicID); t == nil || h.topicDenied(creq, t, "", acl.Describe) {
				st := kmsg.NewMetadataResponseTopic()
				st.TopicID = rt.TopicID
				st.ErrorCode = kerr.UnknownTopicID.Code
				if t != nil {
					st.ErrorCode = kerr.TopicAuthorizationFailed.Code
				}
				resp.Topics = append(resp.Topics, st)
				continue
			}
		} else if !h.allowed(creq, acl.Topic, *rt.Topic, acl.Describe) {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
			continue
		} else if meta.IsInternalTopic(*rt.Topic) {
			// Never auto-created: its coordinator opens it at start-up.
			st, ok := h.internalTopicMetadata(*rt.Topic)
			if !ok {
				st = kmsg.NewMetadataResponseTopic()
				st.Topic, st.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
			}
			describe(st)
			continue
		} else if t = h.lookup(*rt.Topic); t == nil {
			code := kerr.UnknownTopicOrPartition.Code
			switch {
			case allowCreate && !h.allowedCluster(creq, acl.Create) && !h.allowed(creq, acl.Topic, *rt.Topic, acl.Create):
				code = kerr.TopicAuthorizationFailed.Code
			case allowCreate:
				t, code = h.autoCreate(*rt.Topic)
			}
			if t == nil {
				st := kmsg.NewMetadataResponseTopic()
				st.Topic = rt.Topic
				st.ErrorCode = code
				resp.Topics = append(resp.Topics, st)
				continue
			}
		}
		describe(h.metadataTopic(t))
	}
	return reply(resp)
}

// metadataTopicKey is how a Metadata request names a topic: by name, or
// (v10+, a null name) by ID.
func metadataTopicKey(rt *kmsg.MetadataRequestTopic) topicKey {
	if rt.Topic != nil {
		return topicKey{name: *rt.Topic}
	}
	return topicKey{id: rt.TopicID}
}

func (h *Handler) metadataTopic(t *topic) kmsg.MetadataResponseTopic {
	st := kmsg.NewMetadataResponseTopic()
	name := t.meta.Name
	st.Topic = &name
	st.TopicID = t.meta.ID
	for p := range t.parts {
		st.Partitions = append(st.Partitions, h.metadataPartition(t, int32(p)))
	}
	return st
}

// metadataPartition is partition p of t as Metadata shows it
// (partitionReplicas, the Cluster seam): on a single node this node leads
// it and is its only (in-sync) replica; in a cluster its leader is its
// first replica while that broker is unfenced. t nil: an internal topic,
// this node's.
func (h *Handler) metadataPartition(t *topic, p int32) kmsg.MetadataResponseTopicPartition {
	sp := kmsg.NewMetadataResponseTopicPartition()
	sp.Partition = p
	sp.Leader, sp.Replicas, sp.ISR, sp.ErrorCode = h.partitionReplicas(t, p)
	sp.LeaderEpoch = LeaderEpoch
	sp.OfflineReplicas = []int32{}
	return sp
}
