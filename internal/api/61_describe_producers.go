package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DescribeProducers: v0
//
// Behavior (KIP-664):
// * Per partition, its active producers as the partition log's writer
//   knows them (plog.Log.Producers): id, epoch, last sequence (-1 when it
//   has no batch in its epoch), the max timestamp of its last batch or
//   marker, the coordinator epoch of its last marker (-1 before any), and
//   the first offset of its transaction in progress (-1 when none), as
//   Kafka's ProducerStateManager reports them. Producers forgotten by
//   producer.id.expiration.ms are not listed.
// * An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION; a
//   partition whose log failed KAFKA_STORAGE_ERROR. A partition named more
//   than once is answered once, from its first entry: the answer must not
//   grow with repeats.
//
// Version notes:
// * v0: flexible

func init() { regKey(61, 0, 0, (*Handler).handleDescribeProducers) }

func (h *Handler) handleDescribeProducers(ctx context.Context, creq *server.Request, req *kmsg.DescribeProducersRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	_, distinctPartitions := repeatedPartitions(req.Topics, func(rt *kmsg.DescribeProducersRequestTopic) (topicKey, int) {
		return topicKey{name: rt.Topic}, len(rt.Partitions)
	}, func(rt *kmsg.DescribeProducersRequestTopic, i int) int32 { return rt.Partitions[i] })
	if refused, ok := h.tooManyPartitions(creq, distinctPartitions); ok {
		return refused
	}
	var seen requestPartitions
	for _, rt := range req.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		t := h.lookup(rt.Topic)
		denied := h.topicDenied(creq, t, rt.Topic, acl.Read)
		ti := seen.topic(topicKey{name: rt.Topic})
		for _, p := range rt.Partitions {
			if _, again := seen.partition(ti, p, 0); again {
				continue
			}
			if ctx.Err() != nil {
				return server.Response{None: true, Close: true} // the client is gone
			}
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = p
			l := t.partition(p)
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
			producers, err := l.Producers()
			if err != nil {
				sp.ErrorCode = errorCode(err)
				sp.ErrorMessage = errMessage(err)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			sp.ActiveProducers = make([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, 0, len(producers))
			for _, pi := range producers {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch = pi.ProducerID, int32(pi.ProducerEpoch)
				ap.LastSequence, ap.LastTimestamp = pi.LastSequence, pi.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = pi.CoordinatorEpoch, pi.CurrentTxnStartOffset
				sp.ActiveProducers = append(sp.ActiveProducers, ap)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 || len(rt.Partitions) == 0 { // not all repeats
			resp.Topics = append(resp.Topics, st)
		}
	}
	return reply(resp)
}
