package group

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/kvlog"
)

// Keeping the state in memory what the disk holds.
//
// The Ready contract says the driver persists a Ready's records before it
// sends the responses. When it cannot, the state in memory is ahead of the
// disk for the groups whose records were not written, and must come back
// to what is durable before anyone acts on it:
//
//   - a record too large for any batch (a SyncGroup with a huge
//     assignment) fails its group alone: ReloadGroup forgets the group's
//     state and replays its durable records;
//   - a storage error fails a __consumer_offsets partition: UnloadPartition
//     forgets all its groups, and requests for them get NOT_COORDINATOR
//     (as when Kafka moves a partition away) until LoadPartition replays
//     the partition's log, reopened once writes succeed again.
//
// Both answer the requests still waiting in those groups (JoinGroup and
// SyncGroup) with an error code, so no handle is leaked.

// RecordGroup returns the group a __consumer_offsets record belongs to
// (kvlog.KeyOwner).
func RecordGroup(key []byte) (string, error) { return kvlog.KeyOwner(key) }

// forgetGroup drops a group from memory, answering its waiting JoinGroup
// and SyncGroup requests with code.
func (c *Coordinator) forgetGroup(g *group, code int16) {
	for _, m := range g.members {
		if m.joinReply != nil {
			c.respond(m.joinReply.id, joinError(&kmsg.JoinGroupRequest{Version: m.joinReply.version, MemberID: m.id}, code))
			m.joinReply = nil
		}
		if m.syncReply != nil {
			c.respondSyncError(m.syncReply, code)
			m.syncReply = nil
		}
	}
	delete(c.groups, g.name)
}

// startSessions starts the sessions of a replayed group's members at now.
func (c *Coordinator) startSessions(g *group) {
	for _, m := range g.members {
		m.sessionDeadline = c.now.Add(m.sessionTimeout)
	}
	if g.kind == kindConsumer {
		for _, m := range g.cmembers {
			m.sessionDeadline = c.now.Add(c.cfg.ConsumerSessionTimeout)
		}
	}
}

// ReloadGroup replaces the state of group name with what records (its
// durable records, oldest first) give, answering its waiting requests with
// code. Records of other groups are ignored.
func (c *Coordinator) ReloadGroup(name string, records []Record, code int16) error {
	if g := c.groups[name]; g != nil {
		c.forgetGroup(g, code)
	}
	for _, r := range records {
		if g, err := RecordGroup(r.Key); err != nil || g != name {
			continue
		}
		if err := c.apply(r); err != nil {
			return fmt.Errorf("group: reloading %q: %w", name, err)
		}
	}
	if g := c.groups[name]; g != nil {
		c.startSessions(g)
	}
	return nil
}

// UnloadPartition forgets every group of __consumer_offsets partition p,
// answering their waiting requests with NOT_COORDINATOR; requests for
// them get NOT_COORDINATOR (FindCoordinator: COORDINATOR_NOT_AVAILABLE)
// until LoadPartition.
func (c *Coordinator) UnloadPartition(p int32) {
	if c.unloaded == nil {
		c.unloaded = map[int32]bool{}
	}
	c.unloaded[p] = true
	delete(c.loading, p)
	for _, g := range c.sortedGroups() {
		if c.partitionFor(g.name) == p {
			c.forgetGroup(g, kerr.NotCoordinator.Code)
		}
	}
}

// LoadPartition replays the records of partition p (all of its log,
// oldest first) after UnloadPartition and serves its groups again.
func (c *Coordinator) LoadPartition(p int32, records []Record) error {
	for i, r := range records {
		if err := c.apply(r); err != nil {
			return fmt.Errorf("group: __consumer_offsets-%d record %d: %w", p, i, err)
		}
	}
	for _, g := range c.sortedGroups() {
		if c.partitionFor(g.name) == p {
			c.startSessions(g)
		}
	}
	delete(c.unloaded, p)
	delete(c.loading, p)
	return nil
}

// LoadingPartition marks unloaded partition p as being replayed (this
// node was elected its leader): its groups answer
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's while it loads, until
// LoadPartition (or UnloadPartition, the load abandoned).
func (c *Coordinator) LoadingPartition(p int32) {
	if c.unloaded[p] {
		c.loading.Add(p)
	}
}

// requestGroups returns the groups a request reads or changes.
func requestGroups(body kmsg.Request) []string {
	switch req := body.(type) {
	case *kmsg.JoinGroupRequest:
		return []string{req.Group}
	case *kmsg.SyncGroupRequest:
		return []string{req.Group}
	case *kmsg.HeartbeatRequest:
		return []string{req.Group}
	case *kmsg.LeaveGroupRequest:
		return []string{req.Group}
	case *kmsg.OffsetCommitRequest:
		return []string{req.Group}
	case *kmsg.TxnOffsetCommitRequest:
		return []string{req.Group}
	case *kmsg.OffsetDeleteRequest:
		return []string{req.Group}
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return []string{req.Group}
	case *kmsg.DeleteGroupsRequest:
		return req.Groups
	case *kmsg.DescribeGroupsRequest:
		return req.Groups
	case *kmsg.ConsumerGroupDescribeRequest:
		return req.Groups
	case *kmsg.OffsetFetchRequest:
		if req.Version < 8 {
			return []string{req.Group}
		}
		var gs []string
		for _, g := range req.Groups {
			gs = append(gs, g.Group)
		}
		return gs
	}
	return nil
}

// isOffsetKey reports whether a record key is an OffsetCommitKey (versions
// 0 and 1) rather than group metadata.
func isOffsetKey(key []byte) bool {
	if len(key) < 2 {
		return false
	}
	v := binary.BigEndian.Uint16(key)
	return v <= 1 || v == pendingKeyVersion
}

// failedByTooLarge reports whether a request of a group whose records of
// the kinds in dropped (isOffsetKey) were not written must fail: offset
// commits and fetches depend on the offset records only, every other
// request on the group's metadata.
func failedByTooLarge(body kmsg.Request, dropped map[bool]bool) bool {
	switch body.(type) {
	case *kmsg.OffsetCommitRequest, *kmsg.OffsetFetchRequest, *kmsg.TxnOffsetCommitRequest, *kmsg.WriteTxnMarkersRequest:
		return dropped[true]
	}
	return dropped[false]
}

// tooLargeCode is what a request gets when its group's record does not fit
// in a batch, as Kafka's GroupMetadataManager maps MESSAGE_TOO_LARGE and
// RECORD_LIST_TOO_LARGE from the append: INVALID_COMMIT_OFFSET_SIZE for
// offset commits (storeOffsets), UNKNOWN_SERVER_ERROR for the group's
// metadata (storeGroup: SyncGroup, and the others here).
func tooLargeCode(body kmsg.Request) int16 {
	switch body.(type) {
	case *kmsg.OffsetCommitRequest, *kmsg.TxnOffsetCommitRequest:
		return kerr.InvalidCommitOffsetSize.Code
	}
	return kerr.UnknownServerError.Code
}
