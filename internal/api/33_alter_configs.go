package api

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// AlterConfigs: v0-2
//
// Behavior:
// * Topic resources: the given configs replace all of the topic's overrides
//   (configs not named return to the broker default), as in Kafka. Every
//   value is validated first; nothing changes on an error. Partition logs
//   take the new settings at once (plog.SetConfig).
// * Broker resources: INVALID_REQUEST, broker configs cannot be changed
//   while running (Kafka's answer for non-dynamic configs).
// * ValidateOnly checks and changes nothing.
// * A resource named more than once is INVALID_REQUEST (as Kafka: "each
//   resource must appear at most once"), answered once and not altered:
//   every alteration rewrites the catalogue, so repeats must not multiply
//   the disk work done under the admin lock.
//
// Version notes:
// * v1: no change; v2: flexible versions

func init() { regKey(33, 0, 2, (*Handler).handleAlterConfigs) }

func (h *Handler) handleAlterConfigs(_ context.Context, creq *server.Request, req *kmsg.AlterConfigsRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	repeated, distinctResources := repeatedResources(req.Resources, func(rr *kmsg.AlterConfigsRequestResource) (int8, string) {
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
		sr := kmsg.NewAlterConfigsResponseResource()
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
			configs := map[string]string{}
			for _, c := range rr.Configs {
				if c.Value == nil {
					continue // null: back to the default
				}
				configs[c.Name] = *c.Value
			}
			sr.ErrorCode, err = h.alterTopicConfigsLocked(rr.ResourceName, configs, req.ValidateOnly)
		default:
			sr.ErrorCode, err = h.rejectConfigAlter(rr.ResourceType, rr.ResourceName)
		}
		sr.ErrorMessage = errMessage(err)
		resp.Resources = append(resp.Resources, sr)
	}
	return reply(resp)
}
