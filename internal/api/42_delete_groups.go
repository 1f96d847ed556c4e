package api

import "github.com/twmb/franz-go/pkg/kmsg"

// DeleteGroups: v0-2
//
// Behavior (internal/group):
// * Only empty groups: NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND for
//   groups that do not exist.
// * Tombstones for every offset and the group are fsync'd before the
//   answer.
//
// Version notes:
// * v2: flexible

func init() { regKey(42, 0, 2, viaCoordinator[*kmsg.DeleteGroupsRequest]) }
