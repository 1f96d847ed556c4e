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
	repeated, distinctResources := repeatedResources(req.Resources, func(rr *kmsg.DescribeConfigsRequestResource) (int8, string) {
		return int8(rr.ResourceType), rr.ResourceName
	})
	if refused, ok := h.tooManyPartitions(creq, distinctResources); ok {
		return refused
	}
	var answered requestPartitions
	distinct := int32(0)
	for i := range req.Resources {
		rr := &req.Resources[i]
		entry, again := answered.partition(answered.topic(resourceKey(int8(rr.ResourceType), rr.ResourceName)), 0, distinct)
		if again {
			continue // answered with its first entry
		}
		distinct++
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		var entries []configEntry
		var err error
		denied, deniedErr := h.configDenied(creq, rr.ResourceType, rr.ResourceName, acl.DescribeConfigs)
		switch {
		case repeated[entry]:
			sr.ErrorCode = kerr.InvalidRequest.Code
			err = fmt.Errorf("resource %s named more than once in the request", rr.ResourceName)
		case denied != 0:
			sr.ErrorCode, err = denied, deniedErr
		case rr.ResourceType == resourceTopic:
			if t := h.lookup(rr.ResourceName); t == nil {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				err = fmt.Errorf("unknown topic %s", rr.ResourceName)
			} else {
				entries = h.topicConfigEntries(t.meta, rr.ConfigNames)
			}
		case rr.ResourceType == resourceBroker:
			if err = h.checkBrokerResource(rr.ResourceName); err != nil {
				sr.ErrorCode = kerr.InvalidRequest.Code
			} else {
				entries = h.brokerConfigEntries(rr.ConfigNames)
			}
		default:
			sr.ErrorCode = kerr.InvalidRequest.Code
			err = fmt.Errorf("resource type %v is not supported", rr.ResourceType)
		}
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
	return reply(resp)
}
