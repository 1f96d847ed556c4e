package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/group"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/txn"
)

// The group API keys (08, 09, 10, 11, 12, 13, 14, 15, 16, 42, 47, 68, 69)
// are served by the group coordinator (internal/group): a state machine
// driven by one goroutine that owns it and the __consumer_offsets log
// (DATA/__consumer_offsets-0/). The handlers here only hand the decoded
// request to that driver and wait for its answer, which a JoinGroup or
// SyncGroup gets when the rebalance completes, and an OffsetCommit once the
// commit is fsync'd.

// startGroups opens __consumer_offsets, replays it and starts the driver.
func (h *Handler) startGroups() error {
	svc, err := group.Start(group.ServiceConfig{
		FS:        h.cfg.FS,
		DataDir:   h.cfg.DataDir,
		Logger:    h.log.With("component", "group-coordinator"),
		WritePath: h.cfg.WritePath,
		Coordinator: group.Config{
			NodeID: h.cfg.NodeID,
			Topics: groupTopics{h},
		},
	})
	if err != nil {
		return err
	}
	h.groups = svc
	host, port := h.advertisedAddr(nil)
	svc.SetAddress(host, port)
	return nil
}

// closeGroups closes the group coordinator. h.groups stays set (handlers
// read it without a lock, and one may still be running when Close is
// reached at a shutdown whose deadline passed): a closed Service answers
// ErrClosed, which handleGroup turns into COORDINATOR_NOT_AVAILABLE, and its
// partition count stays readable.
func (h *Handler) closeGroups() error {
	if h.groups == nil {
		return nil
	}
	return h.groups.Close()
}

// Groups is the group coordinator service (tests, admin).
func (h *Handler) Groups() *group.Service { return h.groups }

// groupTopics shows the coordinator the open topics and __consumer_offsets
// (KIP-848 regex subscriptions match internal topics too, as in Kafka).
type groupTopics struct{ h *Handler }

func (g groupTopics) Partitions(name string) ([16]byte, int32, bool) {
	if name == group.OffsetsTopic {
		return g.h.offsetsTopicID(), g.offsetsPartitions(), true
	}
	t := g.h.lookup(name)
	if t == nil {
		return [16]byte{}, 0, false
	}
	return t.meta.ID, int32(len(t.parts)), true
}

func (g groupTopics) TopicByID(id [16]byte) (string, int32, bool) {
	t := g.h.lookupID(id)
	if t == nil {
		if id == g.h.offsetsTopicID() {
			return group.OffsetsTopic, g.offsetsPartitions(), true
		}
		return "", 0, false
	}
	return t.meta.Name, int32(len(t.parts)), true
}

// TopicNames implements group.TopicLister.
func (g groupTopics) TopicNames() []string {
	g.h.mu.RLock()
	names := make([]string, 0, len(g.h.topics)+1)
	for name := range g.h.topics {
		names = append(names, name)
	}
	g.h.mu.RUnlock()
	return append(names, group.OffsetsTopic)
}

// offsetsPartitions is the partition count of __consumer_offsets (fixed at
// start; h.groups is set before the first request and never changes).
func (g groupTopics) offsetsPartitions() int32 {
	if svc := g.h.groups; svc != nil {
		return svc.Store().Partitions()
	}
	return 1
}

// viaCoordinator is the handler registered by every group API key's file:
// the coordinator decodes nothing more and answers each key itself.
func viaCoordinator[Req kmsg.Request](h *Handler, ctx context.Context, creq *server.Request, _ Req) server.Response {
	return h.authorizedCoordinated(creq, func() server.Response { return h.handleGroup(ctx, creq) })
}

// handleGroup hands a group request to the coordinator and waits for its
// response. A connection that closes abandons the wait.
func (h *Handler) handleGroup(ctx context.Context, req *server.Request) server.Response {
	host := ""
	if req.Remote != nil {
		host = req.Remote.String()
		if ip, _, err := net.SplitHostPort(host); err == nil {
			host = ip
		}
		host = "/" + host // Kafka's client host format
	}
	svc := h.groups
	if svc == nil {
		return errorReply(req.Body, kerr.CoordinatorNotAvailable.Code)
	}
	waited := req.Accounting.WaitStart() // the driver's time, not the request's (throttle.go)
	resp, err := svc.Do(ctx, req.ClientID, host, req.Body)
	req.Accounting.WaitEnd(waited)
	if err != nil {
		if errors.Is(err, group.ErrClosed) {
			return errorReply(req.Body, kerr.CoordinatorNotAvailable.Code)
		}
		return server.Response{None: true, Close: true} // the connection is gone
	}
	return reply(resp)
}

// offsetsTopicID is __consumer_offsets' ID (internalTopicID).
func (h *Handler) offsetsTopicID() [16]byte { return h.internalTopicID(group.OffsetsTopic) }

// internalTopicID is an internal topic's ID: fixed for a cluster, derived
// from the cluster ID.
func (h *Handler) internalTopicID(name string) [16]byte {
	sum := sha256.Sum256([]byte(h.cfg.Catalog.ClusterID() + "/" + name))
	var id [16]byte
	copy(id[:], sum[:16])
	return id
}

// internalTopics are the internal topics open now, in name order, with
// their partition counts: each is its coordinator's store.
func (h *Handler) internalTopics() (names []string, partitions []int32) {
	if svc := h.groups; svc != nil {
		names, partitions = append(names, group.OffsetsTopic), append(partitions, svc.Store().Partitions())
	}
	if svc := h.txns; svc != nil {
		names, partitions = append(names, txn.StateTopic), append(partitions, svc.Store().Partitions())
	}
	return names, partitions
}

// internalTopicMetadata is an internal topic in a Metadata response, led
// by this node; false if it is not open (or not internal).
func (h *Handler) internalTopicMetadata(name string) (kmsg.MetadataResponseTopic, bool) {
	names, partitions := h.internalTopics()
	for i, n := range names {
		if n != name {
			continue
		}
		st := kmsg.NewMetadataResponseTopic()
		st.Topic = &names[i]
		st.TopicID = h.internalTopicID(name)
		st.IsInternal = true
		for p := int32(0); p < partitions[i]; p++ {
			st.Partitions = append(st.Partitions, h.metadataPartition(nil, p))
		}
		return st, true
	}
	return kmsg.MetadataResponseTopic{}, false
}
