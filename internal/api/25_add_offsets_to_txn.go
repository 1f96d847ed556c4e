package api

import "github.com/twmb/franz-go/pkg/kmsg"

// AddOffsetsToTxn: v0-4
//
// Behavior (internal/txn):
// * Adds the group's __consumer_offsets partition to the transaction, as
//   Kafka does: the transaction's end commits or drops the offsets the
//   producer then sends with TxnOffsetCommit. Errors as AddPartitionsToTxn;
//   an empty group is INVALID_GROUP_ID.
//
// Version notes:
// * v1: no change; v2: PRODUCER_FENCED (KIP-588); v3: flexible; v4: no
//   change (KIP-890)

func init() { regKey(25, 0, 4, viaTxnCoordinator[*kmsg.AddOffsetsToTxnRequest]) }
