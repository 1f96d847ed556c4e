package api

import "github.com/twmb/franz-go/pkg/kmsg"

// LeaveGroup: v0-5
//
// Behavior (internal/group):
// * Removes the members and rebalances the rest.
// * v3+: several members, each by member ID or group.instance.id, each
//   with its own error code.
// * An unknown group: UNKNOWN_MEMBER_ID.
//
// Version notes:
// * v3: batched Members; v4: flexible; v5: Reason

func init() { regKey(13, 0, 5, viaCoordinator[*kmsg.LeaveGroupRequest]) }
