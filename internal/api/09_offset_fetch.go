package api

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetFetch: v0-9
//
// Behavior (internal/group):
// * A group that does not exist returns no error and no offsets (offset -1
//   for the partitions named), as Kafka does.
// * A null topic list returns every committed offset of the group.
// * RequireStable: a partition with transactional offsets pending answers
//   UNSTABLE_OFFSET_COMMIT (KIP-447; internal/group/offsets.go).
//
// Version notes:
// * v2: top-level ErrorCode; v3: ThrottleMillis; v5: LeaderEpoch
// * v6: flexible; v7: RequireStable
// * v8: several groups in one request
// * v9: KIP-848 MemberID and MemberEpoch
// * v10 (topic IDs) is not served yet

func init() { regKey(9, 0, 9, viaCoordinator[*kmsg.OffsetFetchRequest]) }
