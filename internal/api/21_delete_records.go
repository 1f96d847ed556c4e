package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
)

// DeleteRecords: v0-2
//
// Behavior:
// * Advances a partition's log start offset; -1 means the high watermark.
//   An offset beyond the high watermark is OFFSET_OUT_OF_RANGE.
// * The answer's LowWatermark is the new log start offset.
// * Works on a full disk: the checkpoint's write takes the catalogue's
//   space reserve (internal/meta) when it fails for lack of space.
//
// Version notes:
// * v1: no change; v2: flexible versions

func init() { regKey(21, 0, 2, replyingFor((*Handler).handleDeleteRecords)) }

func (h *Handler) handleDeleteRecords(creq *server.Request, req *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		t := h.lookup(rt.Topic)
		denied := h.topicDenied(creq, t, rt.Topic, acl.Delete)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LowWatermark = -1
			l := t.partition(rp.Partition)
			if denied {
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			if l == nil {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			offset := rp.Offset
			if offset == -1 {
				offset = l.HighWatermark()
			}
			if offset < 0 || offset > l.HighWatermark() {
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			start, err := l.DeleteRecordsBefore(offset)
			if meta.IsNoSpace(err) && h.cfg.Catalog.ReleaseReserve() {
				// A full disk: the checkpoint of the new log start needs
				// a block, which the catalogue's reserve gives up; the
				// segments deleted behind the new start give it back.
				start, err = l.DeleteRecordsBefore(offset)
			}
			if err == nil {
				h.cfg.Catalog.EnsureReserve()
			}
			if err != nil {
				sp.ErrorCode = errorCode(err)
			} else {
				sp.LowWatermark = start
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
