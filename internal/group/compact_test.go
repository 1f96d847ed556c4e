package group

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/vfs"
)

func startCompactingService(t *testing.T, fs vfs.FS) *Service {
	return startCompactingServiceAfter(t, fs, 32<<10)
}

func startCompactingServiceAfter(t *testing.T, fs vfs.FS, compactAfter int64) *Service {
	t.Helper()
	s, err := Start(ServiceConfig{
		FS: fs, DataDir: "/data", Logger: slog.New(slog.DiscardHandler),
		Coordinator:       Config{NodeID: 1, Host: "127.0.0.1", Port: 9092},
		CompactAfterBytes: compactAfter, OffsetsSegmentBytes: 2 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func deleteGroup(t *testing.T, s *Service, group string) {
	t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Version = 2
	req.Groups = []string{group}
	resp := do[*kmsg.DeleteGroupsResponse](t, s, req)
	if code := resp.Groups[0].ErrorCode; code != 0 {
		t.Fatalf("delete group %s: error %d", group, code)
	}
}

// TestOffsetsCompaction: thousands of commits to a few keys keep
// __consumer_offsets small (the log start advances and old segments go),
// and after a reopen the offsets are the last ones committed, a deleted
// group stays deleted.
func TestOffsetsCompaction(t *testing.T) {
	fs := vfs.NewMem()
	s := startCompactingService(t, fs)
	want := map[int32]int64{}
	for i := int64(0); i < 3000; i++ {
		offsets := map[int32]int64{0: i, 1: 2 * i, 2: 3 * i}
		do[*kmsg.OffsetCommitResponse](t, s, commitReq("g", -1, "", offsets))
		want = offsets
		if i == 10 {
			do[*kmsg.OffsetCommitResponse](t, s, commitReq("gone", -1, "", map[int32]int64{0: 7}))
			deleteGroup(t, s, "gone")
		}
	}
	l := s.Store().Log(0)
	size, start := l.Size(), l.LogStartOffset()
	if start == 0 || size > 256<<10 {
		t.Fatalf("after 3000 commits: log start %d, %d bytes: not compacted", start, size)
	}
	t.Logf("3000 commits: log start %d, high watermark %d, %d bytes on disk", start, l.HighWatermark(), size)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = startCompactingService(t, fs)
	defer s.Close()
	got := fetchAll(t, s, "g")
	for p, o := range want {
		if got[p] != o {
			t.Fatalf("after reopen: partition %d at %d, want %d", p, got[p], o)
		}
	}
	if gone := fetchAll(t, s, "gone"); len(gone) != 0 {
		t.Fatalf("deleted group came back with offsets %v", gone)
	}
}

// TestOffsetsCompactionCrash: a crash at any sync point of a compaction
// (snapshot batches appended, log start not yet advanced, segments being
// deleted) recovers to the same committed offsets.
func TestOffsetsCompactionCrash(t *testing.T) {
	fs := vfs.NewMem()
	var (
		mu        sync.Mutex
		snapshots []*vfs.MemFS
	)
	rng := rand.New(rand.NewPCG(7, 7))
	s := startCompactingServiceAfter(t, fs, 4<<10)
	want := map[int32]int64{}
	for i := int64(0); i < 400; i++ {
		if i == 300 {
			// From here on, remember the disk at every sync: some of
			// them fall inside compactions.
			fs.SetSyncHook(func(op vfs.Op, name string) {
				mu.Lock()
				snapshots = append(snapshots, fs.Crash(rng))
				mu.Unlock()
			})
		}
		offsets := map[int32]int64{0: i, 1: i + 1}
		do[*kmsg.OffsetCommitResponse](t, s, commitReq("g", -1, "", offsets))
		want = offsets
	}
	fs.SetSyncHook(nil)
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(snapshots) < 100 {
		t.Fatalf("only %d sync points", len(snapshots))
	}
	logStarts := map[int64]bool{}
	for i, snap := range snapshots {
		s := startCompactingServiceAfter(t, snap, 4<<10)
		got := fetchAll(t, s, "g")
		// Every snapshot was taken after commit 299 was acknowledged;
		// the offsets are that commit's or a later one's, never older,
		// never a mix of partitions out of step.
		if got[0] < 299 || got[1] != got[0]+1 || got[0] > want[0] {
			t.Fatalf("crash point %d: offsets %v", i, got)
		}
		logStarts[s.Store().Log(0).LogStartOffset()] = true
		s.Close()
	}
	// Several compactions happened between the crash points, so some of
	// the points fall inside one.
	if len(logStarts) < 3 {
		t.Fatalf("crash points saw only log starts %v: too few compactions to test", logStarts)
	}
	t.Logf("%d crash points across %d compactions", len(snapshots), len(logStarts))
}
