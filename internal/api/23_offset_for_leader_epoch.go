package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// OffsetForLeaderEpoch: v0-4
//
// Behavior:
// * A plain partition has had one leader epoch, 0, since it was created,
//   so epoch 0 (or any later epoch asked for) ends at the high watermark; a
//   negative epoch gives epoch -1, offset -1.
// * A replicated partition (cluster mode, rf > 1): epochs are raft terms,
//   the batches' partitionLeaderEpoch; epoch e answers the largest epoch
//   at most e in the committed log and the offset where the next begins
//   (the high watermark for the latest), as Kafka's leader epoch cache.
//   Only its leader answers: a follower, or a node without a replica, is
//   NOT_LEADER_OR_FOLLOWER.
// * v2+: a CurrentLeaderEpoch above ours is UNKNOWN_LEADER_EPOCH, below ours
//   FENCED_LEADER_EPOCH, as a Kafka leader answers.
// * Clients use it (KIP-320) to detect truncation after a leader change.
// * A partition named more than once is answered once, from its first
//   entry (Kafka answers every entry): the answer to a request must not
//   grow with repeats.
//
// Version notes:
// * v1: LeaderEpoch in the response; v2: CurrentLeaderEpoch, ThrottleMillis
// * v3: ReplicaID; v4: flexible versions

func init() { regKey(23, 0, 4, (*Handler).handleOffsetForLeaderEpoch) }

func (h *Handler) handleOffsetForLeaderEpoch(_ context.Context, creq *server.Request, req *kmsg.OffsetForLeaderEpochRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	_, distinctPartitions := repeatedPartitions(req.Topics, func(rt *kmsg.OffsetForLeaderEpochRequestTopic) (topicKey, int) {
		return topicKey{name: rt.Topic}, len(rt.Partitions)
	}, func(rt *kmsg.OffsetForLeaderEpochRequestTopic, i int) int32 { return rt.Partitions[i].Partition })
	if refused, ok := h.tooManyPartitions(creq, distinctPartitions); ok {
		return refused
	}
	// A replica's request (CLUSTER_ACTION) may ask of every topic, anyone
	// else of the topics it may describe.
	replica := h.allowedCluster(creq, acl.ClusterAction)
	var seen requestPartitions
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		t := h.lookup(rt.Topic)
		ti := seen.topic(topicKey{name: rt.Topic})
		denied := !replica && h.topicDenied(creq, t, rt.Topic, acl.Describe)
		for _, rp := range rt.Partitions {
			if _, again := seen.partition(ti, rp.Partition, 0); again {
				continue
			}
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			l := t.partition(rp.Partition)
			current := t.epochOf(rp.Partition)
			switch {
			case denied:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case t.notHostedHere(rp.Partition), t.followerHere(rp.Partition):
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			case l == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case req.Version >= 2 && rp.CurrentLeaderEpoch > current:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			case req.Version >= 2 && rp.CurrentLeaderEpoch >= 0 && rp.CurrentLeaderEpoch < current:
				sp.ErrorCode = kerr.FencedLeaderEpoch.Code
			case t.replicated(rp.Partition) != nil && rp.LeaderEpoch >= 0:
				sp.LeaderEpoch, sp.EndOffset = t.replicated(rp.Partition).EndOffsetForEpoch(rp.LeaderEpoch)
			case rp.LeaderEpoch >= LeaderEpoch:
				sp.LeaderEpoch, sp.EndOffset = LeaderEpoch, l.HighWatermark()
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 || len(rt.Partitions) == 0 { // not all repeats
			resp.Topics = append(resp.Topics, st)
		}
	}
	return reply(resp)
}
