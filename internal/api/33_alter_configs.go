package api

import "github.com/twmb/franz-go/pkg/kmsg"

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
//
// Version notes:
// * v1: no change; v2: flexible versions

func init() { regKey(33, 0, 2, replying((*Handler).handleAlterConfigs)) }

func (h *Handler) handleAlterConfigs(req *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	for _, rr := range req.Resources {
		sr := kmsg.NewAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		switch rr.ResourceType {
		case resourceTopic:
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
	return resp
}
