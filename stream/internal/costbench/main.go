// Command costbench measures the stream framework's own cost per message:
// instructions (valgrind's callgrind) and allocations (Go's counters) of
// the services in deliverycost.Scenarios (as a user writes them, over the
// memory transport), in steady state, as the difference between runs of
// -deliveries and twice as many divided by their difference (start-up and
// shutdown cancel out), plus a cold row (one delivery, start and shutdown
// included). The seed's method, issue 9.
//
//	go run ./stream/internal/costbench                      # measure, print the table
//	go run ./stream/internal/costbench -out results.json    # and write the JSON document
//	go run ./stream/internal/costbench -compare main        # the gate: this tree against main
//	go run ./stream/internal/costbench -spread 5            # the instrument's own spread
//
// Under the hood it re-runs a binary as
//
//	valgrind --tool=callgrind BINARY -child -scenario NAME -deliveries N [-publish-only]
//
// with GOMAXPROCS=1, GOGC=off and GODEBUG=asyncpreemptoff=1 (the collector
// and the preemption signal are noise, and callgrind asserts on the
// signal), taking the fewest instructions of -rounds runs. That child
// protocol is this command's interface to older builds of itself: -compare
// builds REV's costbench (from `git archive REV`, no worktree) and drives
// both binaries' children alternately, scenario by scenario, so that both
// sides are measured the same way in one session. It fails (exit 1) when a
// scenario costs more than 2 % instructions per message above REV's, or
// allocates more per message than its declared floor. A scenario REV does
// not know is measured and reported as new.
//
// Resolution, measured (docs/benchmarks.md has the tables): at 1,000
// against 2,000 deliveries, three invocations gave 1456, 1473 and 1528
// instructions per message for "consume []byte, ack each" (5 % apart). Three
// causes, each removed: the App's start-up and the runtime's per-process
// noise (the page allocator's searches, ~30,000 instructions a process) are
// not small against 1,000 messages, so the runs are 50,000 against 100,000;
// runtime.sysmon's thread wakes on the wall clock, so it is left out
// (countedInstructions); key lanes were chosen with a per-process hash seed
// (now FNV-1a). Over 5 measurements of one run per point the spread is
// 0.15-0.36 % for four scenarios and 1.3 % for two, from one outlier run each
// (batch, publish); the gate takes the fewest instructions of 3 runs per
// point, which drops such outliers.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/sushka-io/sushka/stream/internal/deliverycost"
	"github.com/sushka-io/sushka/stream/memory"
)

// gateInstructionsPercent is how much more instructions per message than
// the baseline a scenario may cost before -compare and -baseline fail.
const gateInstructionsPercent = 2.0

// allocationSlackPerMessage is the share of an allocation per message
// above the floor that still passes: a goroutine's sudog or a grown stack
// record may land in either run; a real allocation on the path is 1.0.
const allocationSlackPerMessage = 0.01

// deliver is the child: it fills a memory store with n records, then (if
// not publishOnly) runs the scenario's App over them, and returns the
// allocations of the App's part.
func deliver(sc deliverycost.Scenario, n int, publishOnly bool) uint64 {
	store := memory.New()
	if err := deliverycost.Fill(store, n); err != nil {
		panic(err)
	}
	if publishOnly {
		return 0
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := deliverycost.Deliver(store, sc, n, "g"); err != nil {
		panic(err)
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// measured, row and the document's keys are the results.json format that
// other tools read (the stream benchmark's `code` section): keep them.
type measured struct {
	Instructions float64 `json:"instructions"`
	Allocations  float64 `json:"allocations"`
}

type row struct {
	Name      string   `json:"name"`
	Messages  int      `json:"messages"`
	Framework measured `json:"framework"`
	Cold      measured `json:"cold"`
	Floor     float64  `json:"allocations_floor"`
	Gated     bool     `json:"gated"`
}

// errUnknownScenario is what a child of another build answers for a
// scenario it does not have.
var errUnknownScenario = errors.New("unknown scenario")

// instructions runs the child under callgrind rounds times and returns
// the fewest instructions (noise, the scheduler's and the runtime's
// background work, only adds) and the allocations of that run.
func instructions(binary, name string, n int, publishOnly bool, rounds int) (float64, uint64, error) {
	best, bestAllocs := 0.0, uint64(0)
	for range rounds {
		ir, allocs, err := instructionsOnce(binary, name, n, publishOnly)
		if err != nil {
			return 0, 0, err
		}
		if best == 0 || ir < best {
			best, bestAllocs = ir, allocs
		}
	}
	return best, bestAllocs, nil
}

func instructionsOnce(binary, name string, n int, publishOnly bool) (float64, uint64, error) {
	dir, err := os.MkdirTemp("", "costbench-callgrind-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	// One output file per thread (out-01, out-02, ...), so that the
	// runtime's monitor thread can be left out (see countedInstructions).
	args := []string{"--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
		binary, "-child", "-scenario", name, "-deliveries", strconv.Itoa(n)}
	if publishOnly {
		args = append(args, "-publish-only")
	}
	cmd := exec.Command("valgrind", args...)
	// asyncpreemptoff: callgrind asserts on the preemption signal (SIGURG).
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1")
	var stderr, stdout bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	if err := cmd.Run(); err != nil {
		if bytes.Contains(stderr.Bytes(), []byte("unknown scenario")) {
			return 0, 0, errUnknownScenario
		}
		return 0, 0, fmt.Errorf("%s %v: %w\n%s", binary, args, err, stderr.String())
	}
	threads, err := filepath.Glob(out + "-*")
	if err != nil || len(threads) == 0 {
		return 0, 0, fmt.Errorf("no per-thread callgrind output (%v):\n%s", err, stderr.String())
	}
	ir, err := countedInstructions(threads)
	if err != nil {
		return 0, 0, err
	}
	allocs, _ := strconv.ParseUint(string(bytes.TrimSpace(stdout.Bytes())), 10, 64)
	return ir, allocs, nil
}

var summaryRe = regexp.MustCompile(`(?m)^summary: (\d+)`)

// countedInstructions sums the instructions of the threads' callgrind
// files except the thread that runs runtime.sysmon. Sysmon wakes on the
// wall clock (every 20 µs to 10 ms), not on the program's work, so its
// share follows how long the run took on a machine shared with others:
// measured, it was most of the spread between runs of one binary (batch
// scenario, 10,000 deliveries: 66,000 instructions between the extremes of
// three runs with it, 15,000 without). Everything else counts, the Ms that
// ran a goroutine for a while included.
func countedInstructions(threadFiles []string) (float64, error) {
	total := 0.0
	for _, f := range threadFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		if bytes.Contains(data, []byte("runtime.sysmon")) {
			continue
		}
		m := summaryRe.FindSubmatch(data)
		if m == nil {
			return 0, fmt.Errorf("%s: no summary line", f)
		}
		ir, _ := strconv.ParseFloat(string(m[1]), 64)
		total += ir
	}
	return total, nil
}

// measure makes one row: the steady state from two run lengths, minus
// the filling of the topic measured the same way (it runs on one
// goroutine: one round is exact enough), and the cold row.
func measure(binary string, sc deliverycost.Scenario, short, rounds int) (row, error) {
	long := 2 * short
	var irShort, irLong, fillShort, fillLong, irCold, fillCold float64
	var allocShort, allocLong, allocCold uint64
	var err error
	for _, point := range []struct {
		ir          *float64
		allocs      *uint64
		n           int
		publishOnly bool
		rounds      int
	}{
		{&irShort, &allocShort, short, false, rounds},
		{&irLong, &allocLong, long, false, rounds},
		{&fillShort, nil, short, true, 1},
		{&fillLong, nil, long, true, 1},
		{&irCold, &allocCold, 1, false, rounds},
		{&fillCold, nil, 1, true, 1},
	} {
		var allocs uint64
		if *point.ir, allocs, err = instructions(binary, sc.Name, point.n, point.publishOnly, point.rounds); err != nil {
			return row{}, err
		}
		if point.allocs != nil {
			*point.allocs = allocs
		}
	}
	return row{
		Name: sc.Name, Messages: short,
		Framework: measured{
			Instructions: ((irLong - fillLong) - (irShort - fillShort)) / float64(long-short),
			// As signed numbers: with key lanes a run may land one
			// allocation (a goroutine's sudog) on either side.
			Allocations: float64(int64(allocLong)-int64(allocShort)) / float64(long-short),
		},
		Cold:  measured{Instructions: irCold - fillCold, Allocations: float64(allocCold)},
		Floor: sc.Floor, Gated: true,
	}, nil
}

// aboveFloor reports whether r allocates more per message than declared.
func aboveFloor(r row) bool { return r.Framework.Allocations > r.Floor+allocationSlackPerMessage }

// instructionsChangePercent is r's instructions per message against base's.
func instructionsChangePercent(r, base row) float64 {
	return (r.Framework.Instructions - base.Framework.Instructions) / base.Framework.Instructions * 100
}

// buildRevision builds rev's costbench from `git archive rev` of the
// repository around the working directory into dir and returns the binary.
func buildRevision(rev, dir string) (string, error) {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var archiveErr bytes.Buffer
	archive.Stderr = &archiveErr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %w: %s", rev, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("tar: %w", err)
	}
	binary := filepath.Join(dir, "costbench-"+filepath.Base(rev))
	build := exec.Command("go", "build", "-o", binary, "./stream/internal/costbench")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s's costbench: %w\n%s", rev, err, out)
	}
	return binary, nil
}

func printHeader() {
	fmt.Printf("%-58s %14s %11s %12s %6s\n", "scenario", "instr/message", "allocs/msg", "cold instr", "cold allocs")
}

func printRow(r row) { printLabelledRow(r.Name, r) }

func printLabelledRow(label string, r row) {
	fmt.Printf("%-58s %14.1f %11.3f %12.0f %6.0f\n", label, r.Framework.Instructions, r.Framework.Allocations, r.Cold.Instructions, r.Cold.Allocations)
}

func main() {
	child := flag.Bool("child", false, "run one scenario (internal)")
	name := flag.String("scenario", "", "scenario to run with -child")
	deliveries := flag.Int("deliveries", 50000, "deliveries of the short run (the long run has twice as many)")
	publishOnly := flag.Bool("publish-only", false, "with -child: only fill the topic")
	baseline := flag.String("baseline", "", "a JSON document of an earlier run: fail on +2% instructions")
	compare := flag.String("compare", "", "a git revision (main): build its costbench, measure both alternately, fail on +2% instructions")
	spread := flag.Int("spread", 0, "measure each scenario this many times and print the spread")
	out := flag.String("out", "", "write the JSON document here")
	only := flag.String("only", "", "measure only this scenario")
	rounds := flag.Int("rounds", 3, "callgrind runs per point; the fewest instructions count")
	flag.Parse()
	if *child {
		for _, sc := range deliverycost.Scenarios {
			if sc.Name == *name {
				fmt.Println(deliver(sc, *deliveries, *publishOnly))
				return
			}
		}
		fmt.Fprintln(os.Stderr, "unknown scenario", *name)
		os.Exit(2)
	}
	if err := run(*deliveries, *rounds, *spread, *only, *baseline, *compare, *out); err != nil {
		fmt.Fprintln(os.Stderr, "costbench:", err)
		os.Exit(1)
	}
}

var errGateFailed = errors.New("the gate failed (above)")

func run(deliveries, rounds, spread int, only, baseline, compare, out string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var scenarios []deliverycost.Scenario
	for _, sc := range deliverycost.Scenarios {
		if only == "" || sc.Name == only {
			scenarios = append(scenarios, sc)
		}
	}
	if spread > 0 {
		return printSpread(self, scenarios, deliveries, rounds, spread)
	}
	base := map[string]row{}
	var baseBinary string
	if compare != "" {
		dir, err := os.MkdirTemp("", "costbench-compare-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if baseBinary, err = buildRevision(compare, dir); err != nil {
			return err
		}
	}
	if baseline != "" {
		var doc struct{ Code []row }
		data, err := os.ReadFile(baseline)
		if err == nil {
			err = json.Unmarshal(data, &doc)
		}
		if err != nil {
			return err
		}
		for _, r := range doc.Code {
			base[r.Name] = r
		}
	}
	var rows []row
	failed := false
	printHeader()
	for _, sc := range scenarios {
		if baseBinary != "" {
			b, err := measure(baseBinary, sc, deliveries, rounds)
			switch {
			case errors.Is(err, errUnknownScenario):
				fmt.Printf("%-58s new on this tree: %s has no such scenario\n", sc.Name, compare)
			case err != nil:
				return err
			default:
				printLabelledRow(compare+": "+sc.Name, b)
				base[sc.Name] = b
			}
		}
		r, err := measure(self, sc, deliveries, rounds)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		printRow(r)
		if aboveFloor(r) {
			fmt.Printf("  FAIL: %.3f allocations per message above the declared floor %.2f\n", r.Framework.Allocations, r.Floor)
			failed = true
		}
		if b, ok := base[sc.Name]; ok && b.Framework.Instructions > 0 {
			change := instructionsChangePercent(r, b)
			verdict := "ok"
			if change > gateInstructionsPercent {
				verdict, failed = fmt.Sprintf("FAIL: above +%.0f %%", gateInstructionsPercent), true
			}
			fmt.Printf("  %+.2f %% instructions per message against the baseline: %s\n", change, verdict)
		}
	}
	if out != "" {
		doc := map[string]any{
			"schema": 3, "package": "github.com/sushka-io/sushka/stream", "measured_at": time.Now().UTC().Format("2006-01-02"),
			"environment": map[string]any{"go": runtime.Version(), "goarch": runtime.GOARCH, "gomaxprocs": 1, "gogc": "off", "cpu": "unknown (instructions do not depend on it)"},
			"code":        rows,
		}
		data, _ := json.MarshalIndent(doc, "", "  ")
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if failed {
		return errGateFailed
	}
	return nil
}

// printSpread measures each scenario times times, as the gate does (the
// fewest instructions of rounds runs per point), and prints best, median
// and worst instructions per message and the spread (worst − best) / best:
// the resolution the gate can rely on.
func printSpread(self string, scenarios []deliverycost.Scenario, deliveries, rounds, times int) error {
	fmt.Printf("%-58s %10s %10s %10s %8s   (%d measurements of %d rounds, %d against %d deliveries)\n", "scenario", "best", "median", "worst", "spread", times, rounds, deliveries, 2*deliveries)
	for _, sc := range scenarios {
		var perMessage []float64
		for range times {
			r, err := measure(self, sc, deliveries, rounds)
			if err != nil {
				return err
			}
			perMessage = append(perMessage, r.Framework.Instructions)
		}
		slices.Sort(perMessage)
		best, worst := perMessage[0], perMessage[len(perMessage)-1]
		fmt.Printf("%-58s %10.1f %10.1f %10.1f %7.2f%%\n", sc.Name, best, perMessage[len(perMessage)/2], worst, (worst-best)/best*100)
	}
	return nil
}
