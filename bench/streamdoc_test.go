package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func rounds(rates ...float64) []StreamRound {
	var out []StreamRound
	for _, r := range rates {
		out = append(out, StreamRound{Published: int(r), Messages: int(r), Window: time.Second, PollWait: 600 * time.Millisecond})
	}
	return out
}

// TestStreamScenarioFinish: the overheads are the medians' gap in percent
// of the raw median (positive: slower), the verdict is indistinguishable
// only below the larger best-to-worst spread, and broker_bound follows the
// raw loop's median poll wait.
func TestStreamScenarioFinish(t *testing.T) {
	s := &StreamScenario{Name: "x", Target: "t", Unit: "msg/s", Messages: 100, Pairs: 3,
		Raw:       SummarizeLoop(rounds(1000, 990, 980)),
		Adapter:   SummarizeLoop(rounds(995, 985, 990)),
		Framework: SummarizeLoop(rounds(900, 890, 880)),
	}
	s.Finish()
	if s.Verdict != Measured || s.OverheadPercent != 10.1 {
		t.Errorf("framework: %s %v%%, want measured 10.1%% ((990-890)/990)", s.Verdict, s.OverheadPercent)
	}
	if s.AdapterVerdict != Indistinguishable || s.AdapterOverheadPercent != 0 {
		t.Errorf("adapter: %s %v%%, want indistinguishable 0%%", s.AdapterVerdict, s.AdapterOverheadPercent)
	}
	if s.RuntimeVerdict != Measured || s.RuntimeOverheadPercent != 10.1 {
		t.Errorf("runtime: %s %v%%, want measured 10.1%% ((990-890)/990, the adapter's median)", s.RuntimeVerdict, s.RuntimeOverheadPercent)
	}
	if !s.BrokerBound || s.RawPollWaitPercent != 60 {
		t.Errorf("broker_bound %v at %v%%, want true at 60%%", s.BrokerBound, s.RawPollWaitPercent)
	}
	s.Raw = SummarizeLoop([]StreamRound{{Published: 1000, Messages: 1000, Window: time.Second, PollWait: 400 * time.Millisecond},
		{Published: 1000, Messages: 1000, Window: time.Second, PollWait: 900 * time.Millisecond},
		{Published: 1000, Messages: 1000, Window: time.Second, PollWait: 100 * time.Millisecond}})
	s.Finish()
	if s.BrokerBound || s.RawPollWaitPercent != 40 {
		t.Errorf("broker_bound %v at %v%%, want false at the median round's 40%%", s.BrokerBound, s.RawPollWaitPercent)
	}
}

// TestStreamDocumentValidate: a complete row passes; a loop that lost a
// message, a missing round or an empty passport field is reported.
func TestStreamDocumentValidate(t *testing.T) {
	row := func() *StreamScenario {
		s := &StreamScenario{Name: "x", Target: "t", Unit: "msg/s", Messages: 1000, Pairs: 3,
			Raw: SummarizeLoop(rounds(1000, 1000, 1000)), Adapter: SummarizeLoop(rounds(1000, 1000, 1000)),
			Framework: SummarizeLoop(rounds(1000, 1000, 1000))}
		s.Finish()
		return s
	}
	d := NewStreamDocument("test", "sushka bench stream")
	d.Environment.Broker, d.Environment.RoundTrip = "b", "r"
	d.Scenarios = []*StreamScenario{row()}
	if err := d.Validate(); err != nil {
		t.Fatalf("a complete document: %v", err)
	}
	lost := row()
	lost.Framework.Received[1] = 999
	short := row()
	short.Adapter = SummarizeLoop(rounds(1000, 1000))
	d.Scenarios = []*StreamScenario{lost, short}
	d.Environment.MemorySpeed = ""
	err := d.Validate()
	for _, want := range []string{"framework round 2 handled 999 of 1000", "adapter has 2 rounds", "memory_speed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to say %q", err, want)
		}
	}
}

// TestReadCodeRows reads costbench's own results.json and rejects a row
// that lacks what the schema requires.
func TestReadCodeRows(t *testing.T) {
	rows, err := ReadCodeRows(filepath.Join("..", "stream", "internal", "costbench", "results.json"))
	if err != nil || len(rows) == 0 {
		t.Fatalf("costbench's results.json: %d rows, %v", len(rows), err)
	}
	bad := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(bad, []byte(`{"code":[{"name":"x","messages":1000,"framework":{"instructions":1,"allocations":0},"cold":{"instructions":1,"allocations":0}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCodeRows(bad); err == nil || !strings.Contains(err.Error(), "gated") {
		t.Errorf("a row without gated: %v", err)
	}
}
