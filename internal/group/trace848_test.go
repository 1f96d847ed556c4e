package group

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// run848 builds the KIP-848 requests of the traces:
//
//	cg-heartbeat group=g member=m1 epoch=0 topics=t1,t2 assignor=range owned=t1/0+1 rebalance=30000
//	cg-describe groups=g
func (h *harness) run848(cmd string, args map[string]string) kmsg.Request {
	switch cmd {
	case "cg-heartbeat":
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		r.MemberEpoch = int32(intArg(args, "epoch", 0))
		r.InstanceID = optString(args, "instance")
		r.RebalanceTimeoutMillis = int32(intArg(args, "rebalance", -1))
		if r.MemberEpoch == 0 {
			r.RebalanceTimeoutMillis = int32(intArg(args, "rebalance", 30000))
		}
		if v, ok := args["topics"]; ok {
			r.SubscribedTopicNames = []string{}
			if v != "" {
				r.SubscribedTopicNames = strings.Split(v, ",")
			}
		}
		r.ServerAssignor = optString(args, "assignor")
		if v, ok := args["owned"]; ok {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			topics, parts := parsePartitions(v)
			for _, t := range topics {
				r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: topicID(t), Partitions: parts[t]})
			}
		}
		return r
	case "cg-describe":
		r := kmsg.NewPtrConsumerGroupDescribeRequest()
		r.Groups = strings.Split(args["groups"], ",")
		return r
	}
	return nil
}
