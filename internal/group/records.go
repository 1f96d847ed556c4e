package group

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record key and value versions Sushka writes (Kafka's, for a broker with
// no KIP-848 records in the classic schemas).
const (
	offsetKeyVersion   = 1 // OffsetCommitKey; 0 is read the same
	groupKeyVersion    = 2 // GroupMetadataKey
	offsetValueVersion = 3 // OffsetCommitValue with the leader epoch
	groupValueVersion  = 3 // GroupMetadataValue with group.instance.id
)

func (c *Coordinator) offsetRecord(groupName string, tp topicPartition, o *committedOffset) Record {
	key := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: groupName, Topic: tp.topic, Partition: tp.partition}
	r := Record{Partition: c.partitionFor(groupName), Key: key.AppendTo(nil)}
	if o != nil {
		v := kmsg.OffsetCommitValue{
			Version:         offsetValueVersion,
			Offset:          o.offset,
			LeaderEpoch:     o.leaderEpoch,
			Metadata:        o.metadata,
			CommitTimestamp: o.commitTimestamp,
		}
		r.Value = v.AppendTo(nil)
	}
	return r
}

func (c *Coordinator) groupRecord(groupName string, v *kmsg.GroupMetadataValue) Record {
	key := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: groupName}
	r := Record{Partition: c.partitionFor(groupName), Key: key.AppendTo(nil)}
	if v != nil {
		r.Value = v.AppendTo(nil)
	}
	return r
}

// persistGroup writes the classic group's metadata: generation, protocol,
// leader, and every member with its subscription and assignment.
func (c *Coordinator) persistGroup(g *group) {
	v := kmsg.GroupMetadataValue{
		Version:               groupValueVersion,
		ProtocolType:          g.protocolType,
		Generation:            g.generation,
		CurrentStateTimestamp: c.now.UnixMilli(),
	}
	if g.protocol != "" {
		v.Protocol = kmsg.StringPtr(g.protocol)
	}
	if g.leader != "" {
		v.Leader = kmsg.StringPtr(g.leader)
	}
	for _, m := range g.members {
		v.Members = append(v.Members, kmsg.GroupMetadataValueMember{
			MemberID:               m.id,
			InstanceID:             m.instanceID,
			ClientID:               m.clientID,
			ClientHost:             m.clientHost,
			RebalanceTimeoutMillis: ms(m.rebalanceTimeout),
			SessionTimeoutMillis:   ms(m.sessionTimeout),
			Subscription:           nonNil(m.metadata(g.protocol)),
			Assignment:             nonNil(m.assignment),
		})
	}
	c.persist(c.groupRecord(g.name, &v))
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Load replays records of __consumer_offsets, oldest first: the last
// record of a key wins, a tombstone deletes. Records of schemas Sushka does
// not keep (KIP-848 group records, transactions) are skipped. A group
// comes back Stable with its members and assignments (their sessions start
// at Loaded), or Empty.
func (c *Coordinator) Load(records []Record) error {
	for i, r := range records {
		if err := c.apply(r); err != nil {
			return fmt.Errorf("group: __consumer_offsets-%d record %d: %w", r.Partition, i, err)
		}
	}
	return nil
}

func (c *Coordinator) apply(r Record) error {
	if len(r.Key) < 2 {
		return errors.New("key shorter than its version")
	}
	switch version := int16(binary.BigEndian.Uint16(r.Key)); version {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(r.Key); err != nil {
			return fmt.Errorf("offset commit key: %w", err)
		}
		g := c.groups[k.Group]
		tp := topicPartition{k.Topic, k.Partition}
		if r.Value == nil {
			if g != nil {
				delete(g.offsets, tp)
			}
			return nil
		}
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(r.Value); err != nil {
			return fmt.Errorf("offset commit value: %w", err)
		}
		if g == nil {
			g = newGroup(k.Group)
			c.groups[k.Group] = g
		}
		leaderEpoch := v.LeaderEpoch
		if v.Version < 3 {
			leaderEpoch = -1
		}
		g.offsets[tp] = committedOffset{offset: v.Offset, leaderEpoch: leaderEpoch, metadata: v.Metadata, commitTimestamp: v.CommitTimestamp}
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(r.Key); err != nil {
			return fmt.Errorf("group metadata key: %w", err)
		}
		if r.Value == nil {
			delete(c.groups, k.Group)
			return nil
		}
		var v kmsg.GroupMetadataValue
		if err := v.ReadFrom(r.Value); err != nil {
			return fmt.Errorf("group metadata value: %w", err)
		}
		g := c.groups[k.Group]
		if g == nil {
			g = newGroup(k.Group)
			c.groups[k.Group] = g
		}
		g.kind = kindClassic
		g.protocolType, g.generation = v.ProtocolType, v.Generation
		g.protocol, g.leader = "", ""
		if v.Protocol != nil {
			g.protocol = *v.Protocol
		}
		if v.Leader != nil {
			g.leader = *v.Leader
		}
		g.members, g.static = nil, map[string]string{}
		for _, vm := range v.Members {
			m := &member{
				id:               vm.MemberID,
				instanceID:       vm.InstanceID,
				clientID:         vm.ClientID,
				clientHost:       vm.ClientHost,
				sessionTimeout:   msDuration(vm.SessionTimeoutMillis),
				rebalanceTimeout: msDuration(vm.RebalanceTimeoutMillis),
				protocols:        []kmsg.JoinGroupRequestProtocol{{Name: g.protocol, Metadata: vm.Subscription}},
				assignment:       vm.Assignment,
			}
			if v.Version < 1 {
				m.rebalanceTimeout = m.sessionTimeout
			}
			g.members = append(g.members, m)
			if m.instanceID != nil {
				g.static[*m.instanceID] = m.id
			}
		}
		g.state = stateEmpty
		if len(g.members) > 0 {
			g.state = stateStable
		}
	case pendingKeyVersion:
		return c.applyPending(r)
	default:
		// KIP-848 records: not kept by this version.
	}
	return nil
}
