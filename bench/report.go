package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// SchemaVersion is the version of the JSON document (Document). It
// changes whenever a field changes meaning or disappears.
//
// Schema 1: schema, tool, version, measured_at, command, environment
// (host, generator profile, systems with their /v1/runtime, loadavg
// before/after, durability), disk (the data directory's physical limits,
// when measured), scenarios (per system: best / median / worst of
// records_per_s, mb_per_s, p50_ms, p99_ms, broker_cpu_s_per_gb, and every
// raw round; the verdict of each later system against the first on the
// primary metric; broker_bound per system), warnings.
//
// Schema 2: broker_bound is true only when every round's bound (bound.go:
// machine-bound, generator-bound, disk-bound, offered-rate, broker-bound,
// undetermined) is broker-bound; per system bound (the rounds' most
// frequent label), bound_detail and generator_cpu_s_per_gb; per round
// bound, bound_figures, broker_write, machine_busy, generator_cpu_s_per_gb,
// final_send_lag_ns and backpressure_ns; workload engine and raw options.
const SchemaVersion = 2

// SystemRounds is one system's rounds of a scenario.
type SystemRounds struct {
	System         string `json:"system"`
	Throughput     Rounds `json:"records_per_s"`
	MBps           Rounds `json:"mb_per_s"`
	P50            Rounds `json:"p50_ms"`
	P99            Rounds `json:"p99_ms"`
	BrokerCPUPerGB Rounds `json:"broker_cpu_s_per_gb"`
	// GeneratorCPUPerGB is this process's CPU (or a --vs-exec child's).
	GeneratorCPUPerGB Rounds `json:"generator_cpu_s_per_gb"`
	// Bound is what set the pace (bound.go), the most frequent label of
	// the rounds; BoundDetail says so when rounds differ. BrokerBound:
	// every round was broker-bound.
	Bound              string        `json:"bound"`
	BoundDetail        string        `json:"bound_detail"`
	BrokerBound        bool          `json:"broker_bound"`
	GeneratorSaturated bool          `json:"generator_saturated"`
	Raw                []RoundResult `json:"raw"`
}

// Verdict compares a system with the first one on the primary metric.
type Verdict struct {
	System  string `json:"system"`
	Against string `json:"against"`
	Comparison
}

// Scenario is one workload measured on every system.
type Scenario struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Primary names the metric the verdict is on: records_per_s (higher is
	// better) or p99_ms (lower is better).
	Primary  string          `json:"primary"`
	Unit     string          `json:"unit"`
	Workload Workload        `json:"workload"`
	Rounds   int             `json:"rounds"`
	Systems  []*SystemRounds `json:"systems"`
	Verdicts []Verdict       `json:"verdicts,omitempty"`
	Notes    []string        `json:"notes,omitempty"`
}

func (s *Scenario) add(r RoundResult) {
	for _, sr := range s.Systems {
		if sr.System == r.System {
			sr.Raw = append(sr.Raw, r)
			return
		}
	}
	s.Systems = append(s.Systems, &SystemRounds{System: r.System, Raw: []RoundResult{r}})
}

func (s *Scenario) finish() {
	for _, sr := range s.Systems {
		var tp, mb, p50, p99, cpu, gen []float64
		saturated := false
		for _, r := range sr.Raw {
			tp = append(tp, r.Throughput)
			mb = append(mb, r.MBps)
			p50 = append(p50, r.Latency.P50)
			p99 = append(p99, r.Latency.P99)
			if r.BrokerCPUPerGB > 0 {
				cpu = append(cpu, r.BrokerCPUPerGB)
			}
			if r.GeneratorCPUPerGB > 0 {
				gen = append(gen, r.GeneratorCPUPerGB)
			}
			saturated = saturated || r.GeneratorSaturated
		}
		sr.Throughput, sr.MBps = Summarize(tp, Higher), Summarize(mb, Higher)
		sr.P50, sr.P99 = Summarize(p50, Lower), Summarize(p99, Lower)
		sr.BrokerCPUPerGB, sr.GeneratorCPUPerGB = Summarize(cpu, Lower), Summarize(gen, Lower)
		sr.GeneratorSaturated = saturated
		sr.Bound, sr.BoundDetail = summarizeBound(sr.Raw)
		sr.BrokerBound = len(sr.Raw) > 0 && sr.BoundDetail == BoundBroker
		s.Rounds = len(sr.Raw)
	}
	s.Verdicts = nil
	for _, sr := range s.Systems[min(1, len(s.Systems)):] {
		a, b := s.Systems[0], sr
		var c Comparison
		if s.Primary == "p99_ms" {
			c = Compare(a.P99, b.P99)
		} else {
			c = Compare(a.Throughput, b.Throughput)
		}
		s.Verdicts = append(s.Verdicts, Verdict{System: a.System, Against: b.System, Comparison: c})
	}
}

// Document is the JSON results document (--json FILE), modelled on the
// RustStream benchmark document (seeds/004): see SchemaVersion.
type Document struct {
	Schema      int          `json:"schema"`
	Tool        string       `json:"tool"`
	Version     string       `json:"version"`
	MeasuredAt  string       `json:"measured_at"`
	Command     string       `json:"command"`
	Environment Environment  `json:"environment"`
	Disk        *DiskSummary `json:"disk,omitempty"`
	Scenarios   []*Scenario  `json:"scenarios"`
	Extra       any          `json:"extra,omitempty"`
	Warnings    []string     `json:"warnings,omitempty"`
}

// NewDocument starts a document for command.
func NewDocument(version, command string) *Document {
	return &Document{Schema: SchemaVersion, Tool: "sushka bench", Version: version,
		MeasuredAt: time.Now().Format(time.RFC3339), Command: command}
}

// Write saves the document to path.
func (d *Document) Write(path string) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Warn records a warning (printed and stored).
func (d *Document) Warn(w io.Writer, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.Warnings = append(d.Warnings, msg)
	fmt.Fprintln(w, "# WARNING: "+msg)
}

// PrintPassport prints the header every report starts with (MEASURING.md
// rules 1-4).
func PrintPassport(w io.Writer, d *Document) {
	e := d.Environment
	fmt.Fprintf(w, "# sushka bench %s, %s\n", d.Version, d.MeasuredAt)
	fmt.Fprintf(w, "# command: %s\n", d.Command)
	fmt.Fprintf(w, "# host: %s, %s, %s, %s %s\n", e.Host.CPU, e.Host.Cores, e.Host.Memory, e.Host.OS, e.Host.Arch)
	g := e.Generator
	fmt.Fprintf(w, "# generator (this process, pid %d): %s GOMAXPROCS=%d GOGC=%s GOMEMLIMIT=%s %s\n", os.Getpid(), g.GoVersion, g.GOMAXPROCS, g.GOGC, g.GOMEMLIMIT, g.Build)
	for _, s := range e.Systems {
		fmt.Fprintf(w, "# system %s: %s", s.Name, s.Brokers)
		if s.Exec != "" {
			fmt.Fprintf(w, " (driven by: %s)", s.Exec)
		}
		if s.PID != "" {
			fmt.Fprintf(w, ", pid %s (%s)", s.PID, s.PIDSource)
		} else {
			fmt.Fprint(w, ", pid unknown: no broker CPU figures (pass --broker-pid / --vs-pid)")
		}
		fmt.Fprintln(w)
		if rt := s.Runtime; rt != nil {
			name := rt.Broker
			if name == "" {
				name = "sushka " + rt.Version
			}
			fmt.Fprintf(w, "#   broker %s: %s GOMAXPROCS=%d GOGC=%s GOMEMLIMIT=%s\n", name, rt.GoVersion, rt.GOMAXPROCS, rt.GOGC, rt.GOMEMLIMIT)
			fmt.Fprintf(w, "#   storage: %s (data dir %s)\n", rt.Storage, rt.DataDir)
			fmt.Fprintf(w, "#   durability: %s\n", rt.Durability)
		} else {
			reason := s.RuntimeError
			if s.Admin == "" {
				reason = "no admin address given"
			}
			fmt.Fprintf(w, "#   broker runtime profile and storage: unknown (%s)\n", reason)
		}
	}
	if e.DataDir != "" {
		fmt.Fprintf(w, "# storage: %s (data dir %s)\n", e.DataDirStorage, e.DataDir)
	}
	fmt.Fprintf(w, "# durability asked: %s\n", e.Durability)
	fmt.Fprintf(w, "# loadavg before: %s\n", e.LoadBefore)
	if d.Disk != nil {
		fmt.Fprintln(w, d.Disk.Line)
	}
}

// PrintScenario prints one scenario: every raw round, then best (median)
// [worst] per system and the verdicts.
func PrintScenario(w io.Writer, s *Scenario) {
	fmt.Fprintf(w, "\n## %s\n", s.Name)
	for _, n := range s.Notes {
		fmt.Fprintf(w, "# %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tround\tmode\toffered/s\trecords/s\tMB/s\tp50\tp90\tp99\tp99.9\tmax\tissued\tacked\terrors\tunfinished\tsend-lag p99\tgen cores\tbroker cores\tgen s/GB\tbroker s/GB\tgen µs/rec\tbroker µs/rec\tbound\tloadavg\t")
	for _, sr := range s.Systems {
		for _, r := range sr.Raw {
			l := r.Latency
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
				r.System, r.Round, r.Mode, r.Offered, r.Throughput, r.MBps,
				latMs(l, l.P50), latMs(l, l.P90), latMs(l, l.P99), latMs(l, l.P999), latMs(l, l.Max),
				r.Issued, r.Acked, r.Errors, r.Unfinished, fmtMs(r.SendLag.P99), r.GeneratorCPU.Cores(),
				cpuCores(r.BrokerCPU), cpuPerGB(r.GeneratorCPUPerGB), cpuPerGB(r.BrokerCPUPerGB),
				cpuPerRecord(r.GeneratorCPU, r.Acked), cpuPerRecord(r.BrokerCPU, r.Acked), r.Bound, r.LoadAfter)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "# best (median) [worst] over %d rounds:\n", s.Rounds)
	for _, sr := range s.Systems {
		fmt.Fprintf(w, "#   %-10s records/s %s  p99 %s  broker s/GB %s  generator s/GB %s  %s%s\n", sr.System,
			fmtRounds(sr.Throughput, "%.0f"), fmtRounds(sr.P99, "%.2fms"), fmtRounds(sr.BrokerCPUPerGB, "%.2f"),
			fmtRounds(sr.GeneratorCPUPerGB, "%.3f"), sr.BoundDetail, flag(sr.GeneratorSaturated, "  GENERATOR SATURATED"))
		if g, b := sr.GeneratorCPUPerGB.Median, sr.BrokerCPUPerGB.Median; g > 0 && b > 0 {
			var cpu, sys time.Duration
			for _, r := range sr.Raw {
				cpu, sys = cpu+r.GeneratorCPU.CPU, sys+r.GeneratorCPU.System
			}
			kernel := sys.Seconds() / max(cpu.Seconds(), 1e-9)
			fmt.Fprintf(w, "#     generator CPU per byte = %.3f× the broker's (median rounds); %.0f%% of the generator's CPU in the kernel, its user-space part %.3f× the broker's\n",
				g/b, 100*kernel, (1-kernel)*g/b)
		}
		for _, r := range sr.Raw {
			fmt.Fprintf(w, "#     round %d %s: %s\n", r.Round, r.Bound, r.BoundFigures)
		}
		for _, r := range sr.Raw {
			if r.FirstError != "" {
				fmt.Fprintf(w, "#     round %d first error: %s\n", r.Round, r.FirstError)
			}
			if r.Latency.Negative > 0 {
				fmt.Fprintf(w, "#     round %d: %d negative latencies: the clock is broken\n", r.Round, r.Latency.Negative)
			}
		}
	}
	for _, v := range s.Verdicts {
		fmt.Fprintf(w, "# %s vs %s on %s (best rounds): %s\n", v.System, v.Against, s.Primary, v.Comparison)
	}
	for _, sr := range s.Systems {
		if sr.GeneratorSaturated {
			fmt.Fprintf(w, "# WARNING: the generator used ≥90%% of its %d cores in a round against %s: those numbers describe the generator, not the broker\n", generatorCores(), sr.System)
		}
	}
}

// latMs prints a latency, or "-" where none was measured (consume).
func latMs(l Latency, v float64) string {
	if l.Count == 0 {
		return "-"
	}
	return fmtMs(v)
}

func flag(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

func cpuCores(s CPUSample) string {
	if !s.OK {
		return "-"
	}
	return fmt.Sprintf("%.2f", s.Cores())
}

// cpuPerRecord is CPU microseconds per record.
func cpuPerRecord(s CPUSample, records int64) string {
	if !s.OK || records <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(s.CPU.Microseconds())/float64(records))
}

func cpuPerGB(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtRounds(r Rounds, f string) string {
	if len(r.Values) == 0 {
		return "-"
	}
	return fmt.Sprintf(f+" ("+f+") ["+f+"]", r.Best, r.Median, r.Worst)
}

// Commandline is the command as typed, for the passport.
func Commandline(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
