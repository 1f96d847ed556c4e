package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
)

// Metadata: v0-13
//
// Behavior:
// * Lists this broker and the requested topics (all on a null list; v0: on
//   an empty list), each partition led by this node at epoch 0 with
//   replicas and ISR [node].
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
// * v8-10: authorized operations (we report -2147483648: not requested)
// * v9: flexible versions
// * v10: TopicID
// * v13: top-level ErrorCode

func init() { regKey(3, 0, 13, (*Handler).handleMetadata) }

func (h *Handler) handleMetadata(_ context.Context, creq *server.Request, req *kmsg.MetadataRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)

	b := kmsg.NewMetadataResponseBroker()
	b.NodeID = h.cfg.NodeID
	b.Host, b.Port = h.advertisedAddr(creq)
	resp.Brokers = append(resp.Brokers, b)
	clusterID := h.cfg.Catalog.ClusterID()
	resp.ClusterID = &clusterID
	resp.ControllerID = h.cfg.NodeID

	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		for _, t := range h.sortedTopics() {
			resp.Topics = append(resp.Topics, h.metadataTopic(t))
		}
		names, _ := h.internalTopics()
		for _, name := range names {
			st, _ := h.internalTopicMetadata(name)
			resp.Topics = append(resp.Topics, st)
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
			// v10+: by topic ID.
			if t = h.lookupID(rt.TopicID); t == nil {
				st := kmsg.NewMetadataResponseTopic()
				st.TopicID = rt.TopicID
				st.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, st)
				continue
			}
		} else if meta.IsInternalTopic(*rt.Topic) {
			// Never auto-created: its coordinator opens it at start-up.
			st, ok := h.internalTopicMetadata(*rt.Topic)
			if !ok {
				st = kmsg.NewMetadataResponseTopic()
				st.Topic, st.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
			}
			resp.Topics = append(resp.Topics, st)
			continue
		} else if t = h.lookup(*rt.Topic); t == nil {
			code := kerr.UnknownTopicOrPartition.Code
			if allowCreate {
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
		resp.Topics = append(resp.Topics, h.metadataTopic(t))
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
		st.Partitions = append(st.Partitions, h.metadataPartition(int32(p)))
	}
	return st
}

// metadataPartition is partition p as Metadata shows every partition of a
// single node: this node leads it and is its only (in-sync) replica.
func (h *Handler) metadataPartition(p int32) kmsg.MetadataResponseTopicPartition {
	sp := kmsg.NewMetadataResponseTopicPartition()
	sp.Partition = p
	sp.Leader = h.cfg.NodeID
	sp.LeaderEpoch = LeaderEpoch
	sp.Replicas = []int32{h.cfg.NodeID}
	sp.ISR = []int32{h.cfg.NodeID}
	sp.OfflineReplicas = []int32{}
	return sp
}
