package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerState is a KIP-848 group's state.
type consumerState struct {
	cmembers []*cmember
}

// cmember is a KIP-848 member.
type cmember struct {
	id                string
	epoch             int32
	subscribed        []string
	assigned          map[[16]byte][]int32
	sessionDeadline   time.Time
	rebalanceDeadline time.Time
}

func (g *group) consumerStateName() string { return "empty" }

func (c *Coordinator) tickConsumer(g *group) {}

func (c *Coordinator) consumerHeartbeat(r Request, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	return resp
}

func (c *Coordinator) consumerDescribe(req *kmsg.ConsumerGroupDescribeRequest) *kmsg.ConsumerGroupDescribeResponse {
	return req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
}

func (g *group) validateConsumerCommit(req *kmsg.OffsetCommitRequest) int16 { return 0 }

func (g *group) validateConsumerFetch(rg kmsg.OffsetFetchRequestGroup) int16 { return 0 }
