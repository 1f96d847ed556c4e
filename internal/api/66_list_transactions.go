package api

import "github.com/twmb/franz-go/pkg/kmsg"

// ListTransactions: v0-2
//
// Behavior (internal/txn):
// * Lists the transactional ids, filtered by state (unknown state names
//   come back in UnknownStateFilters) and producer id.
//
// Version notes:
// * v1: DurationFilterMillis (KIP-994): only transactions running longer
// * v2: TransactionalIDPattern (re2)

func init() { regKey(66, 0, 2, viaTxnCoordinator[*kmsg.ListTransactionsRequest]) }
