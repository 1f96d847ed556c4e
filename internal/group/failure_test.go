package group

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

func startServiceBatch(t *testing.T, fs vfs.FS, maxBatchBytes int) *Service {
	t.Helper()
	s, err := Start(ServiceConfig{FS: fs, DataDir: "/data", Logger: slog.New(slog.DiscardHandler),
		Coordinator:          Config{NodeID: 1, Host: "127.0.0.1", Port: 9092},
		OffsetsMaxBatchBytes: maxBatchBytes})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// joinAndSync makes member one of a new single-member group and syncs it
// with assignment; it returns the member id, generation and the SyncGroup
// error code.
func joinAndSync(t *testing.T, s *Service, group string, assignment []byte) (string, int32, int16) {
	t.Helper()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 9
	join.Group, join.ProtocolType = group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30000, 60000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
	jr := do[*kmsg.JoinGroupResponse](t, s, join)
	if jr.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = jr.MemberID
		jr = do[*kmsg.JoinGroupResponse](t, s, join)
	}
	if jr.ErrorCode != 0 {
		t.Fatalf("join %s: error %d", group, jr.ErrorCode)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version = 5
	sync.Group, sync.MemberID, sync.Generation = group, jr.MemberID, jr.Generation
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: assignment}}
	sr := do[*kmsg.SyncGroupResponse](t, s, sync)
	return jr.MemberID, jr.Generation, sr.ErrorCode
}

func describeGroup(t *testing.T, s *Service, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	dr := kmsg.NewPtrDescribeGroupsRequest()
	dr.Version = 5
	dr.Groups = []string{group}
	return do[*kmsg.DescribeGroupsResponse](t, s, dr).Groups[0]
}

// TestSyncGroupTooLargeFailsAlone: a SyncGroup whose assignment cannot fit
// in a batch gets UNKNOWN_SERVER_ERROR (Kafka's storeGroup answer for
// RECORD_LIST_TOO_LARGE), the group goes back to its durable state, and
// other groups, and the same group with a smaller assignment, keep working.
func TestSyncGroupTooLargeFailsAlone(t *testing.T) {
	fs := vfs.NewMem()
	s := startServiceBatch(t, fs, 64<<10)
	defer s.Close()
	if _, _, code := joinAndSync(t, s, "other", []byte("small")); code != 0 {
		t.Fatalf("other group: sync error %d", code)
	}
	if _, _, code := joinAndSync(t, s, "huge", bytes.Repeat([]byte("x"), 100<<10)); code != kerr.UnknownServerError.Code {
		t.Fatalf("too large a sync: error %d, want UNKNOWN_SERVER_ERROR", code)
	}
	// Nothing of the failed generation is claimed: the group is what the
	// disk holds (its empty generation 1, written when the join ended... or
	// nothing at all).
	if g := describeGroup(t, s, "huge"); g.State == "Stable" || g.State == "CompletingRebalance" {
		t.Fatalf("the failed group claims %s with %d members", g.State, len(g.Members))
	}
	if _, _, code := joinAndSync(t, s, "other2", []byte("small")); code != 0 {
		t.Fatalf("another group after the failure: sync error %d", code)
	}
	if _, _, code := joinAndSync(t, s, "huge", []byte("fits now")); code != 0 {
		t.Fatalf("the failed group with a small assignment: sync error %d", code)
	}
	cr := do[*kmsg.OffsetCommitResponse](t, s, commitReq("simple", -1, "", map[int32]int64{0: 5}))
	if code := cr.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit after the failure: %d", code)
	}
	s.Close()
	s = startServiceBatch(t, fs, 64<<10)
	defer s.Close()
	if g := describeGroup(t, s, "huge"); g.State != "Stable" || string(g.Members[0].MemberAssignment) != "fits now" {
		t.Fatalf("after restart: %s %+v", g.State, g.Members)
	}
}

// TestConcurrentCommitsSplitIntoBatches: commits that together exceed one
// batch (all drained into one Ready) are split into several batches and
// all succeed, durably.
func TestConcurrentCommitsSplitIntoBatches(t *testing.T) {
	fs := vfs.NewMem()
	const maxBatch = 64 << 10
	s := startServiceBatch(t, fs, maxBatch)
	const groups, partitions = 64, 8
	metadata := string(bytes.Repeat([]byte("m"), 4000)) // under offset.metadata.max.bytes
	var wg sync.WaitGroup
	var failures atomic.Int32
	start := make(chan struct{})
	for g := 0; g < groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offsets := map[int32]int64{}
			for p := int32(0); p < partitions; p++ {
				offsets[p] = int64(g*100) + int64(p)
			}
			req := commitReq(fmt.Sprintf("g%d", g), -1, "", offsets)
			for i := range req.Topics[0].Partitions {
				req.Topics[0].Partitions[i].Metadata = &metadata
			}
			<-start
			resp := do[*kmsg.OffsetCommitResponse](t, s, req)
			for _, p := range resp.Topics[0].Partitions {
				if p.ErrorCode != 0 {
					failures.Add(1)
					t.Errorf("group %d partition %d: error %d", g, p.Partition, p.ErrorCode)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	if size := s.Store().Log(0).Size(); size < groups*partitions*4000 {
		t.Fatalf("log of %d bytes: the commits were not all written", size)
	}
	// And the coordinator still works.
	do[*kmsg.OffsetCommitResponse](t, s, commitReq("after", -1, "", map[int32]int64{0: 1}))
	s.Close()
	s = startServiceBatch(t, fs, maxBatch)
	defer s.Close()
	for g := 0; g < groups; g++ {
		got := fetchAll(t, s, fmt.Sprintf("g%d", g))
		for p := int32(0); p < partitions; p++ {
			if got[p] != int64(g*100)+int64(p) {
				t.Fatalf("after restart, group %d partition %d at %d", g, p, got[p])
			}
		}
	}
}

// TestStorageErrorFailsRequestsThenRecovers: while __consumer_offsets
// cannot be written, requests fail with NOT_COORDINATOR (Kafka's answer
// to KAFKA_STORAGE_ERROR from the append) and the state is what is
// durable; once writes succeed again, the coordinator serves again
// without a restart, and nothing unacknowledged comes back.
func TestStorageErrorFailsRequestsThenRecovers(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := vfs.NewErrorFS(mem, vfs.WritesWhile(&failing, ""))
	s := startServiceBatch(t, fs, 0)
	defer func() { s.Close() }()
	commit := func(group string, offset int64) int16 {
		resp := do[*kmsg.OffsetCommitResponse](t, s, commitReq(group, -1, "", map[int32]int64{0: offset}))
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	if code := commit("g", 1); code != 0 {
		t.Fatalf("commit: %d", code)
	}
	failing.Store(true)
	if code := commit("g", 2); code != kerr.NotCoordinator.Code {
		t.Fatalf("commit on a failing disk: %d, want NOT_COORDINATOR", code)
	}
	// Refused, not stale: the group is not served while its log is down.
	if code := commit("g", 3); code != kerr.NotCoordinator.Code {
		t.Fatalf("second commit on a failing disk: %d", code)
	}
	failing.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code := commit("g", 4)
		if code == 0 {
			break
		}
		if code != kerr.NotCoordinator.Code || time.Now().After(deadline) {
			t.Fatalf("commit after the disk came back: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := fetchAll(t, s, "g"); got[0] != 4 {
		t.Fatalf("offset %d after recovery, want 4", got[0])
	}
	if _, _, code := joinAndSync(t, s, "newgroup", []byte("a")); code != 0 {
		t.Fatalf("a group after recovery: sync error %d", code)
	}
	s.Close()
	s = startServiceBatch(t, mem.Crash(nil), 0)
	if got := fetchAll(t, s, "g"); got[0] != 4 {
		t.Fatalf("offset %d after restart, want 4", got[0])
	}
}

// TestStorageErrorAnswersWaitingJoins: a JoinGroup waiting for a rebalance
// in a partition whose log fails is answered at once (NOT_COORDINATOR),
// not left hanging with its group forgotten.
func TestStorageErrorAnswersWaitingJoins(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := vfs.NewErrorFS(mem, vfs.WritesWhile(&failing, ""))
	s := startServiceBatch(t, fs, 0)
	defer s.Close()
	if _, _, code := joinAndSync(t, s, "g", []byte("a")); code != 0 {
		t.Fatalf("first member: %d", code)
	}
	// A second member's join waits for the first to rejoin.
	waiting := make(chan *kmsg.JoinGroupResponse, 1)
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 9
	join.Group, join.ProtocolType = "g", "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30000, 60000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
	if r := do[*kmsg.JoinGroupResponse](t, s, join); r.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = r.MemberID
	}
	go func() {
		resp, err := s.Do(t.Context(), "test", "/127.0.0.1", join)
		if err != nil {
			t.Error(err)
			return
		}
		waiting <- resp.(*kmsg.JoinGroupResponse)
	}()
	select {
	case r := <-waiting:
		t.Fatalf("the second join did not wait: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	failing.Store(true)
	do[*kmsg.OffsetCommitResponse](t, s, commitReq("other", -1, "", map[int32]int64{0: 1}))
	select {
	case r := <-waiting:
		if r.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("the waiting join got %v, want NOT_COORDINATOR", kerr.ErrorForCode(r.ErrorCode))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting join was never answered")
	}
}

// TestListGroupsWhileAPartitionIsUnloaded: while a __consumer_offsets
// partition is unloaded after a storage error, its groups are missing from
// ListGroups, so the answer is COORDINATOR_LOAD_IN_PROGRESS (with the groups
// still served, as Kafka's while loading; clients retry it), not success
// with groups silently left out; once the partition is back, the group is
// listed again without error.
func TestListGroupsWhileAPartitionIsUnloaded(t *testing.T) {
	var failing atomic.Bool
	fs := vfs.NewErrorFS(vfs.NewMem(), vfs.WritesWhile(&failing, ""))
	s := startServiceBatch(t, fs, 0)
	defer s.Close()
	list := func() *kmsg.ListGroupsResponse {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		return do[*kmsg.ListGroupsResponse](t, s, req)
	}
	commit := func(offset int64) int16 {
		return do[*kmsg.OffsetCommitResponse](t, s, commitReq("g", -1, "", map[int32]int64{0: offset})).Topics[0].Partitions[0].ErrorCode
	}
	if code := commit(1); code != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(code))
	}
	if r := list(); r.ErrorCode != 0 || len(r.Groups) != 1 {
		t.Fatalf("ListGroups: %v, %d groups, want the group", kerr.ErrorForCode(r.ErrorCode), len(r.Groups))
	}
	failing.Store(true)
	if code := commit(2); code != kerr.NotCoordinator.Code {
		t.Fatalf("commit on a failing disk: %v, want NOT_COORDINATOR", kerr.ErrorForCode(code))
	}
	if r := list(); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("ListGroups with the group's partition unloaded: %v with %d groups, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(r.ErrorCode), len(r.Groups))
	}
	failing.Store(false)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := list()
		if r.ErrorCode == 0 {
			if len(r.Groups) != 1 || r.Groups[0].Group != "g" {
				t.Fatalf("ListGroups after recovery: %+v, want g", r.Groups)
			}
			break
		}
		if r.ErrorCode != kerr.CoordinatorLoadInProgress.Code || time.Now().After(deadline) {
			t.Fatalf("ListGroups after the disk came back: %v", kerr.ErrorForCode(r.ErrorCode))
		}
	}
}
