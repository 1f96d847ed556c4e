package group

import (
	"context"

	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/coordloop/replicatest"
)

// The coordinator over a replicated __consumer_offsets (docs/replication.md
// 4d): three in-process nodes, each with a Service whose shards follow the
// partitions' raft leadership.

// replicatedGroups is a cluster and each node's group Service.
type replicatedGroups struct {
	t        *testing.T
	c        *replicatest.Cluster
	services []*Service
}

// startReplicatedGroups starts three nodes with partitions of
// __consumer_offsets and a Service on each; hook (may be nil) is each
// node's AfterReplay.
func startReplicatedGroups(t *testing.T, partitions int, cfg Config, hook func(node uint64, p int32, term uint64)) *replicatedGroups {
	t.Helper()
	rg := &replicatedGroups{t: t, c: replicatest.New(t, 3, partitions, OffsetsTopic)}
	for id := uint64(1); id <= 3; id++ {
		r := rg.c.Replicated(id)
		if hook != nil {
			r.AfterReplay = func(p int32, term uint64) { hook(id, p, term) }
		}
		cfg := cfg
		cfg.NodeID = int32(id - 1)
		s, err := Start(ServiceConfig{Coordinator: cfg, Logger: replicatest.Quiet, Replicated: r})
		if err != nil {
			t.Fatal(err)
		}
		rg.c.OnLeader(id, s.LeaderChanged)
		rg.services = append(rg.services, s)
	}
	t.Cleanup(func() {
		for _, s := range rg.services {
			s.Close()
		}
	})
	return rg
}

func (rg *replicatedGroups) svc(id uint64) *Service { return rg.services[id-1] }

// do sends one request to node id's coordinator, bounded.
func (rg *replicatedGroups) do(id uint64, req kmsg.Request) kmsg.Response {
	rg.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rg.svc(id).Do(ctx, "client", "127.0.0.1", req)
	if err != nil {
		rg.t.Fatalf("node %d: %v", id, err)
	}
	return resp
}

func offsetCommitReq(group string, offset int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.Generation = 8, group, -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "events"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = 0, offset
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

func offsetFetchReq(group string) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 7, group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic, t.Partitions = "events", []int32{0}
	req.Topics = append(req.Topics, t)
	return req
}

// commit is one OffsetCommit's code.
func (rg *replicatedGroups) commit(id uint64, group string, offset int64) int16 {
	resp := rg.do(id, offsetCommitReq(group, offset)).(*kmsg.OffsetCommitResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// fetch is one OffsetFetch's code and offset (-1: none committed).
func (rg *replicatedGroups) fetch(id uint64, group string) (int16, int64) {
	resp := rg.do(id, offsetFetchReq(group)).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, -1
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.Offset
}

// movedCode reports whether code is what a request gets from a node that
// does not (or not yet) serve the group's partition.
func movedCode(code int16) bool {
	return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorLoadInProgress.Code || code == kerr.CoordinatorNotAvailable.Code
}

// awaitServing ticks until node id's coordinator serves the group
// (an OffsetFetch answered without a coordinator error).
func (rg *replicatedGroups) awaitServing(id uint64, group string) {
	rg.t.Helper()
	rg.c.TickUntil(300, fmt.Sprintf("node %d serving %q", id, group), func() bool {
		code, _ := rg.fetch(id, group)
		return !movedCode(code)
	})
}

// TestOffsetsSurviveLeaderStopped: offsets committed (acks=all through the
// partition's raft group) on the leader's coordinator are served by the
// next leader's coordinator after the first one's node is stopped; the
// followers' coordinators answer NOT_COORDINATOR all along. Fails with the
// load not waiting for the replica to take appends (it is refused at
// install, and the partition is never served).
func TestOffsetsSurviveLeaderStopped(t *testing.T) {
	rg := startReplicatedGroups(t, 2, Config{}, nil)
	const group = "survivor"
	p := PartitionFor(group, 2)
	rg.c.Elect(1, p)
	rg.awaitServing(1, group)
	for i := int64(1); i <= 20; i++ {
		if code := rg.commit(1, group, i*10); code != 0 {
			t.Fatalf("commit %d on the leader: %v", i, kerr.ErrorForCode(code))
		}
	}
	for _, follower := range []uint64{2, 3} {
		if code := rg.commit(follower, group, 999); code != kerr.NotCoordinator.Code {
			t.Fatalf("commit on follower %d: %v, want NOT_COORDINATOR", follower, kerr.ErrorForCode(code))
		}
		if code, off := rg.fetch(follower, group); code != kerr.NotCoordinator.Code {
			t.Fatalf("fetch on follower %d: %v at %d, want NOT_COORDINATOR", follower, kerr.ErrorForCode(code), off)
		}
	}
	rg.c.Stop(1)
	stopped := time.Now()
	stop := rg.c.Ticking()
	defer stop()
	var next uint64
	deadline := time.Now().Add(10 * time.Second)
	for next == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no new leader of the group's partition")
		}
		next = rg.c.Leader(p)
		time.Sleep(10 * time.Millisecond)
	}
	for {
		code, off := rg.fetch(next, group)
		if code == 0 {
			if off != 200 {
				t.Fatalf("node %d after the failover: offset %d, want 200 (the last commit acknowledged)", next, off)
			}
			t.Logf("node %d serves the group %v after node 1 stopped (ticks every 10 ms)", next, time.Since(stopped).Round(time.Millisecond))
			break
		}
		if !movedCode(code) || time.Now().After(deadline) {
			t.Fatalf("node %d after the failover: %v", next, kerr.ErrorForCode(code))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := rg.commit(next, group, 210); code != 0 {
		t.Fatalf("commit on the new leader: %v", kerr.ErrorForCode(code))
	}
}

// TestNeverAWrongAnswerDuringMoves: a committer commits rising offsets
// through whichever node answers while leadership of the partition is
// moved three times and then its leader's node stopped; a reader asks all
// three nodes. Every answer is a coordinator error (NOT_COORDINATOR while
// moving) or an offset no older than the last commit acknowledged before
// the fetch was sent: no node ever answers from a state it should have
// dropped. Fails with shards that do not unload when another node is
// reported leader (a resigned coordinator answers its stale offset) and
// with a load installed without its epoch check.
func TestNeverAWrongAnswerDuringMoves(t *testing.T) {
	rg := startReplicatedGroups(t, 1, Config{}, nil)
	const group = "mover"
	rg.c.Elect(1, 0)
	rg.awaitServing(1, group)
	stop := rg.c.Ticking()
	defer stop()

	var acked atomic.Int64 // the highest offset whose commit was acknowledged
	acked.Store(-1)
	var wrong atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	ask := func(id uint64, req kmsg.Request) (kmsg.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rg.svc(id).Do(ctx, "client", "127.0.0.1", req)
	}
	// untilDone calls fn with each live node in turn until done.
	untilDone := func(fn func(id uint64)) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for id := uint64(1); id <= 3; id++ {
				if !rg.c.Stopped(id) {
					fn(id)
				}
			}
		}
	}
	wg.Add(2)
	next := int64(1)               // the committer's
	go untilDone(func(id uint64) { // the committer
		resp, err := ask(id, offsetCommitReq(group, next))
		if err != nil {
			return
		}
		switch code := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; {
		case code == 0:
			acked.Store(next)
			next++
		case !movedCode(code):
			wrong.Store(fmt.Sprintf("commit on node %d: %v", id, kerr.ErrorForCode(code)))
		}
		time.Sleep(time.Millisecond / 3)
	})
	go untilDone(func(id uint64) { // the reader
		before := acked.Load()
		resp, err := ask(id, offsetFetchReq(group))
		if err != nil {
			return
		}
		r := resp.(*kmsg.OffsetFetchResponse)
		code, off := r.ErrorCode, int64(-1)
		if code == 0 {
			code, off = r.Topics[0].Partitions[0].ErrorCode, r.Topics[0].Partitions[0].Offset
		}
		switch {
		case movedCode(code):
		case code != 0:
			wrong.Store(fmt.Sprintf("fetch on node %d: %v", id, kerr.ErrorForCode(code)))
		case off < before:
			wrong.Store(fmt.Sprintf("fetch on node %d: offset %d, but %d was acknowledged before it was asked", id, off, before))
		}
	})
	waitCommits := func(n int64) {
		t.Helper()
		want := acked.Load() + n
		deadline := time.Now().Add(10 * time.Second)
		for acked.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("commits stalled at %d (leader %d)", acked.Load(), rg.c.Leader(0))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCommits(20)
	for _, to := range []uint64{2, 3, 1} {
		if err := rg.c.Nodes[rg.leaderOrFail()-1].TransferLeadership(1, to); err != nil {
			t.Fatal(err)
		}
		waitCommits(20)
	}
	rg.c.Stop(rg.leaderOrFail())
	waitCommits(20)
	close(done)
	wg.Wait()
	if w := wrong.Load(); w != nil {
		t.Fatal(w)
	}
	last := rg.leaderOrFail()
	if code, off := rg.fetch(last, group); code != 0 || off != acked.Load() {
		t.Fatalf("the last leader (node %d) has %d (%v), want the last acknowledged %d", last, off, kerr.ErrorForCode(code), acked.Load())
	}
}

// leaderOrFail waits (the cluster ticking) for partition 0's leader.
func (rg *replicatedGroups) leaderOrFail() uint64 {
	rg.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l := rg.c.Leader(0); l != 0 {
			return l
		}
		if time.Now().After(deadline) {
			rg.t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMemberContinuesAfterFailover: classic groups whose member joined
// and synced (generation 1) are loaded by the next coordinator from the
// log, as Kafka's GroupMetadataManager loads a group: Stable at generation
// 1 with the assignment, each loaded member's session started again at the
// load (Kafka reschedules every loaded member's heartbeat expiration). So
// one member's heartbeat and its generation's commit are accepted (it
// continues, no rejoin), and the other, silent, expires one session
// timeout after the load: not before, and not never. Fails with the
// sessions not restarted at load (the silent member is not expired within
// three sessions).
func TestMemberContinuesAfterFailover(t *testing.T) {
	const session = 2 * time.Second
	rg := startReplicatedGroups(t, 1, Config{MinSessionTimeout: 100 * time.Millisecond}, nil)
	rg.c.Elect(1, 0)
	rg.awaitServing(1, "continues")
	// A longer session for the member that continues: its deadline must
	// not be the tick that expires the silent one.
	continues := rg.joinAndSync(1, "continues", 4*session)
	rg.joinAndSync(1, "silent", session)

	rg.c.Stop(1)
	rg.c.Elect(2, 0)
	rg.awaitServing(2, "continues")
	loadedAt := time.Now()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.Generation, hb.MemberID = 3, "continues", 1, continues
	if r := rg.do(2, hb).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		t.Fatalf("heartbeat on the new coordinator: %v, want the member to continue at generation 1", kerr.ErrorForCode(r.ErrorCode))
	}
	commit := offsetCommitReq("continues", 77)
	commit.Generation, commit.MemberID = 1, continues
	if r := rg.do(2, commit).(*kmsg.OffsetCommitResponse); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("the member's commit on the new coordinator: %v", kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode))
	}
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Groups = []string{"silent"}
	d := rg.do(2, describe).(*kmsg.DescribeGroupsResponse).Groups[0]
	if d.State != "Stable" || len(d.Members) != 1 || string(d.Members[0].MemberAssignment) != "assignment" {
		t.Fatalf("loaded group: %s with %d members", d.State, len(d.Members))
	}
	for {
		d = rg.do(2, describe).(*kmsg.DescribeGroupsResponse).Groups[0]
		if len(d.Members) == 0 {
			break
		}
		if time.Since(loadedAt) > 3*session {
			t.Fatalf("the silent member never expired (state %s)", d.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gone := time.Since(loadedAt); gone < session-200*time.Millisecond {
		t.Fatalf("the silent member expired %v after the load, before its %v session", gone, session)
	}
}

// joinAndSync makes one member join group on node id and sync an
// assignment: generation 1, Stable.
func (rg *replicatedGroups) joinAndSync(id uint64, group string, session time.Duration) (member string) {
	rg.t.Helper()
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = 5, group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = int32(session/time.Millisecond), 5000
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", []byte{0, 1}
	join.Protocols = append(join.Protocols, proto)
	jr := rg.do(id, join).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = jr.MemberID
		jr = rg.do(id, join).(*kmsg.JoinGroupResponse)
	}
	if jr.ErrorCode != 0 || jr.Generation != 1 {
		rg.t.Fatalf("join %q: %v generation %d", group, kerr.ErrorForCode(jr.ErrorCode), jr.Generation)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version, sync.Group, sync.Generation, sync.MemberID = 3, group, 1, jr.MemberID
	a := kmsg.NewSyncGroupRequestGroupAssignment()
	a.MemberID, a.MemberAssignment = jr.MemberID, []byte("assignment")
	sync.GroupAssignment = append(sync.GroupAssignment, a)
	if sr := rg.do(id, sync).(*kmsg.SyncGroupResponse); sr.ErrorCode != 0 {
		rg.t.Fatalf("sync %q: %v", group, kerr.ErrorForCode(sr.ErrorCode))
	}
	return jr.MemberID
}

// TestLeadershipLostDuringReplay: node 2 is elected while node 1 led, and
// its replay is held; leadership goes back to node 1, which commits a new
// offset; released, node 2's replay is abandoned (it answers
// NOT_COORDINATOR, never the offset it read). Elected again (lead, lose,
// lead in a new term), node 2 replays again and serves the newest offset.
// Fails with the load installed without its epoch check (node 2 serves
// the stale offset 5) and with shards that do not unload when another
// node is reported leader (node 1 answers its stale offset 9).
func TestLeadershipLostDuringReplay(t *testing.T) {
	hold := make(chan struct{})
	held := make(chan uint64, 1)
	var once sync.Once
	rg := startReplicatedGroups(t, 1, Config{}, func(node uint64, _ int32, term uint64) {
		if node != 2 {
			return
		}
		first := false
		once.Do(func() { first = true })
		if first {
			held <- term
			<-hold
		}
	})
	// Released at the latest before the Services close (cleanups run
	// last in, first out): Close waits for the held load.
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) })
	const group = "flap"
	rg.c.Elect(1, 0)
	rg.awaitServing(1, group)
	if code := rg.commit(1, group, 5); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	rg.c.Elect(2, 0)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("node 2 never replayed")
	}
	// Loading: Kafka's answer while a partition loads.
	if code, off := rg.fetch(2, group); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("node 2 while it replays: %v offset %d, want COORDINATOR_LOAD_IN_PROGRESS", kerr.ErrorForCode(code), off)
	}
	rg.c.Elect(1, 0)
	rg.awaitServing(1, group)
	if code := rg.commit(1, group, 9); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	release.Do(func() { close(hold) })
	for range 20 { // the abandoned replay's hand-off has run by now
		rg.c.Tick()
	}
	if code, off := rg.fetch(2, group); code != kerr.NotCoordinator.Code {
		t.Fatalf("node 2 after its replay was overtaken: %v offset %d, want NOT_COORDINATOR", kerr.ErrorForCode(code), off)
	}
	rg.c.Elect(2, 0)
	rg.awaitServing(2, group)
	if code, off := rg.fetch(2, group); code != 0 || off != 9 {
		t.Fatalf("node 2 leading again: %v offset %d, want 9", kerr.ErrorForCode(code), off)
	}
	if code := rg.commit(2, group, 10); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	// Node 1 resigned and has not written since: it must have dropped
	// its state, not answer from it.
	if code, off := rg.fetch(1, group); code != kerr.NotCoordinator.Code {
		t.Fatalf("node 1 after it resigned: %v offset %d, want NOT_COORDINATOR", kerr.ErrorForCode(code), off)
	}
	if code := rg.commit(1, group, 11); code != kerr.NotCoordinator.Code {
		t.Fatalf("node 1 after it resigned: %v, want NOT_COORDINATOR", kerr.ErrorForCode(code))
	}
}

// TestWaitingJoinAnsweredNotCoordinatorOnMove: a JoinGroup waiting in a
// rebalance (a second member joined; the first has not rejoined) when
// leadership of the group's partition moves to another node is answered
// NOT_COORDINATOR at once, as Kafka's unload answers the requests it holds
// (the client finds the new coordinator and joins there); the new
// coordinator has the group as the log holds it (Stable, generation 1, the
// first member) and takes the second member's join. Fails with
// UnloadPartition not answering the waiting requests (the join is never
// answered).
func TestWaitingJoinAnsweredNotCoordinatorOnMove(t *testing.T) {
	const session = 10 * time.Second
	rg := startReplicatedGroups(t, 1, Config{}, nil)
	const group = "rebalancing"
	rg.c.Elect(1, 0)
	rg.awaitServing(1, group)
	first := rg.joinAndSync(1, group, session)

	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = 5, group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = int32(session/time.Millisecond), int32(session/time.Millisecond)
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", []byte{0, 1}
	join.Protocols = append(join.Protocols, proto)
	waiting := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		resp, err := rg.svc(1).Do(ctx, "client", "127.0.0.1", join)
		if err != nil {
			waiting <- nil
			return
		}
		waiting <- resp.(*kmsg.JoinGroupResponse)
	}()
	// The join waits for the first member to rejoin (v5: a join without
	// a member id first gets MEMBER_ID_REQUIRED; franz-go rejoins at once).
	var r *kmsg.JoinGroupResponse
	select {
	case r = <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no MEMBER_ID_REQUIRED")
	}
	if r == nil || r.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: %+v", r)
	}
	join.MemberID = r.MemberID
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		resp, err := rg.svc(1).Do(ctx, "client", "127.0.0.1", join)
		if err != nil {
			waiting <- nil
			return
		}
		waiting <- resp.(*kmsg.JoinGroupResponse)
	}()
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Groups = []string{group}
	rg.c.TickUntil(300, "the group rebalancing", func() bool {
		return rg.do(1, describe).(*kmsg.DescribeGroupsResponse).Groups[0].State == "PreparingRebalance"
	})
	select {
	case r := <-waiting:
		t.Fatalf("the second join answered before the first member rejoined: %+v", r)
	default:
	}
	moved := time.Now()
	rg.c.Elect(2, 0)
	select {
	case r := <-waiting:
		if r == nil || r.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("the waiting join after the move: %+v, want NOT_COORDINATOR", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting join not answered after leadership moved")
	}
	if took := time.Since(moved); took > 5*time.Second {
		t.Fatalf("the waiting join answered %v after the move", took)
	}
	rg.awaitServing(2, group)
	d := rg.do(2, describe).(*kmsg.DescribeGroupsResponse).Groups[0]
	if d.State != "Stable" || len(d.Members) != 1 || d.Members[0].MemberID != first {
		t.Fatalf("the group on the new coordinator: %s with %d members, want Stable with the first", d.State, len(d.Members))
	}
}
