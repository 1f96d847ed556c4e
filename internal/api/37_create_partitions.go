package api

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// CreatePartitions: v0-3
//
// Behavior:
// * Grows a topic to Count partitions (never shrinks: INVALID_PARTITIONS).
//   A manual assignment may only name this node.
// * ValidateOnly checks and changes nothing.
// * A topic named twice is INVALID_REQUEST.
//
// Version notes:
// * v1: no change; v2: flexible versions; v3: no change

func init() { regKey(37, 0, 3, replyingFor((*Handler).handleCreatePartitions)) }

func (h *Handler) handleCreatePartitions(creq *server.Request, req *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	twice := topicsNamedTwice(req.Topics, func(rt kmsg.CreatePartitionsRequestTopic) string { return rt.Topic })
	locker := h.adminLocker() // cluster mode: this node's apply of the growth takes adminMu
	locker.Lock()
	defer locker.Unlock()
	cm := h.clusterMeta()
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		err := func() error {
			if twice[rt.Topic] {
				st.ErrorCode = kerr.InvalidRequest.Code
				return errNamedTwice(rt.Topic)
			}
			if !h.allowed(creq, acl.Topic, rt.Topic, acl.Alter) {
				st.ErrorCode = kerr.TopicAuthorizationFailed.Code
				return fmt.Errorf("%s may not alter topic %s", creq.Principal(), rt.Topic)
			}
			for _, a := range rt.Assignment {
				if cm != nil {
					st.ErrorCode = kerr.InvalidReplicaAssignment.Code
					return errors.New("manual assignments are not supported in cluster mode yet: the controller places the new partitions")
				}
				if len(a.Replicas) != 1 || a.Replicas[0] != h.cfg.NodeID {
					st.ErrorCode = kerr.InvalidReplicaAssignment.Code
					return fmt.Errorf("assignments may only name node %d", h.cfg.NodeID)
				}
			}
			if cm != nil {
				return h.growInCluster(cm, rt.Topic, rt.Count, req.ValidateOnly, &st)
			}
			if err := h.checkPartitionLimit(rt.Count); err != nil {
				st.ErrorCode = errorCode(err)
				return err
			}
			if err := h.cfg.Catalog.CheckPartitions(rt.Topic, rt.Count); err != nil {
				st.ErrorCode = errorCode(err)
				return err
			}
			if req.ValidateOnly {
				return nil
			}
			if err := h.growTopicLocked(rt.Topic, rt.Count); err != nil {
				st.ErrorCode = errorCode(err)
				return err
			}
			return nil
		}()
		st.ErrorMessage = errMessage(err)
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// growInCluster is CreatePartitions of one topic in cluster mode: the
// controller's decision (the single node's check, new partitions placed on
// the unfenced brokers), answered once this node applied it; validateOnly
// checks on this node's replica of the quorum.
func (h *Handler) growInCluster(cm ClusterMeta, name string, count int32, validateOnly bool, st *kmsg.CreatePartitionsResponseTopic) error {
	ctx, cancel := clusterChangeContext()
	defer cancel()
	if err := cm.CreatePartitions(ctx, name, count, validateOnly); err != nil {
		st.ErrorCode = errorCode(err)
		return err
	}
	if !validateOnly {
		h.log.Info("partitions added", "topic", name, "partitions", count)
	}
	return nil
}

// growTopicLocked opens the new partitions' logs, records the new count and
// publishes a new topic value (topics are copy-on-write: readers holding
// the old value keep a consistent view).
func (h *Handler) growTopicLocked(name string, count int32) error {
	old := h.lookup(name)
	if old == nil {
		return fmt.Errorf("unknown topic %s", name)
	}
	nt := &topic{meta: old.meta, parts: append([]*plog.Log(nil), old.parts...)}
	nt.meta.Partitions = count
	for p := int32(len(old.parts)); p < count; p++ {
		if err := h.cfg.FS.RemoveAll(h.partitionDir(name, p)); err != nil {
			return err
		}
		l, err := h.openLog(nt.meta, p)
		if err != nil {
			for _, l := range nt.parts[len(old.parts):] {
				l.Close()
			}
			return err
		}
		nt.parts = append(nt.parts, l)
	}
	if err := h.cfg.Catalog.SetPartitions(name, count); err != nil {
		for _, l := range nt.parts[len(old.parts):] {
			l.Close()
		}
		return err
	}
	h.mu.Lock()
	h.topics[name] = nt
	h.byID[nt.meta.ID] = nt
	h.mu.Unlock()
	h.log.Info("partitions added", "topic", name, "partitions", count)
	return nil
}
