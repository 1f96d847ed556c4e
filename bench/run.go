package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RoundResult is one round of one system. It is also what a --vs-exec
// program prints as the last line of its standard output (JSON), so peers
// that do not speak Kafka (bench/peers/jetstream) join the interleaved
// rounds.
type RoundResult struct {
	System string `json:"system"`
	Round  int    `json:"round"` // 0 is the discarded calibration round
	Mode   string `json:"mode"`  // open-loop, closed-loop, consume, e2e
	// Throughput is achieved records per second; MBps payload MB/s.
	Throughput float64 `json:"records_per_s"`
	MBps       float64 `json:"mb_per_s"`
	Offered    float64 `json:"offered_per_s,omitempty"`
	Latency    Latency `json:"latency"`
	SendLag    Latency `json:"send_lag"`
	// Raw counts, so an impossible figure shows.
	Issued     int64   `json:"issued"`
	Acked      int64   `json:"acked"`
	Errors     int64   `json:"errors"`
	Unfinished int64   `json:"unfinished"`
	FirstError string  `json:"first_error,omitempty"`
	Bytes      int64   `json:"bytes"`
	ElapsedSec float64 `json:"elapsed_s"`
	// DiskBytes is what the round added to the partition logs
	// (DescribeLogDirs; matrix).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// CPU of the generator and of the broker over the round.
	GeneratorCPU       CPUSample `json:"generator_cpu"`
	GeneratorSaturated bool      `json:"generator_saturated"`
	BrokerCPU          CPUSample `json:"broker_cpu"`
	BrokerCPUPerGB     float64   `json:"broker_cpu_s_per_gb"`
	GeneratorCPUPerGB  float64   `json:"generator_cpu_s_per_gb"`
	// BrokerWrite is what the broker wrote to storage over the round.
	BrokerWrite WriteSample `json:"broker_write"`
	// FinalLag is how late the open loop sent its last request.
	FinalLag time.Duration `json:"final_send_lag_ns,omitempty"`
	// Backpressure is the loop's total wait for the broker's in-flight
	// bound (raw engine).
	Backpressure time.Duration `json:"backpressure_ns,omitempty"`
	// MachineBusy is the share of all the machine's cores that was busy
	// over the round, whoever used them (/proc/stat).
	MachineBusy   float64 `json:"machine_busy"`
	MachineBusyOK bool    `json:"machine_busy_ok"`
	// Bound names what set the round's pace, from BoundFigures (bound.go).
	Bound        string       `json:"bound"`
	BoundFigures BoundFigures `json:"bound_figures"`
	// Cleanup, if set by the round function, runs after the round's CPU
	// and time windows have closed (deleting the round's topic must not
	// count as the round's broker work).
	Cleanup    func() `json:"-"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
	Note       string `json:"note,omitempty"`
}

// FromLoad fills the load figures of r from l and bytes.
func (r *RoundResult) FromLoad(l LoadResult, bytes int64) {
	r.Mode, r.Offered = l.Mode, l.Offered
	r.Throughput = l.Achieved()
	if l.Elapsed > 0 {
		r.MBps = float64(bytes) / l.Elapsed.Seconds() / 1e6
	}
	if l.Latency != nil {
		r.Latency = l.Latency.Summary()
	}
	if l.SendLag != nil {
		r.SendLag = l.SendLag.Summary()
	}
	r.FinalLag, r.Backpressure = l.FinalLag, l.Backpressure
	r.Issued, r.Acked, r.Errors, r.Unfinished, r.FirstError = l.Issued, l.Acked, l.Errors, l.Unfinished, l.FirstError
	r.Bytes, r.ElapsedSec = bytes, l.Elapsed.Seconds()
}

// RoundFunc runs one round of a workload against sys.
type RoundFunc func(ctx context.Context, sys System, round int) (RoundResult, error)

// Runner runs rounds interleaved across systems: a discarded calibration
// round of each, then A B A B A B (MEASURING.md rules 5 and 12).
type Runner struct {
	Systems  []System
	Rounds   int
	Progress *Progress
	// Env is the workload passed to --vs-exec programs as SUSHKA_BENCH_*
	// variables.
	Env map[string]string
	// NoCalibration skips the discarded first round.
	NoCalibration bool
	// DiskSeqWriteMBps is the disk's sequential write bandwidth (the
	// passport's probe; 0: not probed), for the disk-bound label.
	DiskSeqWriteMBps float64
}

// Run measures one scenario.
func (r *Runner) Run(ctx context.Context, sc *Scenario, fn RoundFunc) error {
	rounds := max(r.Rounds, 1)
	first := 0
	if r.NoCalibration {
		first = 1
	}
	for round := first; round <= rounds; round++ {
		for _, sys := range r.Systems {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			label := fmt.Sprintf("%s: %s round %d/%d", sc.Name, sys.Name, round, rounds)
			if round == 0 {
				label = fmt.Sprintf("%s: %s calibration (discarded)", sc.Name, sys.Name)
			}
			r.Progress.Start(label)
			res, err := r.one(ctx, sys, round, fn)
			if err != nil {
				r.Progress.Done(label + ": " + err.Error())
				return fmt.Errorf("%s, %s round %d: %w", sc.Name, sys.Name, round, err)
			}
			r.Progress.Done(fmt.Sprintf("%s: %.0f records/s, p99 %s", label, res.Throughput, fmtMs(res.Latency.P99)))
			if round > 0 {
				sc.add(res)
			}
		}
	}
	sc.finish()
	return nil
}

func (r *Runner) one(ctx context.Context, sys System, round int, fn RoundFunc) (RoundResult, error) {
	load0 := LoadAvg()
	gen := WatchCPU("self")
	brk := WatchCPU(sys.PID)
	wr := WatchWrites(sys.PID)
	machine := WatchMachine()
	var res RoundResult
	var err error
	if sys.Exec != "" {
		res, err = r.exec(ctx, sys, round)
	} else {
		res, err = fn(ctx, sys, round)
		res.GeneratorCPU = gen.Stop()
	}
	res.BrokerCPU = brk.Stop()
	res.BrokerWrite = wr.Stop()
	res.MachineBusy, res.MachineBusyOK = machine.Stop()
	if res.Cleanup != nil {
		res.Cleanup()
		res.Cleanup = nil
	}
	if err != nil {
		return res, err
	}
	res.System, res.Round = sys.Name, round
	res.LoadBefore, res.LoadAfter = load0, LoadAvg()
	res.GeneratorSaturated = res.GeneratorSaturated || GeneratorSaturated(res.GeneratorCPU)
	res.BrokerCPUPerGB = res.BrokerCPU.SecondsPerGB(res.Bytes)
	res.GeneratorCPUPerGB = res.GeneratorCPU.SecondsPerGB(res.Bytes)
	limit := float64(generatorCores())
	if sys.Exec != "" {
		limit = float64(runtime.NumCPU()) // a child generator: its GOMAXPROCS is its own
	}
	boundOf(&res, limit, runtime.NumCPU(), r.DiskSeqWriteMBps)
	return res, nil
}

// exec runs sys.Exec through sh with the workload in the environment and
// reads a RoundResult from the last line of its output.
func (r *Runner) exec(ctx context.Context, sys System, round int) (RoundResult, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", sys.Exec)
	cmd.Env = os.Environ()
	for k, v := range r.Env {
		cmd.Env = append(cmd.Env, "SUSHKA_BENCH_"+k+"="+v)
	}
	cmd.Env = append(cmd.Env, "SUSHKA_BENCH_ROUND="+strconv.Itoa(round), "SUSHKA_BENCH_SYSTEM="+sys.Name)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return RoundResult{}, fmt.Errorf("%s: %v\n%s", sys.Exec, err, errb.String())
	}
	wall := time.Since(start)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res RoundResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("%s: last output line is not a result document: %v", sys.Exec, err)
	}
	if ps := cmd.ProcessState; ps != nil {
		// The child is the generator: its CPU time, over the wall time.
		res.GeneratorCPU = CPUSample{CPU: ps.UserTime() + ps.SystemTime(), System: ps.SystemTime(), Wall: wall, OK: true}
	}
	return res, nil
}

// Progress shows what runs: a bar redrawn in place on a terminal, plain
// lines otherwise.
type Progress struct {
	W     io.Writer
	TTY   bool
	Total int
	n     int
	start time.Time
}

// NewProgress writes to f, as a bar when f is a terminal.
func NewProgress(f *os.File, total int) *Progress {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return &Progress{W: f, TTY: err == nil, Total: total, start: time.Now()}
}

// Start announces a step.
func (p *Progress) Start(label string) {
	if p == nil || p.W == nil {
		return
	}
	if p.TTY {
		const width = 30
		filled := 0
		if p.Total > 0 {
			filled = min(width, width*p.n/p.Total)
		}
		fmt.Fprintf(p.W, "\r\033[K[%s%s] %d/%d %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.n, p.Total, label)
		return
	}
	fmt.Fprintf(p.W, "# [%d/%d %s] %s\n", p.n+1, p.Total, time.Since(p.start).Round(time.Second), label)
}

// Done ends a step.
func (p *Progress) Done(msg string) {
	if p == nil || p.W == nil {
		return
	}
	p.n++
	if p.TTY {
		fmt.Fprintf(p.W, "\r\033[K%s\n", msg)
		return
	}
	fmt.Fprintf(p.W, "#   %s\n", msg)
}

// NewProgressW is NewProgress for any writer: a bar only when w is a
// terminal *os.File.
func NewProgressW(w io.Writer, total int) *Progress {
	if f, ok := w.(*os.File); ok {
		return NewProgress(f, total)
	}
	return &Progress{W: w, Total: total, start: time.Now()}
}
