package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/bench/streambench"
	"github.com/sushka-io/sushka/test/testbroker"
)

// TestBenchStream runs `sushka bench stream` end to end, briefly, with the
// broker started by the command itself as a child process from the built
// binary, and checks the document against the schema: every scenario, the
// three loops with their rounds, every round having handled every message,
// the verdicts, the passport fields, and the code rows from costbench.
func TestBenchStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the broker")
	}
	bin := testbroker.Binary(t)
	js := filepath.Join(t.TempDir(), "stream.json")
	out, err := runBench(t, "stream", "--serve-binary", bin, "--data-parent", t.TempDir(), "--duration", "300ms", "--rounds", "2",
		"--calibration-messages", "1000", "--partitions", "2", "--publishers", "64", "--json", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"# broker: sushka: sushka serve as a child process", "raw msg/s", "framework vs raw", "# wrote "} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var doc bench.StreamDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(); err != nil {
		t.Errorf("the written document fails the schema: %v", err)
	}
	if want := len(streambench.Scenarios()); len(doc.Scenarios) != want {
		t.Errorf("%d scenarios, want %d", len(doc.Scenarios), want)
	}
	for _, s := range doc.Scenarios {
		if s.Pairs != 2 || s.Target != "sushka" || s.Unit != "msg/s" {
			t.Errorf("%s: pairs %d, target %q, unit %q", s.Name, s.Pairs, s.Target, s.Unit)
		}
	}
	if len(doc.Code) == 0 {
		t.Error("no code rows: costbench's results.json was not included")
	}
	// The document's own required fields, by name, as a reader sees them.
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "package", "version", "measured_at", "environment", "scenarios", "code"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("document lacks %q", k)
		}
	}
	row := raw["scenarios"].([]any)[0].(map[string]any)
	for _, k := range []string{"raw", "adapter", "framework", "overhead_percent", "adapter_overhead_percent", "verdict", "adapter_verdict", "runtime_overhead_percent", "runtime_verdict", "broker_bound", "messages", "pairs"} {
		if _, ok := row[k]; !ok {
			t.Errorf("scenario lacks %q", k)
		}
	}
	for _, loop := range []string{"raw", "adapter", "framework"} {
		l := row[loop].(map[string]any)
		for _, k := range []string{"best", "median", "worst"} {
			if _, ok := l[k]; !ok {
				t.Errorf("scenario's %s lacks %q", loop, k)
			}
		}
	}
}

// TestBenchStreamBrokers: with --brokers the target is that broker, named
// by --name, and --scenario picks the rows.
func TestBenchStreamBrokers(t *testing.T) {
	addr := testbroker.StartInProcess(t)
	js := filepath.Join(t.TempDir(), "stream.json")
	out, err := runBench(t, "stream", "--brokers", addr, "--name", "other", "--scenario", "ack each", "--duration", "200ms",
		"--rounds", "1", "--calibration-messages", "500", "--partitions", "1", "--publishers", "16", "--json", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var doc bench.StreamDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Scenarios) != 1 {
		t.Fatalf("%d rows, want the one --scenario picked", len(doc.Scenarios))
	}
	if doc.Scenarios[0].Target != "other" || !strings.Contains(doc.Environment.Broker, addr) {
		t.Errorf("target %q, broker %q", doc.Scenarios[0].Target, doc.Environment.Broker)
	}
	if _, err := runBench(t, "stream", "--brokers", addr, "--scenario", "no such"); err == nil {
		t.Error("an unknown --scenario ran")
	}
}
