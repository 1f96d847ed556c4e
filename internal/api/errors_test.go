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
