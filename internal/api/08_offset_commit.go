package api

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetCommit: v0-9
//
// Behavior (internal/group):
// * Commits are stored in __consumer_offsets and acknowledged once fsync'd.
// * A group with members checks the member (UNKNOWN_MEMBER_ID,
//   FENCED_INSTANCE_ID) and the generation (ILLEGAL_GENERATION);
//   REBALANCE_IN_PROGRESS between JoinGroup and SyncGroup.
// * Generation -1 with no member is a simple consumer's commit: accepted
//   while the group is empty, creating the group if needed.
// * A generation for a group that does not exist: GROUP_ID_NOT_FOUND (v9+),
//   ILLEGAL_GENERATION before.
// * Unknown topics or partitions: UNKNOWN_TOPIC_OR_PARTITION; metadata over
//   4096 bytes: OFFSET_METADATA_TOO_LARGE.
// * KIP-848 groups check the member epoch (STALE_MEMBER_EPOCH,
//   FENCED_MEMBER_EPOCH).
//
// Version notes:
// * v1: Generation, MemberID; v2-4: RetentionTimeMillis (ignored)
// * v6: LeaderEpoch; v7: InstanceID; v8: flexible
// * v9: GROUP_ID_NOT_FOUND, KIP-848 member epochs
// * v10 (topic IDs) is not served yet

func init() { regKey(8, 0, 9, viaCoordinator[*kmsg.OffsetCommitRequest]) }
