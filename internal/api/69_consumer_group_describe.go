package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ConsumerGroupDescribe: v0-1
//
// Behavior (internal/group, KIP-848):
// * State (Empty, Assigning, Reconciling, Stable), group and assignment
//   epochs, assignor, members with their current and target assignments.
// * A group that does not exist or is classic: GROUP_ID_NOT_FOUND.
//
// Version notes:
// * v1: MemberType

func init() { regKey(69, 0, 1, viaCoordinator[*kmsg.ConsumerGroupDescribeRequest]) }
