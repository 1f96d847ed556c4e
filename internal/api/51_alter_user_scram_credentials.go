package api

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/sasl"
)

// AlterUserScramCredentials: v0
//
// Behavior (KIP-554, as Kafka's ScramControlManager):
// * Upsertions carry the salt, iterations and salted password (the client
//   salts: kadm and Kafka's Admin do); the broker keeps StoredKey and
//   ServerKey derived from them (internal/sasl), never the salted password.
//   Deletions name a user and mechanism.
// * Per user, one result: a user named more than once (across deletions
//   and upsertions, whatever the mechanisms) is DUPLICATE_RESOURCE and
//   none of its changes apply; an empty name or iterations outside
//   4096..16384 (or an empty salt, a salted password not of the hash's
//   size) UNACCEPTABLE_CREDENTIAL; an unknown mechanism
//   UNSUPPORTED_SASL_MECHANISM; the deletion of a credential that does not
//   exist RESOURCE_NOT_FOUND.
// * The valid changes are one commit of the metadata log (records 6 and
//   7, internal/meta/scram.go), durable before the answer. Connections
//   already authenticated stay so, as in Kafka.
// * A cluster-level admin API: the authorizer (when enabled) requires
//   ALTER on the cluster.
//
// Version notes:
// * v0: flexible

func init() { regKey(51, 0, 0, replying((*Handler).handleAlterUserScramCredentials)) }

func (h *Handler) handleAlterUserScramCredentials(req *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	var order []string // users in the order of their first change
	named := map[string]int{}
	failed := map[string]error{}
	name := func(user string) {
		if named[user]++; named[user] == 1 {
			order = append(order, user)
		}
	}
	for _, d := range req.Deletions {
		name(d.Name)
	}
	for _, u := range req.Upsertions {
		name(u.Name)
	}
	var changes []meta.ScramChange
	check := func(user string, m sasl.Mechanism, iterations int32, salt, saltedPassword []byte, upsert bool) {
		var err error
		switch {
		case named[user] > 1:
			err = fmt.Errorf("%w: a user credential cannot be altered twice in the same request", errDuplicateUser)
		case user == "":
			err = fmt.Errorf("%w: username must not be empty", sasl.ErrUnacceptableCredential)
		case !m.Valid():
			err = fmt.Errorf("%w: unknown SCRAM mechanism %d", sasl.ErrUnsupportedMechanism, m)
		case upsert:
			err = sasl.CheckParameters(m, iterations, salt, saltedPassword)
		default:
			if _, ok := h.metaReads().ScramCredential(user, m); !ok {
				err = fmt.Errorf("%w: attempt to delete a user credential that does not exist", meta.ErrNoScramCredential)
			}
		}
		if err != nil {
			failed[user] = err
			return
		}
		ch := meta.ScramChange{User: user, Mechanism: m}
		if upsert {
			c := sasl.FromSaltedPassword(m, salt, saltedPassword, iterations)
			ch.Credential, ch.SaltedPassword = &c, saltedPassword
		}
		changes = append(changes, ch)
	}
	for _, d := range req.Deletions {
		check(d.Name, sasl.Mechanism(d.Mechanism), 0, nil, nil, false)
	}
	for _, u := range req.Upsertions {
		check(u.Name, sasl.Mechanism(u.Mechanism), u.Iterations, u.Salt, u.SaltedPassword, true)
	}
	if err := h.alterScram(changes); err != nil {
		h.log.Error("altering SCRAM credentials failed", "err", err)
		for _, ch := range changes {
			failed[ch.User] = err
		}
	} else if len(changes) > 0 {
		h.log.Info("SCRAM credentials altered", "changes", len(changes))
	}
	for _, user := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User = user
		if err := failed[user]; err != nil {
			r.ErrorCode = errorCode(err)
			r.ErrorMessage = errMessage(err)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

// errDuplicateUser is a user named more than once (DUPLICATE_RESOURCE).
var errDuplicateUser = errors.New("duplicate user")
