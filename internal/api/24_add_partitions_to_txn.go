package api

import "github.com/twmb/franz-go/pkg/kmsg"

// AddPartitionsToTxn: v0-5
//
// Behavior (internal/txn):
// * Adds partitions to the producer's transaction, starting one when none
//   is ongoing; persisted to __transaction_state before the answer.
// * INVALID_PRODUCER_ID_MAPPING for a producer id that is not the
//   transactional id's, PRODUCER_FENCED for another epoch
//   (INVALID_PRODUCER_EPOCH before v2), CONCURRENT_TRANSACTIONS while the
//   previous transaction's markers are being written; unknown partitions
//   UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED.
//
// Version notes:
// * v1: no change; v2: PRODUCER_FENCED (KIP-588); v3: flexible
// * v4: batched transactions, VerifyOnly (KIP-890 part 1; brokers and
//   admin tools); v5: no change

func init() { regKey(24, 0, 5, viaTxnCoordinator[*kmsg.AddPartitionsToTxnRequest]) }
