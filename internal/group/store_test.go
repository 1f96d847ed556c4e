package group

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

func startService(t *testing.T, fs vfs.FS) *Service {
	t.Helper()
	s, err := Start(ServiceConfig{FS: fs, DataDir: "/data", Logger: slog.New(slog.DiscardHandler), Coordinator: Config{NodeID: 1, Host: "127.0.0.1", Port: 9092}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func do[R kmsg.Response](t *testing.T, s *Service, req kmsg.Request) R {
	t.Helper()
	resp, err := s.Do(context.Background(), "test", "/127.0.0.1", req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(R)
}

func commitReq(group string, generation int32, member string, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group, req.Generation, req.MemberID = group, generation, member
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	for p := int32(0); p < int32(len(offsets)); p++ {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, offsets[p]
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func fetchAll(t *testing.T, s *Service, group string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	req.Groups = append(req.Groups, rg)
	resp := do[*kmsg.OffsetFetchResponse](t, s, req)
	got := map[int32]int64{}
	for _, g := range resp.Groups {
		if g.ErrorCode != 0 {
			t.Fatalf("fetch %s: error %d", group, g.ErrorCode)
		}
		for _, tp := range g.Topics {
			for _, p := range tp.Partitions {
				got[p.Partition] = p.Offset
			}
		}
	}
	return got
}

// TestServiceReopen: commit, close, reopen: the offsets are there, and so
// is the group with its member and assignment.
func TestServiceReopen(t *testing.T) {
	fs := vfs.NewMem()
	s := startService(t, fs)

	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 9
	join.Group, join.ProtocolType = "g", "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 30000, 60000
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"t"}
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: md.AppendTo(nil)}}
	jr := do[*kmsg.JoinGroupResponse](t, s, join)
	join.MemberID = jr.MemberID
	jr = do[*kmsg.JoinGroupResponse](t, s, join)
	if jr.ErrorCode != 0 || jr.Generation != 1 {
		t.Fatalf("join: %+v", jr)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version = 5
	sync.Group, sync.MemberID, sync.Generation = "g", jr.MemberID, 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: []byte("assigned")}}
	if sr := do[*kmsg.SyncGroupResponse](t, s, sync); sr.ErrorCode != 0 {
		t.Fatalf("sync: %+v", sr)
	}
	want := map[int32]int64{0: 10, 1: 20, 2: 30}
	cr := do[*kmsg.OffsetCommitResponse](t, s, commitReq("g", 1, jr.MemberID, want))
	for _, p := range cr.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("commit: %+v", cr)
		}
	}
	do[*kmsg.OffsetCommitResponse](t, s, commitReq("simple", -1, "", map[int32]int64{0: 7}))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = startService(t, fs)
	defer s.Close()
	if got := fetchAll(t, s, "g"); !equalOffsets(got, want) {
		t.Fatalf("after reopen: offsets %v, want %v", got, want)
	}
	if got := fetchAll(t, s, "simple"); got[0] != 7 {
		t.Fatalf("after reopen: simple offsets %v", got)
	}
	dr := kmsg.NewPtrDescribeGroupsRequest()
	dr.Version = 5
	dr.Groups = []string{"g"}
	d := do[*kmsg.DescribeGroupsResponse](t, s, dr)
	g := d.Groups[0]
	if g.State != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != jr.MemberID || string(g.Members[0].MemberAssignment) != "assigned" {
		t.Fatalf("after reopen: group %+v", g)
	}
	// The member carries on with its generation.
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", jr.MemberID, 1
	if r := do[*kmsg.HeartbeatResponse](t, s, hb); r.ErrorCode != 0 {
		t.Fatalf("heartbeat after reopen: %d", r.ErrorCode)
	}
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCrashKeepsAcknowledgedCommits commits from several goroutines, each
// to its own partition with increasing offsets, crashes the in-memory
// filesystem at a random moment (unsynced writes torn or lost), and
// restarts on what survived: every commit acknowledged before the crash is
// there (the partition's offset is at least the last acknowledged one),
// and nothing that was never committed appears.
func TestCrashKeepsAcknowledgedCommits(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 0xc0ffee))
		fs := vfs.NewMem()
		s := startService(t, fs)
		const committers = 4
		var acked [committers]atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		for c := range committers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next := int64(1); !stop.Load() && next < 10000; next++ {
					req := commitReq("g", -1, "", map[int32]int64{0: 0})
					req.Topics[0].Partitions[0].Partition = int32(c)
					req.Topics[0].Partitions[0].Offset = next
					resp, err := s.Do(context.Background(), "test", "", req)
					if err != nil {
						return
					}
					if resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode == 0 {
						acked[c].Store(next)
					}
				}
			}()
		}
		time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
		var before [committers]int64
		for c := range before {
			before[c] = acked[c].Load()
		}
		crashed := fs.Crash(rng)
		stop.Store(true)
		wg.Wait()
		s.Close()

		s = startService(t, crashed)
		got := fetchAll(t, s, "g")
		s.Close()
		for c := range committers {
			o, ok := got[int32(c)]
			if !ok {
				o = 0
			}
			if o < before[c] {
				t.Fatalf("round %d: partition %d: offset %d after the crash, but %d was acknowledged before it", round, c, o, before[c])
			}
			if o > acked[c].Load()+1 {
				t.Fatalf("round %d: partition %d: offset %d was never committed (last sent %d)", round, c, o, acked[c].Load()+1)
			}
		}
		if round == 0 {
			t.Logf("round 0: acknowledged before the crash %v, recovered %v", before, got)
		}
	}
}
