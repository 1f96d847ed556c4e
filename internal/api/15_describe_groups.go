package api

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeGroups: v0-6
//
// Behavior (internal/group):
// * State, protocol type; protocol, member metadata and assignments only
//   when Stable, as Kafka.
// * A group that does not exist: state Dead (v6+: GROUP_ID_NOT_FOUND).
// * A KIP-848 group: GROUP_ID_NOT_FOUND (use ConsumerGroupDescribe).
//
// Version notes:
// * v3: authorized operations; v4: InstanceID; v5: flexible
// * v6: ErrorMessage, GROUP_ID_NOT_FOUND

func init() { regKey(15, 0, 6, viaCoordinator[*kmsg.DescribeGroupsRequest]) }
