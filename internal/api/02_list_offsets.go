package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// ListOffsets: v0-10
//
// Behavior:
// * Timestamp -1: latest: the high watermark, or the last stable offset for
//   IsolationLevel 1 (read_committed, KIP-98). For read_committed, lookups
//   by timestamp (and -3) find only offsets below the LSO, as Kafka bounds
//   them (its lastFetchableOffset): one at or past it answers -1, -1.
// * -2: earliest (the log start offset); -4 (earliest local) and -5
//   (earliest pending upload) answer the same: there is no tiered storage.
// * -3: the offset and value of the largest timestamp (KIP-734).
// * >= 0: the first offset whose timestamp is at least the given one; none
//   gives offset -1, timestamp -1, as Kafka does.
// * Cluster mode: a partition held by other nodes, or of which this node
//   is a follower, is NOT_LEADER_OR_FOLLOWER (the client refreshes its
//   metadata); LeaderEpoch is a replicated partition's raft term.
// * v0 answers in OldStyleOffsets (MaxNumOffsets is honoured as 0 or 1).
// * A partition named more than once is INVALID_REQUEST, as in Kafka, and
//   looked up for none of its entries; we answer it once (Kafka answers
//   every entry), so a partition repeated a million times costs one answer.
//   A lookup by timestamp may decompress a batch: the request stops looking
//   when its context ends (the client went away).
//
// Version notes:
// * v1: one offset per partition, Timestamp in the response
// * v2: IsolationLevel; v3: no change; v4: CurrentLeaderEpoch, LeaderEpoch
// * v6: flexible versions; v7: -3; v8: -4; v9: -5; v10: TimeoutMillis

func init() { regKey(2, 0, 10, (*Handler).handleListOffsets) }

func (h *Handler) handleListOffsets(ctx context.Context, creq *server.Request, req *kmsg.ListOffsetsRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	repeated, distinctPartitions := repeatedPartitions(req.Topics, func(rt *kmsg.ListOffsetsRequestTopic) (topicKey, int) {
		return topicKey{name: rt.Topic}, len(rt.Partitions)
	}, func(rt *kmsg.ListOffsetsRequestTopic, i int) int32 { return rt.Partitions[i].Partition })
	if refused, ok := h.tooManyPartitions(creq, distinctPartitions); ok {
		return refused
	}
	var answered requestPartitions
	distinct := int32(0)
	for i := range req.Topics {
		rt := &req.Topics[i]
		ti := answered.topic(topicKey{name: rt.Topic})
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := h.lookup(rt.Topic)
		denied := h.topicDenied(creq, t, rt.Topic, acl.Describe)
		for _, rp := range rt.Partitions {
			entry, again := answered.partition(ti, rp.Partition, distinct)
			if again {
				continue // answered with its first entry
			}
			distinct++
			if ctx.Err() != nil {
				return server.Response{None: true, Close: true} // the client is gone
			}
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, t.epochOf(rp.Partition)
			l := t.partition(rp.Partition)
			committed := req.Version >= 2 && req.IsolationLevel == 1
			switch ts := rp.Timestamp; {
			case repeated[entry]:
				sp.ErrorCode = kerr.InvalidRequest.Code
			case denied:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case t.notHostedHere(rp.Partition), t.followerHere(rp.Partition):
				// Cluster mode: held elsewhere, or a follower here.
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			case l == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case ts == -1 && committed:
				sp.Offset = l.LastStableOffset()
			case ts == -1:
				sp.Offset = l.HighWatermark()
			case ts == -2 || ts == -4 || ts == -5:
				sp.Offset = l.LogStartOffset()
			case ts == -3:
				sp.Offset, sp.Timestamp = l.MaxTimestamp()
			case ts >= 0:
				off, found, ok, err := l.OffsetForTimestamp(ts)
				switch {
				case err != nil:
					sp.ErrorCode = errorCode(err)
				case ok:
					sp.Offset, sp.Timestamp = off, found
				}
			default:
				sp.ErrorCode = kerr.InvalidRequest.Code
			}
			if committed && (rp.Timestamp >= 0 || rp.Timestamp == -3) && sp.Offset >= 0 && sp.Offset >= l.LastStableOffset() {
				sp.Offset, sp.Timestamp = -1, -1 // not yet stable: as if absent
			}
			if req.Version == 0 && sp.ErrorCode == 0 && sp.Offset >= 0 && rp.MaxNumOffsets > 0 {
				sp.OldStyleOffsets = []int64{sp.Offset}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 || len(rt.Partitions) == 0 { // not all repeats
			resp.Topics = append(resp.Topics, st)
		}
	}
	return reply(resp)
}
