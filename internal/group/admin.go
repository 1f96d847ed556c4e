package group

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/coordloop"
)

// --- FindCoordinator ---

// Coordinator key types.
const (
	keyTypeGroup       = 0
	keyTypeTransaction = 1
)

func (c *Coordinator) findCoordinator(req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	return coordloop.FindCoordinator(req, c.cfg.NodeID, c.cfg.Host, c.cfg.Port, func(key string) int16 {
		switch {
		case req.CoordinatorType != keyTypeGroup && req.CoordinatorType != keyTypeTransaction:
			return kerr.InvalidRequest.Code
		case req.CoordinatorType == keyTypeTransaction:
			// The transaction coordinator's (internal/txn): the API
			// layer routes these there.
			return kerr.CoordinatorNotAvailable.Code
		case c.cfg.Owns != nil && !c.cfg.Owns(c.partitionFor(key)) || c.unloaded[c.partitionFor(key)]:
			return kerr.CoordinatorNotAvailable.Code
		case !c.loaded:
			return kerr.CoordinatorNotAvailable.Code
		}
		return 0
	})
}

// --- ListGroups ---

func (c *Coordinator) listGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if !c.loaded {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	matches := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if strings.EqualFold(f, v) {
				return true
			}
		}
		return false
	}
	for _, g := range c.sortedGroups() {
		if c.cfg.Owns != nil && !c.cfg.Owns(c.partitionFor(g.name)) {
			continue
		}
		if !matches(req.StatesFilter, g.stateName()) || !matches(req.TypesFilter, g.kind.String()) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group = g.name
		lg.ProtocolType = g.protocolType
		lg.GroupState = g.stateName()
		lg.GroupType = g.kind.String()
		resp.Groups = append(resp.Groups, lg)
	}
	if len(c.unloaded) > 0 {
		// A partition unloaded after a storage error is reloading
		// (reload.go) and its groups are missing here: say so, as Kafka
		// does while loading (COORDINATOR_LOAD_IN_PROGRESS with the groups
		// already served; clients retry it), never success with groups
		// silently left out.
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
	}
	return resp
}

// --- DescribeGroups ---

func (c *Coordinator) describeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		if dg.ErrorCode = c.checkCoordinator(name); dg.ErrorCode != 0 {
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		g := c.groups[name]
		switch {
		case g == nil:
			dg.State = stateDead.String()
			if req.Version >= 6 {
				dg.ErrorCode = kerr.GroupIDNotFound.Code
				msg := "Group " + name + " not found."
				dg.ErrorMessage = &msg
			}
		case g.kind == kindConsumer:
			// Kafka: a KIP-848 group is described by
			// ConsumerGroupDescribe.
			dg.State = stateDead.String()
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			if req.Version >= 6 {
				msg := "Group " + name + " is not a classic group."
				dg.ErrorMessage = &msg
			}
		default:
			dg.State = g.state.String()
			dg.ProtocolType = g.protocolType
			stable := g.state == stateStable
			if stable {
				dg.Protocol = g.protocol
			}
			for _, m := range g.members {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
				dm.ProtocolMetadata, dm.MemberAssignment = []byte{}, []byte{}
				if stable {
					dm.ProtocolMetadata = m.metadata(g.protocol)
					if m.assignment != nil {
						dm.MemberAssignment = m.assignment
					}
				}
				dg.Members = append(dg.Members, dm)
			}
		}
		if req.IncludeAuthorizedOperations {
			dg.AuthorizedOperations = groupOperations
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// groupOperations are the ACL operations on a group, all authorised (no
// ACLs yet): READ(3), DELETE(6), DESCRIBE(8) as a bit field.
const groupOperations = 1<<3 | 1<<6 | 1<<8

// --- DeleteGroups ---

func (c *Coordinator) deleteGroups(req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		g := c.groups[name]
		switch {
		case name == "":
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case c.checkCoordinator(name) != 0:
			dg.ErrorCode = c.checkCoordinator(name)
		case g == nil:
			dg.ErrorCode = kerr.GroupIDNotFound.Code
		case !g.empty() || g.kind == kindClassic && g.state != stateEmpty:
			dg.ErrorCode = kerr.NonEmptyGroup.Code
		default:
			// Tombstones for every offset and the group itself; the
			// response waits for them (the Ready contract).
			for _, tp := range g.sortedOffsets() {
				c.dropOffset(g, tp)
			}
			c.dropGroup(g)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}
