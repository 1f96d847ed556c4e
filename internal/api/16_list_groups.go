package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ListGroups: v0-5
//
// Behavior (internal/group):
// * Every group this node coordinates, with its state and type.
//
// Version notes:
// * v3: flexible; v4: StatesFilter (case-insensitive)
// * v5: TypesFilter (classic, consumer)

func init() { regKey(16, 0, 5, viaCoordinator[*kmsg.ListGroupsRequest]) }
