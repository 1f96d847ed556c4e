package api

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
)

// CreateTopics: v0-7
//
// Behavior:
// * Cluster mode (cluster.go): each topic is created through the active
//   controller: this node calls it when it is the controller, else it
//   forwards the topic in a CreateTopics of its own to the controller's
//   listener and relays the answer (KIP-590's effect); the answer comes
//   once this node has applied the creation. Replicas are placed by the
//   controller on the unfenced brokers; a replication factor above 1 is
//   INVALID_REPLICATION_FACTOR until replicated partitions are wired, a
//   manual ReplicaAssignment INVALID_REPLICA_ASSIGNMENT.
// * NumPartitions -1 takes the broker's default partition count,
//   ReplicationFactor -1 takes 1; a replication factor above the number of
//   brokers (one) is INVALID_REPLICATION_FACTOR, as in Kafka. A manual
//   ReplicaAssignment may only name this node.
// * Configs are validated against the topic configs Sushka understands
//   (internal/meta); anything else is INVALID_CONFIG.
// * ValidateOnly checks everything and creates nothing.
// * A topic named twice in one request is INVALID_REQUEST for both.
//
// Version notes:
// * v1: ValidateOnly, ErrorMessage; v2: ThrottleMillis
// * v4: NumPartitions/ReplicationFactor -1 take broker defaults
// * v5: flexible versions; the response lists partitions, replication
//   factor and the resulting configs
// * v7: TopicID in the response

func init() { regKey(19, 0, 7, (*Handler).handleCreateTopicsRequest) }

func (h *Handler) handleCreateTopicsRequest(ctx context.Context, creq *server.Request, req *kmsg.CreateTopicsRequest) server.Response {
	if h.clusterMode() {
		return reply(h.handleCreateTopicsInCluster(ctx, creq, req))
	}
	return reply(h.handleCreateTopics(creq, req))
}

func (h *Handler) handleCreateTopics(creq *server.Request, req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	clusterCreate := h.allowedCluster(creq, acl.Create)
	twice := topicsNamedTwice(req.Topics, func(rt kmsg.CreateTopicsRequestTopic) string { return rt.Topic })
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		fail := func(code int16, err error) {
			resp.Topics = append(resp.Topics, failedTopic(req.Version, st, code, err))
		}
		if twice[rt.Topic] {
			fail(kerr.InvalidRequest.Code, errNamedTwice(rt.Topic))
			continue
		}
		if !clusterCreate && !h.allowed(creq, acl.Topic, rt.Topic, acl.Create) {
			fail(kerr.TopicAuthorizationFailed.Code, fmt.Errorf("%s may not create topic %s: it needs CREATE on the cluster or the topic", creq.Principal(), rt.Topic))
			continue
		}
		partitions, rf := rt.NumPartitions, rt.ReplicationFactor
		if len(rt.ReplicaAssignment) > 0 {
			if partitions != -1 || rf != -1 {
				fail(kerr.InvalidRequest.Code, fmt.Errorf("both a replica assignment and a partition count or replication factor were given"))
				continue
			}
			ok := true
			for i, a := range rt.ReplicaAssignment {
				if a.Partition != int32(i) || len(a.Replicas) != 1 || a.Replicas[0] != h.cfg.NodeID {
					ok = false
				}
			}
			if !ok {
				fail(kerr.InvalidReplicaAssignment.Code, fmt.Errorf("replica assignments may only name partitions 0..n-1 on node %d", h.cfg.NodeID))
				continue
			}
			partitions, rf = int32(len(rt.ReplicaAssignment)), 1
		}
		if partitions == -1 {
			partitions = h.cfg.DefaultPartitions
		}
		if rf == -1 {
			rf = 1
		}
		if rf < 1 || rf > 1 {
			fail(kerr.InvalidReplicationFactor.Code, fmt.Errorf("replication factor: %d larger than available brokers: 1", rf))
			continue
		}
		configs, configErr := requestedConfigs(rt)
		if configErr != nil {
			fail(kerr.InvalidConfig.Code, configErr)
			continue
		}
		if err := h.checkPartitionLimit(partitions); err != nil {
			fail(errorCode(err), err)
			continue
		}
		if err := h.cfg.Catalog.CheckCreate(rt.Topic, partitions, configs); err != nil {
			fail(errorCode(err), err)
			continue
		}
		var mt meta.Topic
		if req.ValidateOnly {
			mt = meta.Topic{Name: rt.Topic, Partitions: partitions, Configs: configs}
		} else {
			t, err := h.createTopicLocked(rt.Topic, partitions, configs)
			if err != nil {
				fail(errorCode(err), err)
				continue
			}
			mt = t.meta
		}
		resp.Topics = append(resp.Topics, h.createdTopic(creq, st, mt, partitions, 1))
	}
	return resp
}

// failedTopic is st answering a topic not created: code, and from v1 the
// message.
func failedTopic(version int16, st kmsg.CreateTopicsResponseTopic, code int16, err error) kmsg.CreateTopicsResponseTopic {
	st.ErrorCode = code
	if version >= 1 {
		st.ErrorMessage = errMessage(err)
	}
	st.NumPartitions, st.ReplicationFactor = -1, -1
	return st
}

// requestedConfigs are a CreateTopics topic's configs, each validated
// (internal/meta): an unknown or invalid one is INVALID_CONFIG.
func requestedConfigs(rt kmsg.CreateTopicsRequestTopic) (map[string]string, error) {
	configs := map[string]string{}
	for _, c := range rt.Configs {
		if err := meta.ValidateConfig(c.Name, c.Value); err != nil {
			return nil, err
		}
		configs[c.Name] = *c.Value
	}
	return configs, nil
}

// createdTopic is st answering a created (or validated) topic: its id,
// partitions, replication factor and resulting configs, which only a
// principal with DESCRIBE_CONFIGS on the topic sees.
func (h *Handler) createdTopic(creq *server.Request, st kmsg.CreateTopicsResponseTopic, mt meta.Topic, partitions int32, rf int16) kmsg.CreateTopicsResponseTopic {
	st.TopicID = mt.ID
	st.NumPartitions = partitions
	st.ReplicationFactor = rf
	if !h.allowed(creq, acl.Topic, st.Topic, acl.DescribeConfigs) {
		// Created, but its configs are not the principal's to see.
		st.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code
		return st
	}
	for _, e := range h.topicConfigEntries(mt, nil) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value, c.ReadOnly, c.Source, c.IsSensitive = e.name, &e.value, e.readOnly, e.source, false
		st.Configs = append(st.Configs, c)
	}
	return st
}

// handleCreateTopicsInCluster is CreateTopics in cluster mode: the checks
// of a single node, then each topic through the controller (without
// adminMu: this node's apply of the creation takes it).
func (h *Handler) handleCreateTopicsInCluster(ctx context.Context, creq *server.Request, req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	clusterCreate := h.allowedCluster(creq, acl.Create)
	twice := topicsNamedTwice(req.Topics, func(rt kmsg.CreateTopicsRequestTopic) string { return rt.Topic })
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		fail := func(code int16, err error) {
			resp.Topics = append(resp.Topics, failedTopic(req.Version, st, code, err))
		}
		partitions, rf := rt.NumPartitions, rt.ReplicationFactor
		if partitions == -1 {
			partitions = h.cfg.DefaultPartitions
		}
		if rf == -1 {
			rf = 1
		}
		configs, configErr := requestedConfigs(rt)
		switch {
		case twice[rt.Topic]:
			fail(kerr.InvalidRequest.Code, errNamedTwice(rt.Topic))
			continue
		case !clusterCreate && !h.allowed(creq, acl.Topic, rt.Topic, acl.Create):
			fail(kerr.TopicAuthorizationFailed.Code, fmt.Errorf("%s may not create topic %s: it needs CREATE on the cluster or the topic", creq.Principal(), rt.Topic))
			continue
		case len(rt.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, fmt.Errorf("manual replica assignments are not wired in cluster mode yet: give a partition count and let the controller place the replicas"))
			continue
		case rf > 1:
			fail(kerr.InvalidReplicationFactor.Code, fmt.Errorf("replication factor %d: replication not yet wired in cluster mode (each partition has one replica, rf=1)", rf))
			continue
		case configErr != nil:
			fail(kerr.InvalidConfig.Code, configErr)
			continue
		}
		if err := h.checkPartitionLimit(partitions); err != nil {
			fail(errorCode(err), err)
			continue
		}
		mt, err := h.createInCluster(ctx, rt.Topic, partitions, rf, configs, req.ValidateOnly)
		if err != nil {
			fail(errorCode(err), err)
			continue
		}
		resp.Topics = append(resp.Topics, h.createdTopic(creq, st, mt, partitions, rf))
	}
	return resp
}
