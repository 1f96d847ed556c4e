package api

import "github.com/twmb/franz-go/pkg/kmsg"

// Heartbeat: v0-4
//
// Behavior (internal/group):
// * Keeps the member's session alive; REBALANCE_IN_PROGRESS while the
//   group prepares a rebalance (the member must rejoin).
// * Unknown group or member: UNKNOWN_MEMBER_ID; a stale generation:
//   ILLEGAL_GENERATION; a replaced static member: FENCED_INSTANCE_ID.
//
// Version notes:
// * v3: InstanceID; v4: flexible

func init() { regKey(12, 0, 4, viaCoordinator[*kmsg.HeartbeatRequest]) }
