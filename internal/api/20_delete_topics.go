package api

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// DeleteTopics: v0-6
//
// Behavior:
// * The logs are closed, the partition directories renamed to
//   NAME-P.ID-delete, the removal recorded in the catalogue, then the
//   directories removed (deleteTopicLocked): a crash anywhere leaves the
//   whole topic or none of it after the next start (finishDeletions).
// * Works on a full disk, which is when an operator deletes topics: a
//   rename and a removal need no space, and the catalogue's record takes
//   its space reserve (internal/meta).
// * Produce and fetch racing the deletion get NOT_LEADER_OR_FOLLOWER from
//   the closed log, then UNKNOWN_TOPIC_OR_PARTITION.
//
// Version notes:
// * v1: ThrottleMillis; v4: flexible versions; v5: ErrorMessage
// * v6: topics by name or ID (KIP-516)

func init() { regKey(20, 0, 6, replyingFor((*Handler).handleDeleteTopics)) }

func (h *Handler) handleDeleteTopics(creq *server.Request, req *kmsg.DeleteTopicsRequest) kmsg.Response {
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

	locker := h.adminLocker() // cluster mode: this node's apply of the removal takes adminMu
	locker.Lock()
	defer locker.Unlock()
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		var t *topic
		if tg.name != nil {
			t = h.lookup(*tg.name)
		} else {
			t = h.lookupID(tg.id)
		}
		name := ""
		if tg.name != nil {
			name = *tg.name
		}
		if h.topicDenied(creq, t, name, acl.Delete) {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
			continue
		}
		if t == nil {
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if tg.name == nil {
				st.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, st)
			continue
		}
		name = t.meta.Name
		st.Topic, st.TopicID = &name, t.meta.ID
		if err := h.deleteTopic(t); err != nil {
			st.ErrorCode = errorCode(err)
			if req.Version >= 5 {
				st.ErrorMessage = errMessage(err)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// deleteTopic deletes t: here (adminMu held), or through the quorum in
// cluster mode, answered once this node has applied the removal (its
// replicas closed and removed by TopicRemoved).
func (h *Handler) deleteTopic(t *topic) error {
	cm := h.clusterMeta()
	if cm == nil {
		return h.deleteTopicLocked(t)
	}
	if meta.IsInternalTopic(t.meta.Name) {
		// Each node's own until they are replicated (docs/replication.md 4b).
		return fmt.Errorf("%w: %s is internal", meta.ErrInvalidTopic, t.meta.Name)
	}
	ctx, cancel := clusterChangeContext()
	defer cancel()
	return cm.DeleteTopic(ctx, t.meta.Name)
}

// deletedSuffix ends the name of a partition directory being deleted:
// DATA/NAME-P.<topic id in hex>-delete, as Kafka names them.
const deletedSuffix = "-delete"

// deletedDir is the name partition p's directory takes while its topic is
// being deleted.
func (h *Handler) deletedDir(mt meta.Topic, p int32) string {
	return h.partitionDir(mt.Name, p) + "." + hex.EncodeToString(mt.ID[:]) + deletedSuffix
}

// deleteTopicLocked deletes a topic in an order that is safe at every
// crash and needs no free space:
//
//  1. the topic is unpublished and its logs closed;
//  2. each partition directory is renamed to its deletedDir name, and the
//     data directory synced (a rename takes no new blocks);
//  3. the catalogue records the removal (on a full disk its record takes
//     the catalogue's space reserve): the deletion is acknowledged;
//  4. the directories are removed, which frees the space.
//
// A crash before 3 leaves renamed directories of a topic the catalogue
// still has: finishDeletions renames them back at the next start, the
// topic is whole. A crash after 3 leaves renamed directories of a topic
// the catalogue no longer has: finishDeletions removes them. If 2 or 3
// fails, the renames are undone and the topic serves again.
func (h *Handler) deleteTopicLocked(t *topic) error {
	mt := t.meta
	h.mu.Lock()
	delete(h.topics, mt.Name)
	delete(h.byID, mt.ID)
	h.mu.Unlock()
	for p := range t.parts { // nil parts: partitions this node does not hold (cluster mode)
		if err := t.closePartition(int32(p)); err != nil {
			h.log.Warn("closing a deleted topic's partition", "topic", mt.Name, "partition", p, "err", err)
		}
	}
	renamed := 0
	undo := func(cause error) error {
		for p := int32(0); p < int32(renamed); p++ {
			if err := h.cfg.FS.Rename(h.deletedDir(mt, p), h.partitionDir(mt.Name, p)); err != nil {
				h.log.Error("undoing a failed topic deletion: a partition directory keeps its deleted name until the next start", "topic", mt.Name, "partition", p, "err", err)
			}
		}
		h.cfg.FS.SyncDir(h.cfg.DataDir)
		nt := &topic{meta: mt}
		for p := int32(0); p < mt.Partitions; p++ {
			if int(p) < len(t.parts) && t.parts[p] == nil {
				nt.parts = append(nt.parts, nil) // not held here
				continue
			}
			l, err := h.openLog(mt, p)
			if err != nil {
				l = plog.Failed(h.logConfig(mt, p), err)
			}
			nt.parts = append(nt.parts, l)
		}
		h.mu.Lock()
		h.topics[mt.Name] = nt
		h.byID[mt.ID] = nt
		h.mu.Unlock()
		return cause
	}
	for p := int32(0); p < mt.Partitions; p++ {
		if err := h.cfg.FS.Rename(h.partitionDir(mt.Name, p), h.deletedDir(mt, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return undo(fmt.Errorf("renaming a partition directory for deletion: %w", err))
		}
		renamed++
	}
	if err := h.cfg.FS.SyncDir(h.cfg.DataDir); err != nil {
		return undo(fmt.Errorf("syncing %s: %w", h.cfg.DataDir, err))
	}
	if h.clusterMode() {
		// The quorum's log has the removal (TopicRemoved applies it): a
		// crash here leaves renamed directories of a topic it no longer
		// has, removed at the next start (finishDeletions).
	} else if err := h.cfg.Catalog.DeleteTopic(mt.Name); err != nil {
		return undo(err)
	}
	for p := int32(0); p < mt.Partitions; p++ {
		if err := h.cfg.FS.RemoveAll(h.deletedDir(mt, p)); err != nil {
			h.log.Warn("removing a deleted topic's partition directory failed; the next start retries", "topic", mt.Name, "partition", p, "err", err)
		}
	}
	if err := h.cfg.FS.SyncDir(h.cfg.DataDir); err != nil {
		h.log.Warn("syncing the data directory after a deletion failed", "err", err)
	}
	h.cfg.Catalog.EnsureReserve() // the space is back
	h.log.Info("topic deleted", "topic", mt.Name)
	return nil
}

// finishDeletions completes or undoes the deletions a crash interrupted
// (see deleteTopicLocked): a directory with a deleted name whose topic ID
// the catalogue still has is renamed back, one whose topic is gone is
// removed. Partition directories the catalogue does not know under their
// plain names are left alone with a warning (they are not ours to delete:
// a copy from elsewhere, a catalogue restored from a backup); creating a
// topic of that name replaces them. It runs in New, before any topic is
// served.
func (h *Handler) finishDeletions() error {
	entries, err := h.cfg.FS.List(h.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", h.cfg.DataDir, err)
	}
	changed := false
	for _, e := range entries {
		path := filepath.Join(h.cfg.DataDir, e)
		if fi, err := h.cfg.FS.Stat(path); err != nil || !fi.IsDir() {
			continue
		}
		if dot := strings.LastIndexByte(e, '.'); strings.HasSuffix(e, deletedSuffix) && dot > 0 {
			var id [16]byte
			hexID := strings.TrimSuffix(e[dot+1:], deletedSuffix)
			if n, err := hex.Decode(id[:], []byte(hexID)); err != nil || n != len(id) || len(hexID) != 2*len(id) {
				continue
			}
			if mt, ok := h.cfg.Catalog.TopicByID(id); ok {
				// The removal was never recorded: the topic lives.
				if err := h.cfg.FS.Rename(path, filepath.Join(h.cfg.DataDir, e[:dot])); err != nil {
					return fmt.Errorf("restoring %s of topic %s: %w", e, mt.Name, err)
				}
				h.log.Warn("restored a partition directory of a topic whose deletion a crash interrupted before it was recorded", "dir", e, "topic", mt.Name)
			} else {
				if err := h.cfg.FS.RemoveAll(path); err != nil {
					return fmt.Errorf("removing %s: %w", e, err)
				}
				h.log.Info("removed a deleted topic's partition directory that a crash left", "dir", e)
			}
			changed = true
			continue
		}
		dash := strings.LastIndexByte(e, '-')
		if dash <= 0 {
			continue
		}
		name, partition := e[:dash], e[dash+1:]
		p, err := strconv.ParseInt(partition, 10, 32)
		if err != nil || p < 0 || strconv.FormatInt(p, 10) != partition ||
			meta.IsInternalTopic(name) || meta.ValidateTopicName(name) != nil {
			continue
		}
		if h.clusterMode() || name == MetadataTopic {
			continue // the quorum's log, and its topics' partitions: opened by its apply (cluster.go)
		}
		if mt, ok := h.cfg.Catalog.Topic(name); !ok || int32(p) >= mt.Partitions {
			h.log.Warn("a partition directory that the catalogue does not have is left alone (creating the topic replaces it)", "dir", e)
		}
	}
	if changed {
		if err := h.cfg.FS.SyncDir(h.cfg.DataDir); err != nil {
			return fmt.Errorf("syncing %s: %w", h.cfg.DataDir, err)
		}
	}
	return nil
}
