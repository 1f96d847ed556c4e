package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// IncrementalAlterConfigs: v0-1
//
// Behavior:
// * Topic resources: SET, DELETE (back to the broker default), APPEND and
//   SUBTRACT (list configs only: cleanup.policy) applied to the current
//   overrides; the result is validated as a whole and applied atomically.
// * Broker resources: INVALID_REQUEST (broker configs are static).
// * ValidateOnly checks and changes nothing.
// * A resource named more than once is INVALID_REQUEST (as Kafka: "each
//   resource must appear at most once"), answered once and not altered.
//
// Version notes:
// * v1: flexible versions

func init() { regKey(44, 0, 1, (*Handler).handleIncrementalAlterConfigs) }

func (h *Handler) handleIncrementalAlterConfigs(_ context.Context, creq *server.Request, req *kmsg.IncrementalAlterConfigsRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	answer := func(rr *kmsg.IncrementalAlterConfigsRequestResource, code int16, err error) {
		switch {
		case code != 0:
		case rr.ResourceType == resourceTopic:
			t := h.lookup(rr.ResourceName)
			if t == nil {
				code, err = kerr.UnknownTopicOrPartition.Code, fmt.Errorf("unknown topic %s", rr.ResourceName)
				break
			}
			next, aerr := applyIncremental(t.meta.Configs, rr.Configs)
			if aerr != nil {
				code, err = kerr.InvalidRequest.Code, aerr
				if errors.Is(aerr, errNotAList) {
					code = kerr.InvalidConfig.Code
				}
				break
			}
			code, err = h.alterTopicConfigsLocked(rr.ResourceName, next, rr.Configs, req.ValidateOnly)
		default:
			code, err = h.rejectConfigAlter(rr.ResourceType, rr.ResourceName)
		}
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = rr.ResourceType, rr.ResourceName, code, errMessage(err)
		resp.Resources = append(resp.Resources, sr)
	}
	key := func(rr *kmsg.IncrementalAlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
		return rr.ResourceType, rr.ResourceName
	}
	if refused, ok := configResources(h, creq, req.Resources, acl.AlterConfigs, h.adminLocker(), key, answer); ok {
		return refused
	}
	return reply(resp)
}
