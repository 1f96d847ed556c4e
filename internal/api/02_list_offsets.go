package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets: v0-10
//
// Behavior:
// * Timestamp -1: latest (the high watermark; with no transactions it is
//   also the last stable offset, so IsolationLevel changes nothing).
// * -2: earliest (the log start offset); -4 (earliest local) and -5
//   (earliest pending upload) answer the same: there is no tiered storage.
// * -3: the offset and value of the largest timestamp (KIP-734).
// * >= 0: the first offset whose timestamp is at least the given one; none
//   gives offset -1, timestamp -1, as Kafka does.
// * v0 answers in OldStyleOffsets (MaxNumOffsets is honoured as 0 or 1).
//
// Version notes:
// * v1: one offset per partition, Timestamp in the response
// * v2: IsolationLevel; v3: no change; v4: CurrentLeaderEpoch, LeaderEpoch
// * v6: flexible versions; v7: -3; v8: -4; v9: -5; v10: TimeoutMillis

func init() { regKey(2, 0, 10, replying((*Handler).handleListOffsets)) }

func (h *Handler) handleListOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		t := h.lookup(rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, LeaderEpoch
			l := t.partition(rp.Partition)
			if l == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			switch ts := rp.Timestamp; {
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
			if req.Version == 0 && sp.ErrorCode == 0 && sp.Offset >= 0 && rp.MaxNumOffsets > 0 {
				sp.OldStyleOffsets = []int64{sp.Offset}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
