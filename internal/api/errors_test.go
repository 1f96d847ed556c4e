package api

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sushka-io/sushka/internal/plog"
)

// TestNotLeaderErrors: a replicated partition's not-leader answers (the
// sentinel, and wrapped with the reason: a follower, leadership lost in
// flight, an entry replaced by a new leader's) are NOT_LEADER_OR_FOLLOWER,
// which clients retry after refreshing their metadata.
func TestNotLeaderErrors(t *testing.T) {
	for _, err := range []error{
		plog.ErrNotLeader,
		fmt.Errorf("%w: leadership lost with the batch in flight", plog.ErrNotLeader),
		fmt.Errorf("%w: entry 7 of term 2 replaced by a new leader's", plog.ErrNotLeader),
	} {
		code := errorCode(err)
		if code != kerr.NotLeaderForPartition.Code || !kerr.IsRetriable(kerr.ErrorForCode(code)) {
			t.Errorf("%v: code %d, want NOT_LEADER_OR_FOLLOWER (%d), retriable", err, code, kerr.NotLeaderForPartition.Code)
		}
	}
}

// TestNotEnoughReplicasErrors: min.insync.replicas' two refusals, wrapped
// with their reasons, are NOT_ENOUGH_REPLICAS (19) and
// NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), both retriable as clients expect.
func TestNotEnoughReplicasErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int16
	}{
		{fmt.Errorf("%w: 1 in sync ([1]), min.insync.replicas 2", plog.ErrNotEnoughReplicas), 19},
		{fmt.Errorf("%w: 2 in sync ([1 2]), min.insync.replicas 3", plog.ErrNotEnoughReplicasAfterAppend), 20},
	} {
		code := errorCode(c.err)
		if code != c.code || !kerr.IsRetriable(kerr.ErrorForCode(code)) {
			t.Errorf("%v: code %d, want %d, retriable", c.err, code, c.code)
		}
	}
}
