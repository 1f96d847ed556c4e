package broker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinSyncRaw joins group as a new single member and syncs it with
// assignment, with raw requests; it returns the SyncGroup error code.
func joinSyncRaw(t *testing.T, cl *kgo.Client, group string, assignment []byte) int16 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType = group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30000, 60000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
	jr, err := join.RequestWith(ctx, cl)
	if err == nil && jr.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = jr.MemberID
		jr, err = join.RequestWith(ctx, cl)
	}
	if err != nil || jr.ErrorCode != 0 {
		t.Fatalf("join %s: %v %v", group, err, kerr.ErrorForCode(jr.ErrorCode))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = group, jr.MemberID, jr.Generation
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: assignment}}
	sr, err := sync.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("sync %s: %v", group, err)
	}
	return sr.ErrorCode
}

// TestHostileSyncGroupHugeAssignment: a leader syncing a 70 MB assignment
// (more than a __consumer_offsets batch holds) gets UNKNOWN_SERVER_ERROR,
// as Kafka answers RECORD_LIST_TOO_LARGE from storeGroup, and nobody else
// notices: other groups join, sync and commit, and the same group syncs a
// sane assignment afterwards.
func TestHostileSyncGroupHugeAssignment(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.BrokerMaxWriteBytes(100 << 20))
	if code := joinSyncRaw(t, cl, "huge", bytes.Repeat([]byte{'a'}, 70<<20)); code != kerr.UnknownServerError.Code {
		t.Fatalf("70 MB assignment: %v, want UNKNOWN_SERVER_ERROR", kerr.ErrorForCode(code))
	}
	if code := joinSyncRaw(t, cl, "bystander", []byte("small")); code != 0 {
		t.Fatalf("another group after the huge sync: %v", kerr.ErrorForCode(code))
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "simple", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 42}}}}
	if _, err := tb.admin().CreateTopic(context.Background(), 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	cr, err := commit.RequestWith(context.Background(), cl)
	if err != nil || cr.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit after the huge sync: %v %+v", err, cr)
	}
	if code := joinSyncRaw(t, cl, "huge", []byte("sane")); code != 0 {
		t.Fatalf("the same group with a sane assignment: %v", kerr.ErrorForCode(code))
	}
}
