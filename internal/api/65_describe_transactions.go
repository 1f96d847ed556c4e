package api

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeTransactions: v0
//
// Behavior (internal/txn):
// * Each transactional id's state, timeout, start, producer id and epoch
//   and partitions; TRANSACTIONAL_ID_NOT_FOUND for an id unknown.

func init() { regKey(65, 0, 0, viaTxnCoordinator[*kmsg.DescribeTransactionsRequest]) }
