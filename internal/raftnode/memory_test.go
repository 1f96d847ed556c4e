package raftnode

import (
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
)

// TestGroupMemory: what an idle group costs on a node (RawNode, progress,
// MemStorage with its bootstrap snapshot, inbox), measured as heap per group
// over 2,000 groups. The bound is the regression gate; docs/replication.md
// section 3 budgets ~1 KiB for RawNode and progress.
func TestGroupMemory(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ID: 1, Listener: ln, ManualTicks: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	const groups = 2000
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for g := range groups {
		if err := n.AddGroup(GroupConfig{ID: uint64(g + 1), Voters: []uint64{1, 2, 3}, Storage: NewMemStorage()}); err != nil {
			t.Fatal(err)
		}
	}
	per := (heap() - before) / groups
	t.Logf("%d bytes of heap per idle group (rf=3, MemStorage)", per)
	if per > 16<<10 {
		t.Fatalf("%d bytes per idle group, want at most 16 KiB", per)
	}
}
