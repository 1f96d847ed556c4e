package group

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/tracefmt"
)

// run848 builds the KIP-848 requests of the traces:
//
//	cg-heartbeat group=g member=m1 epoch=0 topics=t1,t2 assignor=range owned=t1/0+1 rebalance=30000
//	cg-describe groups=g
func (h *harness) run848(cmd string, args tracefmt.Args) kmsg.Request {
	switch cmd {
	case "cg-heartbeat":
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberID = args["group"], args["member"]
		r.MemberEpoch = int32(args.Int("epoch", 0))
		r.InstanceID = args.OptString("instance")
		r.RebalanceTimeoutMillis = int32(args.Int("rebalance", -1))
		if r.MemberEpoch == 0 {
			r.RebalanceTimeoutMillis = int32(args.Int("rebalance", 30000))
		}
		if v, ok := args["topics"]; ok {
			r.SubscribedTopicNames = []string{}
			if v != "" {
				r.SubscribedTopicNames = strings.Split(v, ",")
			}
		}
		r.ServerAssignor = args.OptString("assignor")
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
