// Package errresp is the one home of "the error response of request type
// K": the answer to a request with every error code it can carry set to one
// code, in the request's own shape (Kafka's AbstractRequest.getErrorResponse).
// The coordinators (internal/group, internal/txn) answer with it when they
// are closed or persisting failed, internal/api when a request is refused
// whole (authorization) or its coordinator is unavailable.
//
// A request type the table does not know gets nil, never a bare response:
// a bare response carries error code 0, which a client reads as success.
// Callers answer nil by closing the connection, as Kafka does for a request
// it cannot answer. Every entry is checked at every version kmsg encodes
// (errresp_test.go): the code must reach the wire, and reach every item the
// request names.
package errresp

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// For is req's response with every error code set to code (which must not
// be 0), or nil for a request type without an entry here.
func For(req kmsg.Request, code int16) kmsg.Response {
	switch req := req.(type) {
	// The group coordinator's keys.
	case *kmsg.JoinGroupRequest:
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.MemberID, resp.Generation = code, req.MemberID, -1
		return resp
	case *kmsg.SyncGroupRequest:
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.HeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.OffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	case *kmsg.TxnOffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range req.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	case *kmsg.WriteTxnMarkersRequest:
		return WriteTxnMarkers(req, func(*kmsg.WriteTxnMarkersRequestMarker, string, int32) int16 { return code })
	case *kmsg.OffsetFetchRequest:
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = code // v2-7
		if req.Version < 2 {
			// No top-level error code: every partition named carries it.
			resp.Topics = OffsetFetchTopics(req.Topics, code)
		}
		for _, g := range req.Groups { // v8+
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: code})
		}
		return resp
	case *kmsg.FindCoordinatorRequest:
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = code, -1, -1 // v0-3
		for _, k := range req.CoordinatorKeys {               // v4+
			resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: -1, Port: -1, ErrorCode: code})
		}
		return resp
	case *kmsg.ListGroupsRequest:
		resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.DescribeGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			d := kmsg.NewDescribeGroupsResponseGroup() // AuthorizedOperations omitted, as Kafka's groupError
			d.Group, d.ErrorCode = g, code
			resp.Groups = append(resp.Groups, d)
		}
		return resp
	case *kmsg.DeleteGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range req.Groups {
			resp.Groups = append(resp.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: code})
		}
		return resp
	case *kmsg.OffsetDeleteRequest:
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.ConsumerGroupHeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.ConsumerGroupDescribeRequest:
		resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range req.Groups {
			d := kmsg.NewConsumerGroupDescribeResponseGroup()
			d.Group, d.ErrorCode = g, code
			resp.Groups = append(resp.Groups, d)
		}
		return resp

	// The transaction coordinator's keys.
	case *kmsg.InitProducerIDRequest:
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
		return resp
	case *kmsg.EndTxnRequest:
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
		return resp
	case *kmsg.AddPartitionsToTxnRequest:
		if req.Version >= 4 { // Kafka's: the top-level code alone
			resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
			resp.ErrorCode = code
			return resp
		}
		return AddPartitionsToTxn(req, func(*kmsg.AddPartitionsToTxnRequestTransaction) func(string, int32) int16 {
			return func(string, int32) int16 { return code }
		})
	case *kmsg.AddOffsetsToTxnRequest:
		resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.DescribeTransactionsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
		for _, id := range req.TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode = id, code
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp
	case *kmsg.ListTransactionsRequest:
		resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
		resp.ErrorCode = code
		return resp

	// The cluster-wide admin keys refused whole (internal/api's gates).
	case *kmsg.DescribeClientQuotasRequest:
		resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.AlterClientQuotasRequest:
		resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
		for _, e := range req.Entries {
			re := kmsg.NewAlterClientQuotasResponseEntry()
			re.ErrorCode = code
			for _, p := range e.Entity {
				re.Entity = append(re.Entity, kmsg.AlterClientQuotasResponseEntryEntity{Type: p.Type, Name: p.Name})
			}
			resp.Entries = append(resp.Entries, re)
		}
		return resp
	// The metadata quorum's keys a broker sends the active controller
	// (internal/api refuses them whole without CLUSTER_ACTION).
	case *kmsg.BrokerRegistrationRequest:
		resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
		resp.ErrorCode, resp.BrokerEpoch = code, -1
		return resp
	case *kmsg.BrokerHeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
		resp.ErrorCode, resp.IsFenced = code, true
		return resp
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		add := func(user string) {
			if !seen[user] {
				seen[user] = true
				resp.Results = append(resp.Results, kmsg.AlterUserSCRAMCredentialsResponseResult{User: user, ErrorCode: code})
			}
		}
		for _, d := range req.Deletions {
			add(d.Name)
		}
		for _, u := range req.Upsertions {
			add(u.Name)
		}
		return resp
	}
	return nil
}

// WriteTxnMarkers is the one walk of a WriteTxnMarkers answer: every
// partition of every marker, answered with write's code (0: written).
func WriteTxnMarkers(req *kmsg.WriteTxnMarkersRequest, write func(m *kmsg.WriteTxnMarkersRequestMarker, topic string, partition int32) int16) *kmsg.WriteTxnMarkersResponse {
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for i := range req.Markers {
		m := &req.Markers[i]
		sm := kmsg.NewWriteTxnMarkersResponseMarker()
		sm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			st := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			st.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				sp.Partition, sp.ErrorCode = p, write(m, t.Topic, p)
				st.Partitions = append(st.Partitions, sp)
			}
			sm.Topics = append(sm.Topics, st)
		}
		resp.Markers = append(resp.Markers, sm)
	}
	return resp
}

// AddPartitionsToTxn is the one walk of an AddPartitionsToTxn answer. Each
// transaction the request names is handed to add once: v4+ each of
// req.Transactions, v0-3 the request's one (its fields at the top level,
// VerifyOnly false). The function add returns answers each partition of
// that transaction (0: added, or verified), in the request's order and
// shape: per transaction, topic and partition from v4, per topic and
// partition before.
func AddPartitionsToTxn(req *kmsg.AddPartitionsToTxnRequest, add func(txn *kmsg.AddPartitionsToTxnRequestTransaction) func(topic string, partition int32) int16) *kmsg.AddPartitionsToTxnResponse {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version < 4 {
		txn := kmsg.NewAddPartitionsToTxnRequestTransaction()
		txn.TransactionalID, txn.ProducerID, txn.ProducerEpoch = req.TransactionalID, req.ProducerID, req.ProducerEpoch
		for _, t := range req.Topics {
			txn.Topics = append(txn.Topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: t.Topic, Partitions: t.Partitions})
		}
		codeOf := add(&txn)
		for _, t := range req.Topics {
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p, codeOf(t.Topic, p)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
	for i := range req.Transactions {
		rt := &req.Transactions[i]
		codeOf := add(rt)
		st := kmsg.NewAddPartitionsToTxnResponseTransaction()
		st.TransactionalID = rt.TransactionalID
		for _, t := range rt.Topics {
			stt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			stt.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				sp.Partition, sp.ErrorCode = p, codeOf(t.Topic, p)
				stt.Partitions = append(stt.Partitions, sp)
			}
			st.Topics = append(st.Topics, stt)
		}
		resp.Transactions = append(resp.Transactions, st)
	}
	return resp
}

// OffsetFetchTopics answers every partition of topics with code, at
// offset -1 (OffsetFetch v0-7's per-partition form; v0-1 have no other
// place for a group's error).
func OffsetFetchTopics(topics []kmsg.OffsetFetchRequestTopic, code int16) []kmsg.OffsetFetchResponseTopic {
	var out []kmsg.OffsetFetchResponseTopic
	for _, t := range topics {
		st := kmsg.NewOffsetFetchResponseTopic()
		st.Topic = t.Topic
		for _, p := range t.Partitions {
			sp := kmsg.NewOffsetFetchResponseTopicPartition()
			sp.Partition, sp.Offset, sp.ErrorCode = p, -1, code
			st.Partitions = append(st.Partitions, sp)
		}
		out = append(out, st)
	}
	return out
}
