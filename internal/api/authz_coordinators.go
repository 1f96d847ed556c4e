package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/server"
)

// The coordinators' keys are authorized here, before the request reaches
// the group or transaction coordinator (which know nothing of principals),
// as authz.go's table says. authorizeCoordinated returns either a refusal
// to answer at once, or the request to hand over (with what the principal
// may not touch taken out of it) and a finish that puts the refused items
// back into the coordinator's answer (or hides what the principal may not
// see). With the authorizer off it returns at once.
func (h *Handler) authorizeCoordinated(creq *server.Request) (refused kmsg.Response, finish func(kmsg.Response)) {
	if !h.authz.Enabled() {
		return nil, nil
	}
	groupDenied := func(id string, op acl.Operation) bool { return !h.allowed(creq, acl.Group, id, op) }
	topicDenied := func(name string, op acl.Operation) bool { return !h.allowed(creq, acl.Topic, name, op) }
	switch req := creq.Body.(type) {
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest:
		if groupDenied(memberGroup(req), acl.Read) {
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
	case *kmsg.OffsetCommitRequest:
		if groupDenied(req.Group, acl.Read) {
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
		var out []kmsg.OffsetCommitRequestTopic
		req.Topics, out = splitDenied(req.Topics, func(t kmsg.OffsetCommitRequestTopic) bool { return topicDenied(t.Topic, acl.Read) })
		return refuseTopics(len(req.Topics), out, func() *kmsg.OffsetCommitResponse {
			return errresp.For(&kmsg.OffsetCommitRequest{Version: req.Version, Topics: out}, kerr.TopicAuthorizationFailed.Code).(*kmsg.OffsetCommitResponse)
		}, func(resp, denied *kmsg.OffsetCommitResponse) { resp.Topics = append(resp.Topics, denied.Topics...) })
	case *kmsg.TxnOffsetCommitRequest:
		switch {
		case !h.allowed(creq, acl.TransactionalID, req.TransactionalID, acl.Write):
			return errresp.For(req, kerr.TransactionalIDAuthorizationFailed.Code), nil
		case groupDenied(req.Group, acl.Read):
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
		var out []kmsg.TxnOffsetCommitRequestTopic
		req.Topics, out = splitDenied(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return topicDenied(t.Topic, acl.Read) })
		return refuseTopics(len(req.Topics), out, func() *kmsg.TxnOffsetCommitResponse {
			return errresp.For(&kmsg.TxnOffsetCommitRequest{Version: req.Version, Topics: out}, kerr.TopicAuthorizationFailed.Code).(*kmsg.TxnOffsetCommitResponse)
		}, func(resp, denied *kmsg.TxnOffsetCommitResponse) { resp.Topics = append(resp.Topics, denied.Topics...) })
	case *kmsg.OffsetFetchRequest:
		return h.authorizeOffsetFetch(creq, req)
	case *kmsg.DescribeGroupsRequest:
		var out []string
		req.Groups, out = splitDenied(req.Groups, func(id string) bool { return groupDenied(id, acl.Describe) })
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.DescribeGroupsResponse)
			if req.IncludeAuthorizedOperations {
				for i := range resp.Groups {
					resp.Groups[i].AuthorizedOperations = h.authorizedOperations(creq, acl.Group, resp.Groups[i].Group)
				}
			}
			denied := errresp.For(&kmsg.DescribeGroupsRequest{Version: req.Version, Groups: out}, kerr.GroupAuthorizationFailed.Code)
			resp.Groups = append(resp.Groups, denied.(*kmsg.DescribeGroupsResponse).Groups...)
		}
	case *kmsg.ListGroupsRequest:
		if h.allowedCluster(creq, acl.Describe) {
			return nil, nil
		}
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.ListGroupsResponse)
			resp.Groups, _ = splitDenied(resp.Groups, func(g kmsg.ListGroupsResponseGroup) bool { return groupDenied(g.Group, acl.Describe) })
		}
	case *kmsg.DeleteGroupsRequest:
		var out []string
		req.Groups, out = splitDenied(req.Groups, func(id string) bool { return groupDenied(id, acl.Delete) })
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.DeleteGroupsResponse)
			denied := errresp.For(&kmsg.DeleteGroupsRequest{Version: req.Version, Groups: out}, kerr.GroupAuthorizationFailed.Code)
			resp.Groups = append(resp.Groups, denied.(*kmsg.DeleteGroupsResponse).Groups...)
		}
	case *kmsg.OffsetDeleteRequest:
		if groupDenied(req.Group, acl.Delete) {
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
		var out []kmsg.OffsetDeleteRequestTopic
		req.Topics, out = splitDenied(req.Topics, func(t kmsg.OffsetDeleteRequestTopic) bool {
			return !h.allowed(creq, acl.Topic, t.Topic, acl.Read)
		})
		if len(out) == 0 {
			return nil, nil
		}
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.OffsetDeleteResponse)
			for _, t := range out {
				st := kmsg.NewOffsetDeleteResponseTopic()
				st.Topic = t.Topic
				for _, p := range t.Partitions {
					st.Partitions = append(st.Partitions, kmsg.OffsetDeleteResponseTopicPartition{Partition: p.Partition, ErrorCode: kerr.TopicAuthorizationFailed.Code})
				}
				resp.Topics = append(resp.Topics, st)
			}
		}
	case *kmsg.ConsumerGroupHeartbeatRequest:
		if groupDenied(req.Group, acl.Read) {
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
		for _, name := range req.SubscribedTopicNames {
			if !h.allowed(creq, acl.Topic, name, acl.Describe) {
				return errresp.For(req, kerr.TopicAuthorizationFailed.Code), nil
			}
		}
	case *kmsg.ConsumerGroupDescribeRequest:
		var out []string
		req.Groups, out = splitDenied(req.Groups, func(id string) bool { return groupDenied(id, acl.Describe) })
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.ConsumerGroupDescribeResponse)
			if req.IncludeAuthorizedOperations {
				for i := range resp.Groups {
					resp.Groups[i].AuthorizedOperations = h.authorizedOperations(creq, acl.Group, resp.Groups[i].Group)
				}
			}
			denied := errresp.For(&kmsg.ConsumerGroupDescribeRequest{Version: req.Version, Groups: out}, kerr.GroupAuthorizationFailed.Code)
			resp.Groups = append(resp.Groups, denied.(*kmsg.ConsumerGroupDescribeResponse).Groups...)
		}

	// The transaction coordinator's keys.
	case *kmsg.InitProducerIDRequest:
		switch {
		case req.TransactionalID != nil:
			if !h.allowed(creq, acl.TransactionalID, *req.TransactionalID, acl.Write) {
				return errresp.For(req, kerr.TransactionalIDAuthorizationFailed.Code), nil
			}
		case !h.allowedCluster(creq, acl.IdempotentWrite) && !h.allowedAnyTopic(creq, acl.Write):
			// Kafka 2.8+ (KIP-679): IDEMPOTENT_WRITE, or WRITE on any topic.
			return errresp.For(req, kerr.ClusterAuthorizationFailed.Code), nil
		}
	case *kmsg.AddPartitionsToTxnRequest:
		return h.authorizeAddPartitionsToTxn(creq, req), nil
	case *kmsg.AddOffsetsToTxnRequest:
		switch {
		case !h.allowed(creq, acl.TransactionalID, req.TransactionalID, acl.Write):
			return errresp.For(req, kerr.TransactionalIDAuthorizationFailed.Code), nil
		case groupDenied(req.Group, acl.Read):
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
	case *kmsg.EndTxnRequest:
		if !h.allowed(creq, acl.TransactionalID, req.TransactionalID, acl.Write) {
			return errresp.For(req, kerr.TransactionalIDAuthorizationFailed.Code), nil
		}
	case *kmsg.DescribeTransactionsRequest:
		var out []string
		req.TransactionalIDs, out = splitDenied(req.TransactionalIDs, func(id string) bool {
			return !h.allowed(creq, acl.TransactionalID, id, acl.Describe)
		})
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.DescribeTransactionsResponse)
			// The partitions of topics the principal may not describe are
			// left out, as Kafka does.
			for i := range resp.TransactionStates {
				ts := &resp.TransactionStates[i]
				ts.Topics, _ = splitDenied(ts.Topics, func(t kmsg.DescribeTransactionsResponseTransactionStateTopic) bool {
					return topicDenied(t.Topic, acl.Describe)
				})
			}
			denied := errresp.For(&kmsg.DescribeTransactionsRequest{Version: req.Version, TransactionalIDs: out}, kerr.TransactionalIDAuthorizationFailed.Code)
			resp.TransactionStates = append(resp.TransactionStates, denied.(*kmsg.DescribeTransactionsResponse).TransactionStates...)
		}
	case *kmsg.ListTransactionsRequest:
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.ListTransactionsResponse)
			resp.TransactionStates, _ = splitDenied(resp.TransactionStates, func(s kmsg.ListTransactionsResponseTransactionState) bool {
				return !h.allowed(creq, acl.TransactionalID, s.TransactionalID, acl.Describe)
			})
		}
	case *kmsg.FindCoordinatorRequest:
		return h.authorizeFindCoordinator(creq, req)
	}
	return nil, nil
}

// memberGroup is the group of a classic member's request.
func memberGroup(req kmsg.Request) string {
	switch req := req.(type) {
	case *kmsg.JoinGroupRequest:
		return req.Group
	case *kmsg.SyncGroupRequest:
		return req.Group
	case *kmsg.HeartbeatRequest:
		return req.Group
	case *kmsg.LeaveGroupRequest:
		return req.Group
	}
	return ""
}

// refuseTopics answers the denied topics of a commit (out, taken out of the
// request, kept of them left): nothing to do when none was denied, the
// refusal alone when none is left to hand over, else a finish that appends
// the refusal to the coordinator's answer.
func refuseTopics[T any, R kmsg.Response](kept int, out []T, refusal func() R, merge func(resp, denied R)) (kmsg.Response, func(kmsg.Response)) {
	if len(out) == 0 {
		return nil, nil
	}
	denied := refusal()
	if kept == 0 {
		return denied, nil
	}
	return nil, func(r kmsg.Response) { merge(r.(R), denied) }
}

// splitDenied splits items into those kept (in place, order kept) and
// those denied.
func splitDenied[T any](items []T, denied func(T) bool) (kept, out []T) {
	kept = items[:0:0]
	for _, it := range items {
		if denied(it) {
			out = append(out, it)
		} else {
			kept = append(kept, it)
		}
	}
	return kept, out
}

// authorizeOffsetFetch: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED
// for the group), DESCRIBE on each named topic (TOPIC_AUTHORIZATION_FAILED
// per partition); a fetch of all the group's offsets shows only topics the
// principal may describe.
func (h *Handler) authorizeOffsetFetch(creq *server.Request, req *kmsg.OffsetFetchRequest) (kmsg.Response, func(kmsg.Response)) {
	topicDenied := func(name string) bool { return !h.allowed(creq, acl.Topic, name, acl.Describe) }
	if req.Version < 8 {
		if !h.allowed(creq, acl.Group, req.Group, acl.Describe) {
			return errresp.For(req, kerr.GroupAuthorizationFailed.Code), nil
		}
		var out []kmsg.OffsetFetchRequestTopic
		all := req.Topics == nil
		req.Topics, out = splitDenied(req.Topics, func(t kmsg.OffsetFetchRequestTopic) bool { return topicDenied(t.Topic) })
		if all {
			req.Topics = nil // splitDenied made it empty, which names none
		}
		return nil, func(r kmsg.Response) {
			resp := r.(*kmsg.OffsetFetchResponse)
			if all {
				resp.Topics, _ = splitDenied(resp.Topics, func(t kmsg.OffsetFetchResponseTopic) bool { return topicDenied(t.Topic) })
			}
			resp.Topics = append(resp.Topics, errresp.OffsetFetchTopics(out, kerr.TopicAuthorizationFailed.Code)...)
		}
	}
	var deniedGroups []kmsg.OffsetFetchRequestGroup
	req.Groups, deniedGroups = splitDenied(req.Groups, func(g kmsg.OffsetFetchRequestGroup) bool {
		return !h.allowed(creq, acl.Group, g.Group, acl.Describe)
	})
	deniedTopics := make(map[string][]kmsg.OffsetFetchRequestGroupTopic)
	for i := range req.Groups {
		g := &req.Groups[i]
		if g.Topics == nil {
			continue
		}
		var out []kmsg.OffsetFetchRequestGroupTopic
		g.Topics, out = splitDenied(g.Topics, func(t kmsg.OffsetFetchRequestGroupTopic) bool { return topicDenied(t.Topic) })
		if len(out) > 0 {
			deniedTopics[g.Group] = out
		}
	}
	allOf := map[string]bool{}
	for _, g := range req.Groups {
		if g.Topics == nil {
			allOf[g.Group] = true
		}
	}
	return nil, func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetFetchResponse)
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if allOf[g.Group] {
				g.Topics, _ = splitDenied(g.Topics, func(t kmsg.OffsetFetchResponseGroupTopic) bool { return topicDenied(t.Topic) })
			}
			for _, t := range deniedTopics[g.Group] {
				st := kmsg.NewOffsetFetchResponseGroupTopic()
				st.Topic = t.Topic
				for _, p := range t.Partitions {
					sp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					sp.Partition, sp.Offset, sp.ErrorCode = p, -1, kerr.TopicAuthorizationFailed.Code
					st.Partitions = append(st.Partitions, sp)
				}
				g.Topics = append(g.Topics, st)
			}
		}
		for _, g := range deniedGroups {
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: kerr.GroupAuthorizationFailed.Code})
		}
	}
}

// authorizeAddPartitionsToTxn: v4+ (a broker verifying a transaction,
// KIP-890) needs CLUSTER_ACTION; v0-3 WRITE on the transactional id (every
// partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (the
// denied ones TOPIC_AUTHORIZATION_FAILED, the others
// OPERATION_NOT_ATTEMPTED, nothing added), as Kafka.
func (h *Handler) authorizeAddPartitionsToTxn(creq *server.Request, req *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	if req.Version >= 4 {
		if !h.allowedCluster(creq, acl.ClusterAction) {
			return errresp.For(req, kerr.ClusterAuthorizationFailed.Code)
		}
		return nil
	}
	if !h.allowed(creq, acl.TransactionalID, req.TransactionalID, acl.Write) {
		return errresp.For(req, kerr.TransactionalIDAuthorizationFailed.Code)
	}
	_, out := splitDenied(req.Topics, func(t kmsg.AddPartitionsToTxnRequestTopic) bool {
		return !h.allowed(creq, acl.Topic, t.Topic, acl.Write)
	})
	if len(out) == 0 {
		return nil
	}
	resp := errresp.For(req, kerr.OperationNotAttempted.Code).(*kmsg.AddPartitionsToTxnResponse)
	for i := range resp.Topics {
		if !h.allowed(creq, acl.Topic, resp.Topics[i].Topic, acl.Write) {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
		}
	}
	return resp
}

// authorizeFindCoordinator: DESCRIBE on each group key
// (GROUP_AUTHORIZATION_FAILED) or transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); v4+ per key, before v4 for the
// one key.
func (h *Handler) authorizeFindCoordinator(creq *server.Request, req *kmsg.FindCoordinatorRequest) (kmsg.Response, func(kmsg.Response)) {
	rt, code := acl.Group, kerr.GroupAuthorizationFailed.Code
	if req.CoordinatorType == coordinatorTypeTransaction {
		rt, code = acl.TransactionalID, kerr.TransactionalIDAuthorizationFailed.Code
	}
	if req.Version < 4 {
		if !h.allowed(creq, rt, req.CoordinatorKey, acl.Describe) {
			return errresp.For(req, code), nil
		}
		return nil, nil
	}
	var out []string
	req.CoordinatorKeys, out = splitDenied(req.CoordinatorKeys, func(k string) bool { return !h.allowed(creq, rt, k, acl.Describe) })
	if len(out) == 0 {
		return nil, nil
	}
	deniedResp := errresp.For(&kmsg.FindCoordinatorRequest{Version: req.Version, CoordinatorKeys: out}, code).(*kmsg.FindCoordinatorResponse)
	if len(req.CoordinatorKeys) == 0 {
		return deniedResp, nil
	}
	return nil, func(r kmsg.Response) {
		resp := r.(*kmsg.FindCoordinatorResponse)
		resp.Coordinators = append(resp.Coordinators, deniedResp.Coordinators...)
	}
}

// authorizedCoordinated wraps a coordinator's handling with
// authorizeCoordinated.
func (h *Handler) authorizedCoordinated(creq *server.Request, handle func() server.Response) server.Response {
	refused, finish := h.authorizeCoordinated(creq)
	if refused != nil {
		return reply(refused)
	}
	resp := handle()
	if finish != nil && resp.Body != nil {
		finish(resp.Body)
	}
	return resp
}
