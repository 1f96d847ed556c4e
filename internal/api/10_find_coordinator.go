package api

import "github.com/twmb/franz-go/pkg/kmsg"

// FindCoordinator: v0-6
//
// Behavior (internal/group):
// * Group keys: this node, once __consumer_offsets is loaded
//   (COORDINATOR_NOT_AVAILABLE before).
// * Transaction keys: COORDINATOR_NOT_AVAILABLE (no transactions yet); other
//   key types (share groups): INVALID_REQUEST.
//
// Version notes:
// * v1: CoordinatorType, ErrorMessage; v3: flexible
// * v4: batched CoordinatorKeys (KIP-699); v6: share coordinator type

func init() { regKey(10, 0, 6, viaCoordinator[*kmsg.FindCoordinatorRequest]) }
