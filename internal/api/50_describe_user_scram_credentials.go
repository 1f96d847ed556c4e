package api

import (
	"errors"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeUserScramCredentials: v0
//
// Behavior (KIP-554):
// * Each named user with its SCRAM mechanisms and iterations (never the
//   salt or keys); no users named (null or empty): every user that has a
//   credential, sorted by name.
// * A user without credentials is RESOURCE_NOT_FOUND, a user named twice
//   DUPLICATE_RESOURCE (answered once), as Kafka answers.
// * A cluster-level admin API: the authorizer (when enabled) requires
//   DESCRIBE on the cluster.
//
// Version notes:
// * v0: flexible

func init() { regKey(50, 0, 0, replying((*Handler).handleDescribeUserScramCredentials)) }

func (h *Handler) handleDescribeUserScramCredentials(req *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	users := h.metaReads().ScramUsers()
	var names []string
	if len(req.Users) == 0 {
		for name := range users {
			names = append(names, name)
		}
		sort.Strings(names)
	} else {
		for _, u := range req.Users {
			names = append(names, u.Name)
		}
	}
	named := map[string]int{}
	for _, n := range names {
		named[n]++
	}
	answered := map[string]bool{}
	for _, name := range names {
		if answered[name] {
			continue
		}
		answered[name] = true
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = name
		infos := users[name]
		switch {
		case named[name] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
			//lint:ignore ST1005 Kafka's message, word for word (as the next)
			r.ErrorMessage = errMessage(errors.New("Cannot describe SCRAM credentials for the same user twice in a single request"))
		case len(infos) == 0:
			r.ErrorCode = kerr.ResourceNotFound.Code
			//lint:ignore ST1005 Kafka's message, word for word
			r.ErrorMessage = errMessage(errors.New("Attempt to describe a user credential that does not exist"))
		}
		if r.ErrorCode == 0 {
			for _, in := range infos {
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = int8(in.Mechanism), in.Iterations
				r.CredentialInfos = append(r.CredentialInfos, ci)
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}
