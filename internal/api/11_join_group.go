package api

import "github.com/twmb/franz-go/pkg/kmsg"

// JoinGroup: v0-9
//
// Behavior (internal/group):
// * Kafka's classic rebalance: PreparingRebalance until every member has
//   rejoined (or the rebalance timeout), then CompletingRebalance; the
//   response waits for that.
// * v4+: a dynamic member's first join gets MEMBER_ID_REQUIRED with its
//   member ID (KIP-394).
// * group.instance.id (v5+, KIP-345): static members; a restarted static
//   member replaces the old one, fencing it (FENCED_INSTANCE_ID).
// * The protocol is elected by vote among those every member supports;
//   none in common: INCONSISTENT_GROUP_PROTOCOL.
// * Session timeout outside [6s, 30m]: INVALID_SESSION_TIMEOUT.
//
// Version notes:
// * v1: RebalanceTimeoutMillis; v4: MEMBER_ID_REQUIRED; v5: InstanceID
// * v6: flexible; v7: ProtocolType in the response; v8: Reason
// * v9: SkipAssignment (KIP-814)

func init() { regKey(11, 0, 9, viaCoordinator[*kmsg.JoinGroupRequest]) }
