package api

import "github.com/twmb/franz-go/pkg/kmsg"

// EndTxn: v0-5
//
// Behavior (internal/txn):
// * Commits or aborts the ongoing transaction: PrepareCommit/PrepareAbort
//   is persisted, the markers are written (durable) to every partition of
//   the transaction (for __consumer_offsets: the group coordinator commits
//   or drops the producer's pending offsets), CompleteCommit/CompleteAbort
//   is persisted, and only then is EndTxn answered.
// * A retry of an end that completed succeeds; of one in progress,
//   CONCURRENT_TRANSACTIONS; the other end of it, or an end with nothing
//   ongoing, INVALID_TXN_STATE; another epoch, PRODUCER_FENCED
//   (INVALID_PRODUCER_EPOCH before v2).
//
// Version notes:
// * v1: no change; v2: PRODUCER_FENCED (KIP-588); v3: flexible
// * v5: KIP-890 part 2: the epoch is bumped by every end (the markers carry
//   the new one) and returned with the producer id; a retry with the epoch
//   from before the bump succeeds.

func init() { regKey(26, 0, 5, viaTxnCoordinator[*kmsg.EndTxnRequest]) }
