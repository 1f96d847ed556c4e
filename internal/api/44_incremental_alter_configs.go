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
	repeated, distinctResources := repeatedResources(req.Resources, func(rr *kmsg.IncrementalAlterConfigsRequestResource) (int8, string) {
		return int8(rr.ResourceType), rr.ResourceName
	})
	if refused, ok := h.tooManyPartitions(creq, distinctResources); ok {
		return refused
	}
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	var answered requestPartitions
	for i := range req.Resources {
		rr := &req.Resources[i]
		entry, again := answered.partition(answered.topic(resourceKey(int8(rr.ResourceType), rr.ResourceName)), 0, int32(len(resp.Resources)))
		if again {
			continue // answered with its first entry
		}
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		denied, deniedErr := h.configDenied(creq, rr.ResourceType, rr.ResourceName, acl.AlterConfigs)
		switch {
		case repeated[entry]:
			// Kafka: "Each resource must appear at most once."
			sr.ErrorCode = kerr.InvalidRequest.Code
			err = fmt.Errorf("resource %s named more than once in the request: not altered", rr.ResourceName)
		case denied != 0:
			sr.ErrorCode, err = denied, deniedErr
		case rr.ResourceType == resourceTopic:
			t := h.lookup(rr.ResourceName)
			if t == nil {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				err = fmt.Errorf("unknown topic %s", rr.ResourceName)
				break
			}
			next, aerr := applyIncremental(t.meta.Configs, rr.Configs)
			if aerr != nil {
				sr.ErrorCode, err = kerr.InvalidRequest.Code, aerr
				if errors.Is(aerr, errNotAList) {
					sr.ErrorCode = kerr.InvalidConfig.Code
				}
				break
			}
			sr.ErrorCode, err = h.alterTopicConfigsLocked(rr.ResourceName, next, req.ValidateOnly)
		default:
			sr.ErrorCode, err = h.rejectConfigAlter(rr.ResourceType, rr.ResourceName)
		}
		sr.ErrorMessage = errMessage(err)
		resp.Resources = append(resp.Resources, sr)
	}
	return reply(resp)
}
