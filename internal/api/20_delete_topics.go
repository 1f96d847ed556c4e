package api

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/group"
	"github.com/sushka-io/sushka/internal/meta"
)

// DeleteTopics: v0-6
//
// Behavior:
// * The topic leaves the catalogue first (durably), then its logs are
//   closed and its partition directories removed. A crash in between
//   leaves directories that the next start removes (removeStrayPartitions).
// * Works on a full disk, which is when an operator deletes topics: the
//   catalogue's record takes its space reserve (internal/meta), and
//   removing directories needs no space. This order, the record first, is
//   the one where a crash never leaves a topic that exists without its
//   data: renaming the directories first (to free space before the
//   record) would need the reserve anyway for an empty topic.
// * Produce and fetch racing the deletion get NOT_LEADER_OR_FOLLOWER from
//   the closed log, then UNKNOWN_TOPIC_OR_PARTITION.
//
// Version notes:
// * v1: ThrottleMillis; v4: flexible versions; v5: ErrorMessage
// * v6: topics by name or ID (KIP-516)

func init() { regKey(20, 0, 6) }

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
	h.cfg.Catalog.EnsureReserve() // the space is back
	h.log.Info("topic deleted", "topic", t.meta.Name)
	return nil
}

// removeStrayPartitions removes the partition directories (DATA/NAME-P)
// that the catalogue does not have: what a crash left of a topic deleted
// (the record was durable, the directories not yet removed) or of
// partitions being added (the directories were created, the record not
// yet durable). Nothing acknowledged lives there. It runs in New, before
// any topic is served.
func (h *Handler) removeStrayPartitions() error {
	entries, err := h.cfg.FS.List(h.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", h.cfg.DataDir, err)
	}
	removed := 0
	for _, e := range entries {
		dash := strings.LastIndexByte(e, '-')
		if dash <= 0 {
			continue
		}
		name, partition := e[:dash], e[dash+1:]
		p, err := strconv.ParseInt(partition, 10, 32)
		if err != nil || p < 0 || strconv.FormatInt(p, 10) != partition ||
			name == group.OffsetsTopic || meta.ValidateTopicName(name) != nil {
			continue
		}
		if fi, err := h.cfg.FS.Stat(filepath.Join(h.cfg.DataDir, e)); err != nil || !fi.IsDir() {
			continue
		}
		if mt, ok := h.cfg.Catalog.Topic(name); ok && int32(p) < mt.Partitions {
			continue
		}
		h.log.Warn("removing a partition directory the catalogue does not have (left by a crash during a topic deletion or partition creation)", "dir", e)
		if err := h.cfg.FS.RemoveAll(filepath.Join(h.cfg.DataDir, e)); err != nil {
			return fmt.Errorf("removing the stray partition directory %s: %w", e, err)
		}
		removed++
	}
	if removed > 0 {
		if err := h.cfg.FS.SyncDir(h.cfg.DataDir); err != nil {
			return fmt.Errorf("syncing %s: %w", h.cfg.DataDir, err)
		}
	}
	return nil
}
