package group

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp"
)

// Transactional offsets (KIP-98, KIP-447).
//
// TxnOffsetCommit does not commit: the offsets are pending for (group,
// producer id) until the transaction ends. The transaction coordinator
// (internal/txn) writes the transaction's marker to the group's
// __consumer_offsets partition as a WriteTxnMarkers request handled here:
// a commit makes the producer's pending offsets the group's committed ones,
// an abort drops them. Until then OffsetFetch shows the committed offsets,
// and with RequireStable answers UNSTABLE_OFFSET_COMMIT for a partition
// with a pending one.
//
// Pending offsets are durable from the TxnOffsetCommit on, in records of a
// key schema of Sushka's own (pendingKeyVersion: the key's version, the
// group and the producer id first, then topic and partition; the value an
// OffsetCommitValue). Kafka writes them as OffsetCommit records in the
// producer's transactional batches resolved by a control batch; this log's
// batches are the store's own (non-idempotent) ones, and a pending offset
// has to survive compaction by snapshot, which replays live keys only. The
// marker's commit rewrites each as an OffsetCommit record (Kafka's schema)
// and tombstones the pending key, in one batch of the group's records.

// pendingKeyVersion is the version of the pending transactional offset's
// key: far from Kafka's (0-2 and KIP-848's 3-16).
const pendingKeyVersion = 0x7f00

// markedEpoch is the epoch of a producer's last transaction marker, and
// when it came.
type markedEpoch struct {
	epoch int16
	at    time.Time
}

// markedEpochRetention is how long a producer's last marker epoch is kept:
// a TxnOffsetCommit older than the longest transaction
// (transaction.max.timeout.ms) cannot be in flight any more.
const markedEpochRetention = time.Hour

// expireMarkedEpochs forgets the marker epochs older than
// markedEpochRetention (the table grows with every producer id).
func (c *Coordinator) expireMarkedEpochs() {
	for pid, m := range c.markedEpochs {
		if c.now.Sub(m.at) > markedEpochRetention {
			delete(c.markedEpochs, pid)
		}
	}
}

// pendingTxn is a producer's transactional offsets in one group.
type pendingTxn map[topicPartition]committedOffset

func pendingKey(groupName string, producerID int64, tp topicPartition) []byte {
	b := binary.BigEndian.AppendUint16(nil, pendingKeyVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(len(groupName)))
	b = append(b, groupName...)
	b = binary.BigEndian.AppendUint64(b, uint64(producerID))
	b = binary.BigEndian.AppendUint16(b, uint16(len(tp.topic)))
	b = append(b, tp.topic...)
	return binary.BigEndian.AppendUint32(b, uint32(tp.partition))
}

func parsePendingKey(key []byte) (groupName string, producerID int64, tp topicPartition, err error) {
	groupName, err = RecordGroup(key)
	if err != nil {
		return "", 0, tp, err
	}
	rest := key[4+len(groupName):]
	if len(rest) < 10 {
		return "", 0, tp, fmt.Errorf("pending offset key of %d bytes", len(key))
	}
	producerID = int64(binary.BigEndian.Uint64(rest))
	n := int(binary.BigEndian.Uint16(rest[8:]))
	if len(rest) != 10+n+4 {
		return "", 0, tp, fmt.Errorf("pending offset key of %d bytes", len(key))
	}
	tp.topic = string(rest[10 : 10+n])
	tp.partition = int32(binary.BigEndian.Uint32(rest[10+n:]))
	return groupName, producerID, tp, nil
}

func (c *Coordinator) pendingRecord(groupName string, producerID int64, tp topicPartition, o *committedOffset) Record {
	r := Record{Partition: c.partitionFor(groupName), Key: pendingKey(groupName, producerID, tp)}
	if o != nil {
		v := kmsg.OffsetCommitValue{Version: offsetValueVersion, Offset: o.offset, LeaderEpoch: o.leaderEpoch, Metadata: o.metadata, CommitTimestamp: o.commitTimestamp}
		r.Value = v.AppendTo(nil)
	}
	return r
}

// applyPending replays a pending offset record.
func (c *Coordinator) applyPending(r Record) error {
	name, pid, tp, err := parsePendingKey(r.Key)
	if err != nil {
		return err
	}
	g := c.groups[name]
	if r.Value == nil {
		if g != nil {
			g.dropPending(pid, tp)
		}
		return nil
	}
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(r.Value); err != nil {
		return fmt.Errorf("pending offset value: %w", err)
	}
	if g == nil {
		g = newGroup(name)
		c.groups[name] = g
	}
	g.addPending(pid, tp, committedOffset{offset: v.Offset, leaderEpoch: v.LeaderEpoch, metadata: v.Metadata, commitTimestamp: v.CommitTimestamp})
	return nil
}

func (g *group) addPending(pid int64, tp topicPartition, o committedOffset) {
	if g.pendingTxns == nil {
		g.pendingTxns = map[int64]pendingTxn{}
	}
	p := g.pendingTxns[pid]
	if p == nil {
		p = pendingTxn{}
		g.pendingTxns[pid] = p
	}
	p[tp] = o
}

func (g *group) dropPending(pid int64, tp topicPartition) {
	if p := g.pendingTxns[pid]; p != nil {
		delete(p, tp)
		if len(p) == 0 {
			delete(g.pendingTxns, pid)
		}
	}
}

// hasPending reports whether any producer has a pending offset for tp.
func (g *group) hasPending(tp topicPartition) bool {
	if g == nil {
		return false
	}
	for _, p := range g.pendingTxns {
		if _, ok := p[tp]; ok {
			return true
		}
	}
	return false
}

// validateTxnCommit is KIP-447's fencing of a TxnOffsetCommit from a group
// member (v3+; older versions carry no member): a member id that is set
// must be the group's, a static instance its current one, a generation
// that is set the group's (the member's epoch in a KIP-848 group).
func (g *group) validateTxnCommit(req *kmsg.TxnOffsetCommitRequest) int16 {
	if req.Version < 3 {
		return 0
	}
	if g.kind == kindConsumer {
		if req.MemberID == "" && req.Generation < 0 {
			return 0
		}
		m := g.cmember(req.MemberID)
		if m == nil {
			return kerr.UnknownMemberID.Code
		}
		if req.Generation != m.epoch {
			return kerr.IllegalGeneration.Code
		}
		return 0
	}
	if req.InstanceID != nil {
		if known, ok := g.static[*req.InstanceID]; ok && known != req.MemberID {
			return kerr.FencedInstanceID.Code
		}
	}
	if req.MemberID != "" && g.member(req.MemberID) == nil {
		return kerr.UnknownMemberID.Code
	}
	if req.Generation >= 0 && req.Generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	return 0
}

func fillTxnCommit(req *kmsg.TxnOffsetCommitRequest, resp *kmsg.TxnOffsetCommitResponse, code int16) {
	resp.Topics = append(resp.Topics, errresp.For(req, code).(*kmsg.TxnOffsetCommitResponse).Topics...)
}

// txnOffsetCommit stores the request's offsets as pending for its
// producer. The transaction coordinator has verified, before, that the
// group's partition is in the producer's ongoing transaction at this epoch.
func (c *Coordinator) txnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	if code := c.checkGroup(req.Group); code != 0 {
		fillTxnCommit(req, resp, code)
		return resp
	}
	g := c.groups[req.Group]
	if g == nil {
		if req.Version >= 3 && req.Generation >= 0 {
			fillTxnCommit(req, resp, kerr.IllegalGeneration.Code)
			return resp
		}
		g = newGroup(req.Group)
		c.groups[req.Group] = g
	}
	if code := g.validateTxnCommit(req); code != 0 {
		fillTxnCommit(req, resp, code)
		return resp
	}
	if m, ok := c.markedEpochs[req.ProducerID]; ok && req.ProducerEpoch < m.epoch {
		// Late: a transaction of a newer epoch (a timeout's fencing abort,
		// a KIP-890 bump) has ended here since; its offsets would stay
		// pending for ever. PRODUCER_FENCED from v3 (KIP-588).
		code := kerr.ProducerFenced.Code
		if req.Version < 3 {
			code = kerr.InvalidProducerEpoch.Code
		}
		fillTxnCommit(req, resp, code)
		return resp
	}
	for _, t := range req.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = t.Topic
		_, partitions, known := [16]byte{}, int32(-1), c.cfg.Topics == nil
		if c.cfg.Topics != nil {
			_, partitions, known = c.cfg.Topics.Partitions(t.Topic)
		}
		for _, p := range t.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			epoch := p.LeaderEpoch
			if req.Version < 2 {
				epoch = -1
			}
			o, code := c.commitOffset(known, partitions, p.Partition, p.Offset, epoch, p.Metadata)
			if sp.ErrorCode = code; code == 0 {
				tp := topicPartition{t.Topic, p.Partition}
				g.addPending(req.ProducerID, tp, o)
				c.persist(c.pendingRecord(g.name, req.ProducerID, tp, &o))
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// writeTxnMarkers ends transactions in __consumer_offsets partitions: for
// each marker, the producer's pending offsets in every group of each named
// partition are committed or dropped.
func (c *Coordinator) writeTxnMarkers(req *kmsg.WriteTxnMarkersRequest) *kmsg.WriteTxnMarkersResponse {
	return errresp.WriteTxnMarkers(req, func(m *kmsg.WriteTxnMarkersRequestMarker, topic string, p int32) int16 {
		switch {
		case topic != OffsetsTopic || p < 0 || p >= c.cfg.OffsetsPartitions:
			return kerr.UnknownTopicOrPartition.Code
		case c.loading[p]:
			return kerr.CoordinatorLoadInProgress.Code
		case c.cfg.Owns != nil && !c.cfg.Owns(p) || c.unloaded[p]:
			return kerr.NotCoordinator.Code
		case !c.loaded:
			return kerr.CoordinatorLoadInProgress.Code
		}
		c.endPending(p, m.ProducerID, m.Committed)
		c.noteMarkedEpoch(m.ProducerID, m.ProducerEpoch)
		return 0
	})
}

func (c *Coordinator) noteMarkedEpoch(pid int64, epoch int16) {
	if c.markedEpochs == nil {
		c.markedEpochs = map[int64]markedEpoch{}
	}
	if m, ok := c.markedEpochs[pid]; !ok || epoch >= m.epoch {
		c.markedEpochs[pid] = markedEpoch{epoch: epoch, at: c.now}
	}
}

// endPending commits (or drops) producer pid's pending offsets in the
// groups of partition p.
func (c *Coordinator) endPending(p int32, pid int64, commit bool) {
	for _, g := range c.sortedGroups() {
		pending := g.pendingTxns[pid]
		if c.partitionFor(g.name) != p || pending == nil {
			continue
		}
		for _, tp := range (&group{offsets: pending}).sortedOffsets() {
			if commit {
				o := pending[tp]
				g.offsets[tp] = o
				c.persist(c.offsetRecord(g.name, tp, &o))
			}
			c.persist(c.pendingRecord(g.name, pid, tp, nil))
		}
		delete(g.pendingTxns, pid)
	}
}
