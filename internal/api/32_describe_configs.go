package api

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DescribeConfigs: v0-4
//
// Behavior:
// * Topic resources: every topic config Sushka understands with its
//   effective value; source DYNAMIC_TOPIC_CONFIG for an override, else
//   STATIC_BROKER_CONFIG when the broker default was set explicitly, else
//   DEFAULT_CONFIG. Synonyms (v1+) list the override and the broker
//   default, as Kafka does.
// * Broker resources (name "" or this node's ID): the broker's configs,
//   all read-only (none can be changed while running).
// * Other resource types are INVALID_REQUEST.
// * A resource named more than once is INVALID_REQUEST, answered once (as
//   AlterConfigs treats repeated resources): each answer lists every
//   config, so repeats would multiply a small request into a huge answer.
//
// Version notes:
// * v1: IncludeSynonyms, Source (v0: IsDefault)
// * v3: IncludeDocumentation, ConfigType; v4: flexible versions

func init() { regKey(32, 0, 4, (*Handler).handleDescribeConfigs) }

func (h *Handler) handleDescribeConfigs(_ context.Context, creq *server.Request, req *kmsg.DescribeConfigsRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	answer := func(rr *kmsg.DescribeConfigsRequestResource, code int16, err error) {
		var entries []configEntry
		switch {
		case code != 0:
		case rr.ResourceType == resourceTopic:
			if t := h.lookup(rr.ResourceName); t == nil {
				code, err = kerr.UnknownTopicOrPartition.Code, fmt.Errorf("unknown topic %s", rr.ResourceName)
			} else {
				entries = h.topicConfigEntries(t.meta, rr.ConfigNames)
			}
		case rr.ResourceType == resourceBroker:
			if err = h.checkBrokerResource(rr.ResourceName); err != nil {
				code = kerr.InvalidRequest.Code
			} else {
				entries = h.brokerConfigEntries(rr.ConfigNames)
			}
		default:
			code, err = kerr.InvalidRequest.Code, fmt.Errorf("resource type %v is not supported", rr.ResourceType)
		}
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName, sr.ErrorCode = rr.ResourceType, rr.ResourceName, code
		sr.ErrorMessage = errMessage(err)
		for _, e := range entries {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name = e.name
			v := e.value
			c.Value = &v
			c.ReadOnly = e.readOnly
			c.IsDefault = e.source == sourceDefault
			c.Source = kmsg.ConfigSource(e.source)
			c.ConfigType = kmsg.ConfigType(e.typ)
			if req.IncludeDocumentation && e.doc != "" {
				doc := e.doc
				c.Documentation = &doc
			}
			if req.IncludeSynonyms {
				for _, s := range e.synonyms {
					cs := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					sv := s.value
					cs.Name, cs.Value, cs.Source = s.name, &sv, kmsg.ConfigSource(s.source)
					c.ConfigSynonyms = append(c.ConfigSynonyms, cs)
				}
			}
			sr.Configs = append(sr.Configs, c)
		}
		resp.Resources = append(resp.Resources, sr)
	}
	key := func(rr *kmsg.DescribeConfigsRequestResource) (kmsg.ConfigResourceType, string) {
		return rr.ResourceType, rr.ResourceName
	}
	if refused, ok := configResources(h, creq, req.Resources, acl.DescribeConfigs, nil, key, answer); ok {
		return refused
	}
	return reply(resp)
}
