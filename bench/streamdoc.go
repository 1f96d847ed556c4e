package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// StreamSchemaVersion is the version of the stream benchmark's document
// (StreamDocument): the schema of the RustStream benchmark page
// (seeds/004), whose version 3 reports best, median and worst per loop.
// Its readers know versions 1-3; this is 3.
const StreamSchemaVersion = 3

// StreamDocument is `sushka bench stream --json FILE`: the framework
// (package stream) against the raw client, three loops per scenario, and
// the framework's code cost (the "code" rows of stream/internal/costbench,
// included as that tool wrote them).
type StreamDocument struct {
	Schema      int               `json:"schema"`
	Package     string            `json:"package"`
	Version     string            `json:"version"`
	MeasuredAt  string            `json:"measured_at"`
	Command     string            `json:"command"`
	Environment StreamEnvironment `json:"environment"`
	// Scenarios is omitted (not empty) when no broker was measured, as
	// the schema asks of a document that only carries code rows.
	Scenarios []*StreamScenario `json:"scenarios,omitempty"`
	// Code is costbench's "code" array, each row as costbench wrote it.
	Code     []json.RawMessage `json:"code,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
}

// StreamEnvironment is the passport of a stream benchmark run, with the
// seed's field names; what the machine does not report is "unknown".
type StreamEnvironment struct {
	CPU          string `json:"cpu"`
	Architecture string `json:"architecture"`
	CPUFrequency string `json:"cpu_frequency"`
	Cores        string `json:"cores"`
	Memory       string `json:"memory"`
	MemorySpeed  string `json:"memory_speed"`
	OS           string `json:"os"`
	// Broker says, per target, what was measured and how it ran (a child
	// process, in-process, somebody's cluster), with its durability.
	Broker string `json:"broker"`
	Go     string `json:"go"`
	// Profile is the generator's runtime profile (GOMAXPROCS, GOGC,
	// GOMEMLIMIT) and Build its build settings.
	Profile string `json:"profile"`
	Build   string `json:"build"`
	// Client names the broker client libraries and their versions.
	Client string `json:"client"`
	// RoundTrip is the probe behind broker_bound, so a reader can
	// recompute it from the scenarios' poll_wait_percent.
	RoundTrip  string `json:"round_trip"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
}

// StreamLoop is one loop's rounds (msg/s) and, per round, the share of
// the window its polling goroutine spent blocked waiting for records.
type StreamLoop struct {
	Rounds
	PollWaitPercent []float64 `json:"poll_wait_percent"`
	WindowSeconds   []float64 `json:"window_s"`
	// Published and Received are, per round, the messages the loop
	// published and handled: each round handles every one it published,
	// exactly once.
	Published []int `json:"published"`
	Received  []int `json:"received"`
	// CPUPerMessage is the generator process's CPU time (user+system)
	// within each round's window divided by its messages, in µs: with the
	// backlog published before the window, the consumer loop's own cost.
	CPUPerMessage Rounds `json:"cpu_us_per_message"`
	// BrokerCPUPerMessage is the broker process's, per round, when it
	// runs on this machine (omitted otherwise).
	BrokerCPUPerMessage []float64 `json:"broker_cpu_us_per_message,omitempty"`
	// AfterPublishSeconds is, per round, from the publishers' stop to the
	// window's end; PublishBound marks a round whose window ended within
	// PublishBoundSlack of it (its consumer only kept pace).
	AfterPublishSeconds []float64 `json:"after_publish_s,omitempty"`
	PublishBound        []bool    `json:"publish_bound,omitempty"`
}

// StreamScenario is one row of the first table: a scenario on a target,
// measured by the three loops.
type StreamScenario struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	Unit   string `json:"unit"`
	// Messages is the fewest messages a measured round handled (a round
	// publishes until its window has lasted the run's duration, so each
	// round has its own count: Received).
	Messages int `json:"messages"`
	// Pairs is the number of measured rounds of each loop (the seed's
	// name), after one discarded calibration round.
	Pairs int `json:"pairs"`
	// Partitions of each run's topic, and Publishers publishing at once.
	Partitions int32 `json:"partitions"`
	Publishers int   `json:"publishers"`
	// Publish marks a publish-only scenario (each loop's publisher, no
	// consumer); otherwise Backlog is the messages every measured round
	// consumed, published before its consumer started.
	Publish   bool       `json:"publish,omitempty"`
	Backlog   int        `json:"backlog,omitempty"`
	Raw       StreamLoop `json:"raw"`
	Adapter   StreamLoop `json:"adapter"`
	Framework StreamLoop `json:"framework"`
	// OverheadPercent is how much slower the framework's median round is
	// than the raw client's, in percent of the raw median (negative:
	// faster). Always recorded; printed only when Verdict is measured.
	OverheadPercent        float64 `json:"overhead_percent"`
	AdapterOverheadPercent float64 `json:"adapter_overhead_percent"`
	Verdict                string  `json:"verdict"`
	AdapterVerdict         string  `json:"adapter_verdict"`
	// RuntimeOverheadPercent is the seed's second difference: what the
	// framework's runtime adds over the adapter (framework vs adapter
	// medians, in percent of the adapter's), with its verdict.
	RuntimeOverheadPercent float64 `json:"runtime_overhead_percent"`
	RuntimeVerdict         string  `json:"runtime_verdict"`
	// The same three comparisons of the generator's CPU per message
	// (medians; positive: the first loop costs more), far less sensitive
	// to the machine's load than msg/s.
	CPUOverheadPercent        float64 `json:"cpu_overhead_percent"`
	CPUVerdict                string  `json:"cpu_verdict"`
	AdapterCPUOverheadPercent float64 `json:"adapter_cpu_overhead_percent"`
	AdapterCPUVerdict         string  `json:"adapter_cpu_verdict"`
	RuntimeCPUOverheadPercent float64 `json:"runtime_cpu_overhead_percent"`
	RuntimeCPUVerdict         string  `json:"runtime_cpu_verdict"`
	// PublishBoundRounds counts the rounds of any loop that were
	// publish-bound; with one, every verdict is PublishBound: such a
	// round measured its publishers, and no comparison is given.
	PublishBoundRounds int `json:"publish_bound_rounds"`
	// BrokerBound: the raw loop spent most of its median round blocked
	// waiting for records (RawPollWaitPercent above BrokerBoundPercent),
	// so the difference is a lower bound of the dispatch cost.
	BrokerBound        bool     `json:"broker_bound"`
	RawPollWaitPercent float64  `json:"raw_poll_wait_percent"`
	Notes              []string `json:"notes,omitempty"`
}

// BrokerBoundPercent is the share of the window the raw loop must spend
// waiting in its poll for a row to be marked broker_bound.
const BrokerBoundPercent = 50

// PublishBound is the verdict of a row with a publish-bound round.
const PublishBound = "publish-bound"

// StreamRound is one loop's measured run.
type StreamRound struct {
	// Published and Messages (handled) must be equal.
	Published int
	Messages  int
	Window    time.Duration
	PollWait  time.Duration
	// CPU and BrokerCPU are the generator's and (BrokerCPUOK) the
	// broker's CPU time within the window.
	CPU         time.Duration
	BrokerCPU   time.Duration
	BrokerCPUOK bool
	// AfterPublish is from the publishers' stop to the window's end, for
	// a consuming round (HasPublishStop); PublishBound says it was within
	// the slack that makes the round publish-bound.
	AfterPublish   time.Duration
	HasPublishStop bool
	PublishBound   bool
}

// CPUPerMessage is the generator's CPU per message, in µs.
func (r StreamRound) CPUPerMessage() float64 { return MicrosPerMessage(r.CPU, r.Messages) }

// MicrosPerMessage is d per message, in µs (0 without messages).
func MicrosPerMessage(d time.Duration, messages int) float64 {
	if messages <= 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(messages)
}

// Rate is the round's throughput in messages per second.
func (r StreamRound) Rate() float64 { return float64(r.Messages) / r.Window.Seconds() }

// PollWaitPercent is the share of the window spent blocked in the poll.
func (r StreamRound) PollWaitPercent() float64 {
	return 100 * r.PollWait.Seconds() / r.Window.Seconds()
}

// SummarizeLoop turns a loop's rounds into its StreamLoop.
func SummarizeLoop(rounds []StreamRound) StreamLoop {
	var l StreamLoop
	rates := make([]float64, len(rounds))
	cpu := make([]float64, len(rounds))
	brokerOK := true
	for i, r := range rounds {
		rates[i] = math.Round(r.Rate()) // whole messages per second: the figure's resolution
		cpu[i] = round3(r.CPUPerMessage())
		l.PollWaitPercent = append(l.PollWaitPercent, round1(r.PollWaitPercent()))
		l.WindowSeconds = append(l.WindowSeconds, round3(r.Window.Seconds()))
		l.Published = append(l.Published, r.Published)
		l.Received = append(l.Received, r.Messages)
		l.BrokerCPUPerMessage = append(l.BrokerCPUPerMessage, round3(MicrosPerMessage(r.BrokerCPU, r.Messages)))
		brokerOK = brokerOK && r.BrokerCPUOK
		if r.HasPublishStop {
			l.AfterPublishSeconds = append(l.AfterPublishSeconds, round3(r.AfterPublish.Seconds()))
			l.PublishBound = append(l.PublishBound, r.PublishBound)
		}
	}
	if !brokerOK {
		l.BrokerCPUPerMessage = nil
	}
	l.Rounds = Summarize(rates, Higher)
	l.CPUPerMessage = Summarize(cpu, Lower)
	return l
}

// Finish computes the overheads, verdicts and broker_bound from the loops.
func (s *StreamScenario) Finish() {
	f := CompareMedians(s.Framework.Rounds, s.Raw.Rounds)
	a := CompareMedians(s.Adapter.Rounds, s.Raw.Rounds)
	s.OverheadPercent, s.Verdict = round1(-f.DiffPercent), f.Verdict
	s.AdapterOverheadPercent, s.AdapterVerdict = round1(-a.DiffPercent), a.Verdict
	r := CompareMedians(s.Framework.Rounds, s.Adapter.Rounds)
	s.RuntimeOverheadPercent, s.RuntimeVerdict = round1(-r.DiffPercent), r.Verdict
	f = CompareMedians(s.Framework.CPUPerMessage, s.Raw.CPUPerMessage)
	a = CompareMedians(s.Adapter.CPUPerMessage, s.Raw.CPUPerMessage)
	r = CompareMedians(s.Framework.CPUPerMessage, s.Adapter.CPUPerMessage)
	s.CPUOverheadPercent, s.CPUVerdict = round1(f.DiffPercent), f.Verdict
	s.AdapterCPUOverheadPercent, s.AdapterCPUVerdict = round1(a.DiffPercent), a.Verdict
	s.RuntimeCPUOverheadPercent, s.RuntimeCPUVerdict = round1(r.DiffPercent), r.Verdict
	s.PublishBoundRounds = 0
	for _, l := range []StreamLoop{s.Raw, s.Adapter, s.Framework} {
		for _, b := range l.PublishBound {
			if b {
				s.PublishBoundRounds++
			}
		}
	}
	if s.PublishBoundRounds > 0 {
		for _, v := range []*string{&s.Verdict, &s.AdapterVerdict, &s.RuntimeVerdict, &s.CPUVerdict, &s.AdapterCPUVerdict, &s.RuntimeCPUVerdict} {
			*v = PublishBound
		}
	}
	// The median round's poll wait, by the same rule as the rates' median
	// (the lower middle): the typical round, not the luckiest.
	w := Summarize(s.Raw.PollWaitPercent, Lower)
	s.RawPollWaitPercent = w.Median
	s.BrokerBound = w.Median > BrokerBoundPercent
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// NewStreamDocument starts a document for command, with the host's
// passport filled in.
func NewStreamDocument(version, command string) *StreamDocument {
	h := ReadHost()
	p := SelfProfile()
	return &StreamDocument{
		Schema: StreamSchemaVersion, Package: "github.com/sushka-io/sushka/stream", Version: version,
		MeasuredAt: time.Now().UTC().Format(time.RFC3339), Command: command,
		Environment: StreamEnvironment{
			CPU: h.CPU, Architecture: architecture(), CPUFrequency: cpuFrequency(), Cores: cpuCounts(),
			Memory: h.Memory, MemorySpeed: "unknown", OS: h.OS, Go: p.GoVersion,
			Profile: fmt.Sprintf("GOMAXPROCS=%d GOGC=%s GOMEMLIMIT=%s", p.GOMAXPROCS, p.GOGC, p.GOMEMLIMIT),
			Build:   orUnknown(p.Build), LoadBefore: orUnknown(LoadAvg()),
		},
	}
}

// ModuleVersion is the version of module path in this binary's build
// information, or "unknown".
func ModuleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range bi.Deps {
		if m.Path == path {
			if m.Replace != nil {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return "unknown"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// architecture is GOARCH with the microarchitecture level the binary was
// built for (GOAMD64 and friends), when the build says.
func architecture() string {
	a := runtime.GOARCH
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GO"+strings.ToUpper(runtime.GOARCH) {
				a += " (" + s.Key + "=" + s.Value + ")"
			}
		}
	}
	return a
}

// cpuCounts is "2 physical, 2 logical" from /proc/cpuinfo's distinct
// (physical id, core id) pairs; "unknown physical" where it has none.
func cpuCounts() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return fmt.Sprintf("unknown physical, %d logical", runtime.NumCPU())
	}
	defer f.Close()
	cores := map[string]bool{}
	logical, physID := 0, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			logical++
		case "physical id":
			physID = strings.TrimSpace(v)
		case "core id":
			cores[physID+"/"+strings.TrimSpace(v)] = true
		}
	}
	if logical == 0 {
		logical = runtime.NumCPU()
	}
	if len(cores) == 0 {
		return fmt.Sprintf("unknown physical, %d logical", logical)
	}
	return fmt.Sprintf("%d physical, %d logical", len(cores), logical)
}

// cpuFrequency is the maximum frequency cpufreq reports for cpu0, else
// the current one /proc/cpuinfo reports (labelled so), else "unknown".
func cpuFrequency() string {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); err == nil {
		if khz, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil {
			return fmt.Sprintf("max %.0f MHz", khz/1000)
		}
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "cpu MHz" {
				if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					return fmt.Sprintf("%.0f MHz (current, as /proc/cpuinfo reports it)", mhz)
				}
			}
		}
	}
	return "unknown"
}

// Write saves the document to path.
func (d *StreamDocument) Write(path string) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Warn records a warning (printed and stored).
func (d *StreamDocument) Warn(w io.Writer, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.Warnings = append(d.Warnings, msg)
	fmt.Fprintln(w, "# WARNING: "+msg)
}

// ReadCodeRows reads the "code" array of stream/internal/costbench's
// results.json, keeping every row as written, and checks that each row
// has the fields the schema requires (name, messages, framework and cold
// with instructions and allocations, gated).
func ReadCodeRows(path string) ([]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Code []json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Code) == 0 {
		return nil, fmt.Errorf("%s: no code rows", path)
	}
	type cost struct {
		Instructions *float64 `json:"instructions"`
		Allocations  *float64 `json:"allocations"`
	}
	for i, raw := range doc.Code {
		var row struct {
			Name      string `json:"name"`
			Messages  int    `json:"messages"`
			Framework *cost  `json:"framework"`
			Cold      *cost  `json:"cold"`
			Gated     *bool  `json:"gated"`
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, fmt.Errorf("%s: code row %d: %w", path, i, err)
		}
		var missing []string
		if row.Name == "" {
			missing = append(missing, "name")
		}
		if row.Messages <= 0 {
			missing = append(missing, "messages")
		}
		for _, c := range []struct {
			name string
			c    *cost
		}{{"framework", row.Framework}, {"cold", row.Cold}} {
			if c.c == nil || c.c.Instructions == nil || c.c.Allocations == nil {
				missing = append(missing, c.name+".instructions/allocations")
			}
		}
		if row.Gated == nil {
			missing = append(missing, "gated")
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%s: code row %d (%q) lacks %s", path, i, row.Name, strings.Join(missing, ", "))
		}
	}
	return doc.Code, nil
}

// Validate checks what the schema requires of a document with scenarios:
// the environment's mandatory fields and, per scenario, three loops with
// ordered rounds and the verdicts. It is what a reader of the document
// relies on; the end-to-end test runs it on a produced document.
func (d *StreamDocument) Validate() error {
	var errs []error
	if d.Schema != StreamSchemaVersion {
		errs = append(errs, fmt.Errorf("schema %d, want %d", d.Schema, StreamSchemaVersion))
	}
	if d.Package == "" || d.Version == "" || d.MeasuredAt == "" {
		errs = append(errs, errors.New("package, version and measured_at are required"))
	}
	e := d.Environment
	for name, v := range map[string]string{"cpu": e.CPU, "os": e.OS, "go": e.Go, "architecture": e.Architecture,
		"cores": e.Cores, "memory": e.Memory, "memory_speed": e.MemorySpeed, "cpu_frequency": e.CPUFrequency,
		"broker": e.Broker, "round_trip": e.RoundTrip} {
		if v == "" {
			errs = append(errs, fmt.Errorf("environment.%s is empty (write \"unknown\")", name))
		}
	}
	for _, s := range d.Scenarios {
		for name, l := range map[string]StreamLoop{"raw": s.Raw, "adapter": s.Adapter, "framework": s.Framework} {
			r := l.Rounds
			switch {
			case len(r.Values) != s.Pairs || s.Pairs == 0:
				errs = append(errs, fmt.Errorf("%s: %s has %d rounds, pairs %d", s.Name, name, len(r.Values), s.Pairs))
			case !(r.Best >= r.Median && r.Median >= r.Worst && r.Worst > 0):
				errs = append(errs, fmt.Errorf("%s: %s rounds not best ≥ median ≥ worst > 0: %+v", s.Name, name, r))
			case len(l.PollWaitPercent) != s.Pairs || len(l.WindowSeconds) != s.Pairs || len(l.Received) != s.Pairs || len(l.Published) != s.Pairs:
				errs = append(errs, fmt.Errorf("%s: %s lacks per-round poll wait, window or received", s.Name, name))
			}
			for i, n := range l.Received {
				if i < len(l.Published) && n != l.Published[i] {
					errs = append(errs, fmt.Errorf("%s: %s round %d handled %d of %d messages", s.Name, name, i+1, n, l.Published[i]))
				}
				if n < s.Messages {
					errs = append(errs, fmt.Errorf("%s: %s round %d handled %d, fewer than the row's %d", s.Name, name, i+1, n, s.Messages))
				}
			}
		}
		for _, v := range []string{s.Verdict, s.AdapterVerdict, s.RuntimeVerdict, s.CPUVerdict, s.AdapterCPUVerdict, s.RuntimeCPUVerdict} {
			if v != Measured && v != Indistinguishable && (v != PublishBound || s.PublishBoundRounds == 0) {
				errs = append(errs, fmt.Errorf("%s: verdict %q", s.Name, v))
			}
		}
		if s.Name == "" || s.Target == "" || s.Unit == "" || s.Messages <= 0 {
			errs = append(errs, fmt.Errorf("scenario %q: name, target, unit and messages are required", s.Name))
		}
	}
	return errors.Join(errs...)
}

// PrintStreamPassport prints the document's passport as comment lines.
func PrintStreamPassport(w io.Writer, d *StreamDocument) {
	e := d.Environment
	fmt.Fprintf(w, "# sushka bench stream %s, %s\n", d.Version, d.MeasuredAt)
	fmt.Fprintf(w, "# command: %s\n", d.Command)
	fmt.Fprintf(w, "# host: %s (%s), %s, %s, memory %s (speed %s), %s\n", e.CPU, e.CPUFrequency, e.Architecture, e.Cores, e.Memory, e.MemorySpeed, e.OS)
	fmt.Fprintf(w, "# generator (this process, pid %d): %s %s %s\n", os.Getpid(), e.Go, e.Profile, e.Build)
	fmt.Fprintf(w, "# broker: %s\n", e.Broker)
	fmt.Fprintf(w, "# client: %s\n", e.Client)
	fmt.Fprintf(w, "# broker_bound: %s\n", e.RoundTrip)
	fmt.Fprintf(w, "# loadavg before: %s\n", e.LoadBefore)
}

// PrintStreamTable prints the first table: per row, best (median) of each
// loop in msg/s, the two overheads or "indistinguishable", and the raw
// loop's poll wait with the broker-bound mark; then the same rows in the
// generator's CPU per message.
func PrintStreamTable(w io.Writer, d *StreamDocument) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tscenario\tmessages\traw msg/s\tadapter msg/s\tframework msg/s\tadapter vs raw\tframework vs raw\tframework vs adapter\traw poll wait\t")
	for _, s := range d.Scenarios {
		bound := ""
		if s.BrokerBound {
			bound = " broker-bound"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%%s\t\n", s.Target, s.Name, s.Messages,
			cell(s.Raw.Rounds), cell(s.Adapter.Rounds), cell(s.Framework.Rounds),
			overhead(s.AdapterVerdict, s.AdapterOverheadPercent), overhead(s.Verdict, s.OverheadPercent),
			overhead(s.RuntimeVerdict, s.RuntimeOverheadPercent), s.RawPollWaitPercent, bound)
	}
	tw.Flush()
	fmt.Fprintln(w, "# cells: best (median) over the rounds; the worst round is in the document and sets the spread.")
	fmt.Fprintln(w, "# overhead: (raw median − loop median) / raw median; \"indistinguishable\" when the gap is below the larger best-to-worst spread.")
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tscenario\traw µs/msg\tadapter µs/msg\tframework µs/msg\tadapter vs raw\tframework vs raw\tframework vs adapter\tbroker µs/msg (raw, adapter, framework)\t")
	for _, s := range d.Scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Target, s.Name,
			cellMicros(s.Raw.CPUPerMessage), cellMicros(s.Adapter.CPUPerMessage), cellMicros(s.Framework.CPUPerMessage),
			overhead(s.AdapterCPUVerdict, s.AdapterCPUOverheadPercent), overhead(s.CPUVerdict, s.CPUOverheadPercent),
			overhead(s.RuntimeCPUVerdict, s.RuntimeCPUOverheadPercent),
			brokerMedians(s.Raw, s.Adapter, s.Framework))
	}
	tw.Flush()
	fmt.Fprintln(w, "# CPU: the generator process's user+system time within each window ÷ its messages, best (median); overhead: (loop median − raw median) / raw median.")
}

func cellMicros(r Rounds) string { return fmt.Sprintf("%.2f (%.2f)", r.Best, r.Median) }

// brokerMedians is the broker's median CPU per message under each loop.
func brokerMedians(loops ...StreamLoop) string {
	var parts []string
	for _, l := range loops {
		if len(l.BrokerCPUPerMessage) == 0 {
			return "unknown"
		}
		parts = append(parts, fmt.Sprintf("%.2f", Summarize(l.BrokerCPUPerMessage, Lower).Median))
	}
	return strings.Join(parts, ", ")
}

func cell(r Rounds) string { return fmt.Sprintf("%.0f (%.0f)", r.Best, r.Median) }

func overhead(verdict string, percent float64) string {
	if verdict == PublishBound {
		return PublishBound
	}
	if verdict == Indistinguishable {
		return fmt.Sprintf("%s (%+.1f%%)", Indistinguishable, percent)
	}
	return fmt.Sprintf("%+.1f%%", percent)
}
