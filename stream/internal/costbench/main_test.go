package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sushka-io/sushka/stream/internal/deliverycost"
)

// TestScenariosDeliver runs every scenario without valgrind: each must
// deliver all its records and stop, or the measurement would hang.
func TestScenariosDeliver(t *testing.T) {
	for _, sc := range deliverycost.Scenarios {
		deliver(sc, 10, false)
		if allocs := deliver(sc, 300, false); allocs == 0 {
			t.Fatalf("%s: no allocations counted at all: the counter is not measuring", sc.Name)
		}
	}
}

// TestGateDecisions: the gate's two rules on rows, as -compare applies them.
func TestGateDecisions(t *testing.T) {
	base := row{Framework: measured{Instructions: 1000}}
	for _, c := range []struct {
		instructions float64
		fails        bool
	}{{1000, false}, {1019, false}, {1021, true}, {900, false}} {
		r := row{Framework: measured{Instructions: c.instructions}}
		if got := instructionsChangePercent(r, base) > gateInstructionsPercent; got != c.fails {
			t.Errorf("%v instructions against 1000: fails %v, want %v", c.instructions, got, c.fails)
		}
	}
	if aboveFloor(row{Floor: 4, Framework: measured{Allocations: 4.005}}) {
		t.Error("4.005 allocations per message fail a floor of 4: the slack is for a stray sudog")
	}
	if !aboveFloor(row{Floor: 0, Framework: measured{Allocations: 1}}) {
		t.Error("one allocation per message passes a floor of 0")
	}
}

// TestCountedInstructionsLeaveOutSysmon: the per-thread files are summed,
// except the thread running runtime.sysmon.
func TestCountedInstructionsLeaveOutSysmon(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"out-01": "version: 1\ncreator: callgrind\nsummary: 1000\nfn=(1) main.main\n",
		"out-02": "version: 1\nsummary: 70\nfn=(7) runtime.sysmon\n",
		"out-03": "version: 1\nsummary: 20\nfn=(3) runtime.schedule\n",
	}
	var paths []string
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	got, err := countedInstructions(paths)
	if err != nil || got != 1020 {
		t.Fatalf("counted %v (%v), want 1020: every thread but sysmon's", got, err)
	}
	if err := os.WriteFile(paths[0], []byte("no summary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := countedInstructions(paths); err == nil {
		t.Fatal("a file without a summary line counted as zero")
	}
}
