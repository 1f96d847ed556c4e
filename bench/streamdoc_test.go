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

// TestStreamScenarioCPUAndPublishBound: the CPU comparisons are the
// medians' gap in percent of the raw median (positive: costs more), and a
// single publish-bound round withholds every verdict, which Validate then
// accepts, and only then.
func TestStreamScenarioCPUAndPublishBound(t *testing.T) {
	withCPU := func(micros ...float64) []StreamRound {
		var out []StreamRound
		for _, us := range micros {
			out = append(out, StreamRound{Published: 1000, Messages: 1000, Window: time.Second, CPU: time.Duration(us * 1000 * float64(time.Microsecond)),
				AfterPublish: 2 * time.Second, HasPublishStop: true})
		}
		return out
	}
	row := func() *StreamScenario {
		s := &StreamScenario{Name: "x", Target: "t", Unit: "msg/s", Messages: 1000, Pairs: 3,
			Raw: SummarizeLoop(withCPU(10, 10.2, 10.1)), Adapter: SummarizeLoop(withCPU(10.1, 10.3, 10.2)),
			Framework: SummarizeLoop(withCPU(12, 12.1, 12.2))}
		s.Finish()
		return s
	}
	s := row()
	if s.CPUVerdict != Measured || s.CPUOverheadPercent != 19.8 {
		t.Errorf("framework CPU: %s %v%%, want measured 19.8%% ((12.1-10.1)/10.1)", s.CPUVerdict, s.CPUOverheadPercent)
	}
	if s.AdapterCPUVerdict != Indistinguishable {
		t.Errorf("adapter CPU: %s, want indistinguishable", s.AdapterCPUVerdict)
	}
	if s.Framework.CPUPerMessage.Best != 12 || s.Framework.CPUPerMessage.Worst != 12.2 {
		t.Errorf("framework CPU rounds %+v: best is the lowest", s.Framework.CPUPerMessage)
	}
	if s.PublishBoundRounds != 0 || s.Verdict == PublishBound {
		t.Errorf("no publish-bound round, yet %d and verdict %s", s.PublishBoundRounds, s.Verdict)
	}
	d := NewStreamDocument("test", "sushka bench stream")
	d.Environment.Broker, d.Environment.RoundTrip = "b", "r"
	d.Scenarios = []*StreamScenario{s}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Verdict = PublishBound
	if err := d.Validate(); err == nil {
		t.Error("a publish-bound verdict without a publish-bound round passed")
	}

	s = row()
	fr := withCPU(12, 12.1, 12.2)
	fr[1].PublishBound, fr[1].AfterPublish = true, 3*time.Millisecond
	s.Framework = SummarizeLoop(fr)
	s.Finish()
	for _, v := range []string{s.Verdict, s.AdapterVerdict, s.RuntimeVerdict, s.CPUVerdict, s.AdapterCPUVerdict, s.RuntimeCPUVerdict} {
		if v != PublishBound {
			t.Errorf("a row with a publish-bound round gave verdict %q", v)
		}
	}
	if s.PublishBoundRounds != 1 || s.Framework.AfterPublishSeconds[1] != 0.003 {
		t.Errorf("publish-bound rounds %d, after-publish %v", s.PublishBoundRounds, s.Framework.AfterPublishSeconds)
	}
	d.Scenarios = []*StreamScenario{s}
	if err := d.Validate(); err != nil {
		t.Errorf("a publish-bound row: %v", err)
	}
}
