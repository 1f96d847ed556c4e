// Command procpeers measures the proc runtime against Erlang/OTP and
// Proto.Actor Go on the same machine, in the same run, interleaved (one
// measurement of every implementation per round), by the seed's method:
// time by slope (two run lengths, the difference divided by the extra work,
// so start-up and exit cancel), the minimum of the rounds; memory by live
// heap delta per process (runtime/metrics; erlang:memory(processes) for
// Erlang). Every measurement is a fresh child process, so no run inherits
// another's heap.
//
//	cd bench/procpeers && go run . -rounds 5            # the recorded matrix
//	go run . -rounds 1 -quick                           # a smoke run, small sizes
//	go run . -callgrind                                 # instructions per delivery (valgrind)
//
// Erlang needs erl and erlc on PATH (Debian: erlang-nox); without them its
// column is skipped.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	rounds    = flag.Int("rounds", 5, "interleaved rounds; figures are the minimum over them (median and worst beside)")
	only      = flag.String("only", "", "run only scenarios whose name matches this regexp")
	quick     = flag.Bool("quick", false, "small sizes, for a smoke run (figures not for recording)")
	callgrind = flag.Bool("callgrind", false, "measure instructions per delivery with valgrind --tool=callgrind instead")
	child     = flag.Bool("child", false, "internal: run one measurement and print RESULT <value>")
	fromRaw   = flag.String("from-raw", "", "print the tables from the raw runs a previous run wrote to stderr, instead of measuring")
)

func main() {
	flag.Parse()
	if *child {
		runChild(flag.Args())
		return
	}
	if *callgrind {
		runCallgrind()
		return
	}
	if *fromRaw != "" {
		printFromRaw(*fromRaw)
		return
	}
	runMatrix()
}

// runChild performs one measurement: impl scenario args...
func runChild(args []string) {
	ints := make([]int, 0, len(args))
	for _, a := range args[2:] {
		n, err := strconv.Atoi(a)
		if err != nil {
			fail("bad argument %q", a)
		}
		ints = append(ints, n)
	}
	arg := func(i int) int {
		if i >= len(ints) {
			fail("%s %s: missing argument %d", args[0], args[1], i)
		}
		return ints[i]
	}
	var value float64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	switch args[0] + " " + args[1] {
	case "proc idle":
		value = procIdle(arg(0), false)
	case "proc idle-named":
		value = procIdle(arg(0), true)
	case "proc worked":
		value = procWorked(arg(0))
	case "proc spawn":
		value = us(procSpawn(arg(0)))
	case "proc pingpong":
		value = us(procPingPong(arg(0), arg(1), false))
	case "proc-det pingpong":
		value = us(procPingPong(arg(0), arg(1), true))
	case "proc ready":
		value = us(procReady(arg(0), arg(1), false))
	case "proc-det ready":
		value = us(procReady(arg(0), arg(1), true))
	case "proc restart":
		value = us(procRestart(arg(0)))
	case "proc multicore":
		value = us(procMultiCore(arg(0), arg(1), arg(2), arg(3)))
	case "protoactor idle":
		value = paIdle(arg(0))
	case "protoactor worked":
		value = paWorked(arg(0))
	case "protoactor spawn":
		value = us(paSpawn(arg(0)))
	case "protoactor pingpong":
		value = us(paPingPong(arg(0), arg(1)))
	case "protoactor ready":
		value = us(paReady(arg(0), arg(1)))
	case "protoactor restart":
		value = us(paRestart(arg(0)))
	case "protoactor multicore":
		value = us(paMultiCore(arg(1), arg(2), arg(3))) // arg(0), the threads, is GOMAXPROCS
	default:
		fail("unknown measurement %v", args)
	}
	fmt.Printf("RESULT %g\n", value)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "procpeers: "+format+"\n", args...)
	os.Exit(2)
}

// A point is one cell of the matrix: a scenario at one size, measured for
// each implementation either directly (memory) or by slope between a short
// and a long run.
type point struct {
	scenario string // table name
	size     string // the size column
	unit     string // of the figure
	// args gives the child arguments of the short (long=false) or long run;
	// perUnit is the extra work between them (deliveries, spawns, ...), 0
	// for a direct measurement.
	args    func(long bool) []string
	perUnit float64
	scale   float64 // figure = (long - short) / perUnit * scale, or value * scale
	impls   []string
	env     map[string][]string // extra environment per implementation
	erlArgs []string            // extra emulator flags for Erlang
}

func sizes(full, small []int) []int {
	if *quick {
		return small
	}
	return full
}

func itoa(n int) string { return strconv.Itoa(n) }

func matrix() []point {
	var ps []point
	all := []string{"proc", "protoactor", "erlang"}
	for _, n := range sizes([]int{1000, 100_000, 1_000_000}, []int{1000, 10_000}) {
		n := n
		ps = append(ps, point{scenario: "idle memory per process", size: itoa(n), unit: "B",
			args: func(bool) []string { return []string{"idle", itoa(n)} }, scale: 1, impls: all})
	}
	nInfo := sizes([]int{1_000_000}, []int{10_000})[0]
	ps = append(ps, point{scenario: "idle memory per process, Erlang's process_info(Pid, memory)", size: itoa(nInfo), unit: "B",
		args: func(bool) []string { return []string{"pinfo", itoa(nInfo)} }, scale: 1, impls: []string{"erlang"}})
	nNamed := sizes([]int{1_000_000}, []int{10_000})[0]
	ps = append(ps, point{scenario: "idle memory per named process", size: itoa(nNamed), unit: "B",
		args: func(bool) []string { return []string{"idle-named", itoa(nNamed)} }, scale: 1, impls: []string{"proc"}})
	for _, n := range sizes([]int{1000, 100_000, 1_000_000}, []int{1000, 10_000}) {
		n := n
		ps = append(ps, point{scenario: "memory per process that worked once", size: itoa(n), unit: "B",
			args: func(bool) []string { return []string{"worked", itoa(n)} }, scale: 1, impls: all})
	}
	spawnShort, spawnLong := 100_000, 1_000_000
	if *quick {
		spawnShort, spawnLong = 10_000, 50_000
	}
	ps = append(ps, point{scenario: "spawn at run time (slope)", size: itoa(spawnShort) + "→" + itoa(spawnLong), unit: "ns/spawn",
		args: func(long bool) []string {
			if long {
				return []string{"spawn", itoa(spawnLong)}
			}
			return []string{"spawn", itoa(spawnShort)}
		}, perUnit: float64(spawnLong - spawnShort), scale: 1e3, impls: all})
	ps = append(ps, point{scenario: "spawn at run time (total)", size: itoa(spawnLong), unit: "ms",
		args: func(bool) []string { return []string{"spawn", itoa(spawnLong)} }, scale: 1e-3, impls: all})
	short, long := 200_000, 1_000_000
	if *quick {
		short, long = 100_000, 300_000
	}
	for _, alive := range sizes([]int{2, 1000, 100_000, 1_000_000}, []int{2, 10_000}) {
		alive := alive
		s, l := short, long
		if alive > 2 {
			s, l = short/2, long/2
		}
		ps = append(ps, point{scenario: "ping-pong delivery, pair spawned last", size: itoa(alive) + " alive", unit: "ns/delivery",
			args: func(isLong bool) []string {
				n := s
				if isLong {
					n = l
				}
				return []string{"pingpong", itoa(alive), itoa(n)}
			}, perUnit: float64(l - s), scale: 1e3, impls: []string{"proc", "proc-det", "protoactor", "erlang", "erlang-s1"}})
	}
	for _, ready := range sizes([]int{2, 1000, 100_000, 1_000_000}, []int{2, 10_000}) {
		ready := ready
		totalShort, totalLong := 1_000_000, 3_000_000
		if *quick {
			totalShort, totalLong = 100_000, 300_000
		}
		k1, k2 := max(totalShort/ready, 1), max(totalLong/ready, 3)
		ps = append(ps, point{scenario: "switch with N ready (self-send, one message per turn)", size: itoa(ready) + " ready", unit: "ns/switch",
			args: func(isLong bool) []string {
				k := k1
				if isLong {
					k = k2
				}
				return []string{"ready", itoa(ready), itoa(k)}
			}, perUnit: float64(ready * (k2 - k1)), scale: 1e3, impls: []string{"proc", "proc-det", "protoactor", "erlang", "erlang-s1"}})
	}
	rs, rl := 5_000, 20_000
	if *quick {
		rs, rl = 1000, 3000
	}
	ps = append(ps, point{scenario: "supervised restart", size: itoa(rs) + "→" + itoa(rl), unit: "ns/restart",
		args: func(isLong bool) []string {
			if isLong {
				return []string{"restart", itoa(rl)}
			}
			return []string{"restart", itoa(rs)}
		}, perUnit: float64(rl - rs), scale: 1e3, impls: all})
	// Multi-core: 64 processes with heavy handlers (and, for the cost of
	// crossing threads, empty ones), on 1 and 2 threads: proc's
	// Schedulers, Proto.Actor's GOMAXPROCS, Erlang's +S. Erlang's handler is
	// its own loop (small integers), so compare each column's speedup, not
	// the levels across columns.
	for _, c := range []struct{ goIterations, erlIterations, short, long int }{{20_000, 2_000, 100, 300}, {0, 0, 10_000, 30_000}} {
		c := c
		for _, threads := range []int{1, 2} {
			threads := threads
			ps = append(ps, point{scenario: fmt.Sprintf("multi-core: 64 processes, handler of %d xorshift rounds (Erlang %d)", c.goIterations, c.erlIterations), size: itoa(threads) + " threads", unit: "ns/message",
				args: func(isLong bool) []string {
					m := c.short
					if isLong {
						m = c.long
					}
					return []string{"multicore", itoa(threads), "64", itoa(m), itoa(c.goIterations)}
				}, perUnit: float64(64 * (c.long - c.short)), scale: 1e3, impls: []string{"proc", "protoactor", "erlang"},
				env:     map[string][]string{"protoactor": {"GOMAXPROCS=" + itoa(threads)}},
				erlArgs: []string{"+S", itoa(threads) + ":" + itoa(threads), "-erlang-iterations", itoa(c.erlIterations)}})
		}
	}
	return ps
}

func runMatrix() {
	erlDir, erlErr := buildErlang()
	fmt.Print(passport())
	if erlErr != nil {
		fmt.Printf("# erlang: skipped (%v)\n", erlErr)
	}
	fmt.Printf("# load before: %s", readFile("/proc/loadavg"))
	var filter *regexp.Regexp
	if *only != "" {
		filter = regexp.MustCompile(*only)
	}
	points := matrix()
	// runs[i][impl] holds every round's raw run values: (short, long) for a
	// slope, (value, 0) for a direct measurement.
	runs := make(map[int]map[string][][2]float64)
	for r := 1; r <= *rounds; r++ {
		for i, p := range points {
			if filter != nil && !filter.MatchString(p.scenario) {
				continue
			}
			if runs[i] == nil {
				runs[i] = map[string][][2]float64{}
			}
			for _, impl := range p.impls {
				if strings.HasPrefix(impl, "erlang") && erlErr != nil {
					continue
				}
				pair, err := measure(p, impl, erlDir)
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s %s %s: %v\n", p.scenario, p.size, impl, err)
					continue
				}
				runs[i][impl] = append(runs[i][impl], pair)
				fmt.Fprintf(os.Stderr, "round %d: %s [%s] %s: raw %.6g %.6g\n", r, p.scenario, p.size, impl, pair[0], pair[1])
			}
		}
	}
	fmt.Printf("# load after: %s", readFile("/proc/loadavg"))
	printTables(points, runs, *rounds)
}

// printFromRaw rebuilds the tables from the "round N: scenario [size]
// impl: raw short long" lines of an earlier run.
func printFromRaw(path string) {
	points := matrix()
	index := map[string]int{}
	for i, p := range points {
		index[p.scenario+" ["+p.size+"]"] = i
	}
	line := regexp.MustCompile(`^round (\d+): (.*) (\S+): raw (\S+) (\S+)$`)
	runs := make(map[int]map[string][][2]float64)
	maxRound := 0
	for _, l := range strings.Split(readFile(path), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		i, ok := index[m[2]]
		if !ok {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		maxRound = max(maxRound, r)
		a, _ := strconv.ParseFloat(m[4], 64)
		b, _ := strconv.ParseFloat(m[5], 64)
		if runs[i] == nil {
			runs[i] = map[string][][2]float64{}
		}
		runs[i][m[3]] = append(runs[i][m[3]], [2]float64{a, b})
	}
	printTables(points, runs, maxRound)
}

func printTables(points []point, runs map[int]map[string][][2]float64, rounds int) {
	fmt.Printf("# rounds: %d. A cell is min (median, max) over the rounds; for a slope, (long - short) / extra work\n", rounds)
	fmt.Printf("# computed from the minima of the short and of the long runs (then from their medians, their maxima),\n")
	fmt.Printf("# so noise, which only lengthens runs, is dropped from both ends. Raw runs on stderr.\n\n")
	last := ""
	for i, p := range points {
		res := runs[i]
		if res == nil {
			continue
		}
		if p.scenario != last {
			fmt.Printf("\n%s (%s)\n\n| size | proc | proc (deterministic) | Proto.Actor Go | Erlang/OTP | Erlang/OTP +S 1:1 |\n|---|---:|---:|---:|---:|---:|\n", p.scenario, p.unit)
			last = p.scenario
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", p.size, cell(p, res["proc"]), cell(p, res["proc-det"]), cell(p, res["protoactor"]), cell(p, res["erlang"]), cell(p, res["erlang-s1"]))
	}
}

// cell is min (median, max) of one implementation's runs, slopes taken
// between the order statistics of the short and of the long runs.
func cell(p point, pairs [][2]float64) string {
	if len(pairs) == 0 {
		return "–"
	}
	short := make([]float64, len(pairs))
	long := make([]float64, len(pairs))
	for i, pr := range pairs {
		short[i], long[i] = pr[0], pr[1]
	}
	sort.Float64s(short)
	sort.Float64s(long)
	figure := func(k int) float64 {
		if p.perUnit == 0 {
			return short[k] * p.scale
		}
		return (long[k] - short[k]) / p.perUnit * p.scale
	}
	return fmt.Sprintf("%s (%s, %s)", num(figure(0)), num(figure(len(pairs)/2)), num(figure(len(pairs)-1)))
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// measure runs one cell for one implementation: one child for a direct
// figure, two (short, long) for a slope; it returns the raw values.
func measure(p point, impl, erlDir string) ([2]float64, error) {
	short, err := runOne(impl, p.args(false), erlDir, p)
	if err != nil || p.perUnit == 0 {
		return [2]float64{short, 0}, err
	}
	long, err := runOne(impl, p.args(true), erlDir, p)
	return [2]float64{short, long}, err
}

func runOne(impl string, args []string, erlDir string, p point) (float64, error) {
	var cmd *exec.Cmd
	env := p.env[impl]
	if strings.HasPrefix(impl, "erlang") {
		flags := []string{"-noshell", "+P", "20000000"}
		if impl == "erlang-s1" {
			flags = append(flags, "+S", "1:1") // one scheduler thread, as proc's
		}
		if len(p.erlArgs) > 0 {
			// erlArgs: emulator flags, then "-erlang-iterations N", which
			// replaces the Go handler's iteration count (the last argument).
			flags = append(flags, p.erlArgs[0], p.erlArgs[1])
			args = append(append([]string(nil), args[:len(args)-1]...), p.erlArgs[3])
		}
		if args[0] == "multicore" {
			args = append([]string{"multicore"}, args[2:]...) // the thread count is +S
		}
		cmd = exec.Command("erl", append(append(flags, "-pa", erlDir, "-s", "procbench", "main"), args...)...)
	} else {
		self, err := os.Executable()
		if err != nil {
			return 0, err
		}
		cmd = exec.Command(self, append([]string{"-child", impl}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return parseResult(out)
}

func parseResult(out []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("no RESULT line in %q", out)
}

// buildErlang compiles procbench.erl into a temporary directory.
func buildErlang() (string, error) {
	if _, err := exec.LookPath("erlc"); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "procbench-erl")
	if err != nil {
		return "", err
	}
	src, err := filepath.Abs(".")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("erlc", "-o", dir, filepath.Join(src, "procbench.erl"), filepath.Join(src, "procbench_sup.erl"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("erlc: %v: %s", err, out)
	}
	return dir, nil
}

// passport prints the host and runtime profile (MEASURING.md).
func passport() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# date: %s\n", time.Now().UTC().Format(time.RFC3339))
	model := ""
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			break
		}
	}
	fmt.Fprintf(&b, "# host: %s, %d cores, %s", model, runtime.NumCPU(), firstLine(readFile("/proc/meminfo")))
	fmt.Fprintf(&b, "# kernel: %s", readFile("/proc/sys/kernel/osrelease"))
	fmt.Fprintf(&b, "# go: %s %s/%s GOMAXPROCS=%d GOGC=%s GOMEMLIMIT=%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.GOMAXPROCS(0), envOr("GOGC", "100"), envOr("GOMEMLIMIT", "unset"))
	if out, err := exec.Command("erl", "-noshell", "-eval", `io:format("~s erts-~s schedulers=~p~n", [erlang:system_info(otp_release), erlang:system_info(version), erlang:system_info(schedulers)]), init:stop().`).Output(); err == nil {
		fmt.Fprintf(&b, "# erlang: OTP %s", out)
	}
	fmt.Fprintf(&b, "# peers: Proto.Actor Go %s\n", protoactorVersion())
	return b.String()
}

func protoactorVersion() string {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/asynkron/protoactor-go" {
			return f[1]
		}
	}
	return "?"
}

func readFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "?\n"
	}
	return string(data)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return s
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// runCallgrind counts instructions per delivery: the same binary under
// callgrind with two run lengths, the difference divided by the extra
// deliveries (so start-up and exit cancel).
func runCallgrind() {
	if _, err := exec.LookPath("valgrind"); err != nil {
		fail("valgrind not found (Debian: valgrind)")
	}
	self, err := os.Executable()
	if err != nil {
		fail("%v", err)
	}
	fmt.Print(passport())
	collected := regexp.MustCompile(`Collected : (\d+)`)
	count := func(args ...string) float64 {
		cmd := exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=/dev/null", self, "-child"}, args...)...)
		// No preemption signals: callgrind's signal handling asserts on
		// Go's SIGURG now and then.
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			fail("callgrind %v: %v\n%s", args, err, out)
		}
		m := collected.FindSubmatch(out)
		if m == nil {
			fail("callgrind %v: no instruction count in\n%s", args, out)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	for _, c := range []struct {
		impl        string
		alive       int
		short, long int
	}{
		{"proc", 2, 200_000, 1_200_000},
		{"proc-det", 2, 200_000, 1_200_000},
		{"proc", 100_000, 200_000, 1_200_000},
		{"protoactor", 2, 20_000, 60_000}, // slower under valgrind (goroutine hand-offs); smaller runs
	} {
		s := count(c.impl, "pingpong", itoa(c.alive), itoa(c.short))
		l := count(c.impl, "pingpong", itoa(c.alive), itoa(c.long))
		fmt.Printf("| %s | ping-pong, %d alive | %.0f instructions/delivery | (%s→%s deliveries: %.0f → %.0f) |\n",
			c.impl, c.alive, (l-s)/float64(c.long-c.short), itoa(c.short), itoa(c.long), s, l)
	}
}
