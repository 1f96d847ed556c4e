package txn

import (
	"regexp"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// --- DescribeTransactions ---

func (c *Coordinator) describeTransactions(req *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.ProducerEpoch, st.StartTimestamp = id, -1, -1, -1
		t := c.txns[id]
		switch code := c.checkCoordinator(id); {
		case id == "":
			st.ErrorCode = kerr.InvalidRequest.Code
		case code != 0:
			st.ErrorCode = code
		case t == nil:
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
		default:
			st.State = t.state.String()
			st.TimeoutMillis = int32(t.timeout.Milliseconds())
			st.StartTimestamp = timeMillis(t.start)
			st.ProducerID, st.ProducerEpoch = t.producerID, t.epoch
			for _, tp := range sortedPartitions(t.partitions) {
				if n := len(st.Topics); n > 0 && st.Topics[n-1].Topic == tp.Topic {
					st.Topics[n-1].Partitions = append(st.Topics[n-1].Partitions, tp.Partition)
					continue
				}
				dt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				dt.Topic, dt.Partitions = tp.Topic, []int32{tp.Partition}
				st.Topics = append(st.Topics, dt)
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// --- ListTransactions ---

// listTransactions filters by state, producer id, (v1+, KIP-994) how long
// the transaction has been running, and (v2+, KIP-1152) a transactional id
// pattern; unknown state names are listed back in UnknownStateFilters.
func (c *Coordinator) listTransactions(req *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	if !c.loaded || len(c.unloaded) > 0 {
		// A partition unloaded after a storage error is reloading
		// (UnloadPartition): its ids would be missing, so no list, as
		// Kafka's TransactionStateManager answers while any partition
		// loads; never success with ids silently left out.
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	states := map[State]bool{}
	for _, name := range req.StateFilters {
		s, ok := ParseState(name)
		if !ok {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
			continue
		}
		states[s] = true
	}
	if len(req.StateFilters) > 0 && len(states) == 0 {
		return resp // only unknown states: nothing matches
	}
	pids := map[int64]bool{}
	for _, p := range req.ProducerIDFilters {
		pids[p] = true
	}
	var pattern *regexp.Regexp
	if req.Version >= 2 && req.TransactionalIDPattern != nil && *req.TransactionalIDPattern != "" {
		re, err := regexp.Compile(*req.TransactionalIDPattern)
		if err != nil {
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			return resp
		}
		pattern = re
	}
	for _, t := range c.sortedTxns() {
		switch {
		case len(states) > 0 && !states[t.state]:
		case len(pids) > 0 && !pids[t.producerID]:
		case req.Version >= 1 && req.DurationFilterMillis >= 0 && c.now.UnixMilli()-timeMillis(t.start) <= req.DurationFilterMillis:
			// KIP-994: only transactions that started longer ago than the
			// filter, as Kafka's TransactionStateManager compares: the
			// start of an id with no transaction since its InitProducerID
			// is -1, so such an id always passes.
		case pattern != nil && !pattern.MatchString(t.id):
		default:
			lt := kmsg.NewListTransactionsResponseTransactionState()
			lt.TransactionalID, lt.ProducerID, lt.TransactionState = t.id, t.producerID, t.state.String()
			resp.TransactionStates = append(resp.TransactionStates, lt)
		}
	}
	return resp
}
