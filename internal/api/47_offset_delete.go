package api

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetDelete: v0-0
//
// Behavior (internal/group):
// * Deletes committed offsets of an empty group; a consumer group with
//   members keeps the offsets of topics it subscribes to
//   (GROUP_SUBSCRIBED_TO_TOPIC); other non-empty groups: NON_EMPTY_GROUP.
// * Unknown group: GROUP_ID_NOT_FOUND.

func init() { regKey(47, 0, 0, viaCoordinator[*kmsg.OffsetDeleteRequest]) }
