package api

import "github.com/twmb/franz-go/pkg/kmsg"

// SyncGroup: v0-5
//
// Behavior (internal/group):
// * The leader's assignments are persisted with the group, then every
//   member waiting in SyncGroup gets its own; followers that sync before
//   the leader wait for it.
// * REBALANCE_IN_PROGRESS if the group started another rebalance.
//
// Version notes:
// * v3: InstanceID; v4: flexible; v5: ProtocolType and Protocol checked

func init() { regKey(14, 0, 5, viaCoordinator[*kmsg.SyncGroupRequest]) }
