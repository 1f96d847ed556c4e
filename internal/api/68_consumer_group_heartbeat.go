package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ConsumerGroupHeartbeat: v0-1
//
// Behavior (internal/group, KIP-848):
// * The coordinator assigns: server-side assignors "uniform" (default) and
//   "range"; others get UNSUPPORTED_ASSIGNOR.
// * Epoch 0 joins (v0: the coordinator names the member; v1: the client
//   does), -1 leaves, -2 is a static member's temporary leave.
// * Members reconcile through heartbeats: revoked partitions are confirmed
//   (by the owned Topics) before they go to another member.
// * A wrong member epoch: FENCED_MEMBER_EPOCH; an unknown member:
//   UNKNOWN_MEMBER_ID. Session timeout 45s, heartbeat interval 5s.
// * SubscribedTopicRegex (v1) matches whole topic names, internal topics
//   included, as Kafka's RE2/J does; it is resolved again on every
//   heartbeat, so a new matching topic bumps the group epoch. An invalid
//   one: INVALID_REGULAR_EXPRESSION.
// * Not served: KIP-848 group state is not persisted (members rejoin after
//   a restart; offsets stay).
//
// Version notes:
// * v1: SubscribedTopicRegex, client-generated member IDs (KIP-1082)

func init() { regKey(68, 0, 1, viaCoordinator[*kmsg.ConsumerGroupHeartbeatRequest]) }
