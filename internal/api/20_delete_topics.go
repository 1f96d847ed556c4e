package api

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics: v0-6
//
// Behavior:
// * The topic leaves the catalogue first (durably), then its logs are
//   closed and its partition directories removed. A crash in between
//   leaves directories that the next creation of the name removes.
// * Produce and fetch racing the deletion get NOT_LEADER_OR_FOLLOWER from
//   the closed log, then UNKNOWN_TOPIC_OR_PARTITION.
//
// Version notes:
// * v1: ThrottleMillis; v4: flexible versions; v5: ErrorMessage
// * v6: topics by name or ID (KIP-516)

func init() { regKey(20, 0, 6, replying((*Handler).handleDeleteTopics)) }

func (h *Handler) handleDeleteTopics(req *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.Version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			targets = append(targets, target{name: &n})
		}
	}

	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		var t *topic
		if tg.name != nil {
			t = h.lookup(*tg.name)
		} else {
			t = h.lookupID(tg.id)
		}
		if t == nil {
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if tg.name == nil {
				st.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, st)
			continue
		}
		name := t.meta.Name
		st.Topic, st.TopicID = &name, t.meta.ID
		if err := h.deleteTopicLocked(t); err != nil {
			st.ErrorCode = errorCode(err)
			if req.Version >= 5 {
				st.ErrorMessage = errMessage(err)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func (h *Handler) deleteTopicLocked(t *topic) error {
	if err := h.cfg.Catalog.DeleteTopic(t.meta.Name); err != nil {
		return err
	}
	h.mu.Lock()
	delete(h.topics, t.meta.Name)
	delete(h.byID, t.meta.ID)
	h.mu.Unlock()
	for p, l := range t.parts {
		l.Close()
		if err := h.cfg.FS.RemoveAll(h.partitionDir(t.meta.Name, int32(p))); err != nil {
			h.log.Warn("removing a deleted topic's partition directory failed", "topic", t.meta.Name, "partition", p, "err", err)
		}
	}
	if err := h.cfg.FS.SyncDir(h.cfg.DataDir); err != nil {
		return fmt.Errorf("syncing %s: %w", h.cfg.DataDir, err)
	}
	h.log.Info("topic deleted", "topic", t.meta.Name)
	return nil
}
