package api

import (
	"context"

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
	answer := func(rr *kmsg.AlterConfigsRequestResource, code int16, err error) {
		switch {
		case code != 0:
		case rr.ResourceType == resourceTopic:
			configs := map[string]string{}
			for _, c := range rr.Configs {
				if c.Value == nil {
					continue // null: back to the default
				}
				configs[c.Name] = *c.Value
			}
			code, err = h.alterTopicConfigsLocked(rr.ResourceName, configs, nil, req.ValidateOnly)
		default:
			code, err = h.rejectConfigAlter(rr.ResourceType, rr.ResourceName)
		}
		sr := kmsg.NewAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = rr.ResourceType, rr.ResourceName, code, errMessage(err)
		resp.Resources = append(resp.Resources, sr)
	}
	key := func(rr *kmsg.AlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
		return rr.ResourceType, rr.ResourceName
	}
	if refused, ok := configResources(h, creq, req.Resources, acl.AlterConfigs, h.adminLocker(), key, answer); ok {
		return refused
	}
	return reply(resp)
}
