package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// What set a round's pace (MEASURING.md rule 10a), named from the figures
// measured during the round, in this order of precedence:
//
//   - offered-rate: an open loop achieved its offered rate and kept its
//     schedule: nothing was saturated, the figure is no ceiling.
//   - machine-bound: the generator and the broker together kept at least
//     MachineBoundShare of the machine's cores busy; neither can be
//     said to be the limit (on 2 shared cores, the usual case for a
//     franz-go generator). Also when the machine's cores were that busy
//     whoever used them (/proc/stat): on a shared machine other processes
//     take the cores the broker would have used.
//   - generator-bound: the generator kept at least GeneratorBoundShare of
//     the cores it may use (GOMAXPROCS) busy, or its open-loop schedule
//     fell behind (the last request was sent ScheduleBehind late or
//     more) and waiting for the broker's in-flight bound (Backpressure)
//     explains less than half of that lag: the figures describe the
//     generator.
//   - disk-bound: the broker wrote at least DiskBoundShare of the disk's
//     sequential write bandwidth (the passport's probe).
//   - broker-bound: the broker set the pace with cores and disk to spare.
//   - undetermined: a figure the rule needs is missing (no broker pid, no
//     disk probe), and no other label applies.
const (
	BoundMachine      = "machine-bound"
	BoundGenerator    = "generator-bound"
	BoundDisk         = "disk-bound"
	BoundOfferedRate  = "offered-rate"
	BoundBroker       = "broker-bound"
	BoundUndetermined = "undetermined"
)

// The thresholds of the rule, in one place.
const (
	MachineBoundShare   = 0.90
	GeneratorBoundShare = 0.90
	DiskBoundShare      = 0.85
	// OfferedKeptShare of the offered rate achieved is an open loop that
	// kept up.
	OfferedKeptShare = 0.95
	// A schedule is behind when its last request was sent at least
	// ScheduleBehindMin and ScheduleBehindShare of the window late.
	ScheduleBehindMin   = 50 * time.Millisecond
	ScheduleBehindShare = 0.05
)

// BoundFigures are the measurements the rule reads, printed beside the
// label.
type BoundFigures struct {
	MachineCores int `json:"machine_cores"`
	// MachineBusy is the busy share of all cores, every process included.
	MachineBusy   float64 `json:"machine_busy"`
	MachineBusyOK bool    `json:"machine_busy_ok"`
	// GeneratorCores used, of GeneratorLimit it may use (GOMAXPROCS).
	GeneratorCores float64 `json:"generator_cores"`
	GeneratorLimit float64 `json:"generator_limit_cores"`
	GeneratorKnown bool    `json:"generator_known"`
	BrokerCores    float64 `json:"broker_cores"`
	BrokerKnown    bool    `json:"broker_known"`
	// DiskWriteMBps is what the broker wrote (DiskWriteSource: its
	// /proc/PID/io write_bytes, or the payload acknowledged when that is
	// not readable); DiskSeqWriteMBps the disk's sequential write
	// bandwidth from the passport's probe (0: not probed).
	DiskWriteMBps    float64 `json:"disk_write_mb_per_s"`
	DiskWriteSource  string  `json:"disk_write_source,omitempty"`
	DiskSeqWriteMBps float64 `json:"disk_seq_write_mb_per_s"`
	// OpenLoop rounds: offered and achieved records per second, and how
	// late the last request was sent over a window of Window.
	OpenLoop bool          `json:"open_loop"`
	Offered  float64       `json:"offered_per_s,omitempty"`
	Achieved float64       `json:"achieved_per_s,omitempty"`
	FinalLag time.Duration `json:"final_send_lag_ns,omitempty"`
	Window   time.Duration `json:"window_ns,omitempty"`
	// Backpressure is the loop's total wait for the broker's in-flight
	// bound: lag it explains is the broker's pace.
	Backpressure time.Duration `json:"backpressure_ns,omitempty"`
}

// ScheduleBehind says the open loop's schedule fell behind.
func (f BoundFigures) ScheduleBehind() bool {
	if !f.OpenLoop {
		return false
	}
	limit := max(ScheduleBehindMin, time.Duration(ScheduleBehindShare*float64(f.Window)))
	return f.FinalLag >= limit
}

// generatorBehind: the schedule fell behind and the broker's in-flight
// bound does not explain it.
func (f BoundFigures) generatorBehind() bool {
	return f.ScheduleBehind() && 2*f.Backpressure < f.FinalLag
}

// Bound is the label of the rule above.
func Bound(f BoundFigures) string {
	switch {
	case f.OpenLoop && f.Offered > 0 && f.Achieved >= OfferedKeptShare*f.Offered && !f.ScheduleBehind():
		return BoundOfferedRate
	case f.GeneratorKnown && f.BrokerKnown && f.MachineCores > 0 &&
		f.GeneratorCores+f.BrokerCores >= MachineBoundShare*float64(f.MachineCores),
		f.MachineBusyOK && f.MachineBusy >= MachineBoundShare:
		return BoundMachine
	case f.GeneratorKnown && f.GeneratorLimit > 0 && f.GeneratorCores >= GeneratorBoundShare*f.GeneratorLimit,
		f.generatorBehind():
		return BoundGenerator
	case f.DiskSeqWriteMBps > 0 && f.DiskWriteMBps >= DiskBoundShare*f.DiskSeqWriteMBps:
		return BoundDisk
	case f.BrokerKnown && f.DiskSeqWriteMBps > 0:
		return BoundBroker
	}
	return BoundUndetermined
}

// String prints the figures behind the label.
func (f BoundFigures) String() string {
	var parts []string
	if f.GeneratorKnown {
		parts = append(parts, fmt.Sprintf("generator %.2f of %.0f cores", f.GeneratorCores, f.GeneratorLimit))
	} else {
		parts = append(parts, "generator cores unknown")
	}
	if f.BrokerKnown {
		parts = append(parts, fmt.Sprintf("broker %.2f cores", f.BrokerCores))
		if f.GeneratorKnown && f.MachineCores > 0 {
			sum := f.GeneratorCores + f.BrokerCores
			parts = append(parts, fmt.Sprintf("together %.2f of the machine's %d (%.0f%%)", sum, f.MachineCores, 100*sum/float64(f.MachineCores)))
		}
	} else {
		parts = append(parts, "broker cores unknown (no pid)")
	}
	if f.MachineBusyOK && f.MachineCores > 0 {
		others := f.MachineBusy*float64(f.MachineCores) - f.GeneratorCores - f.BrokerCores
		parts = append(parts, fmt.Sprintf("machine %.0f%% busy (other processes %.2f cores)", 100*f.MachineBusy, max(others, 0)))
	}
	src := ""
	if f.DiskWriteSource != "" {
		src = " (" + f.DiskWriteSource + ")"
	}
	if f.DiskSeqWriteMBps > 0 {
		parts = append(parts, fmt.Sprintf("broker writes %.0f of the disk's %.0f MB/s%s (%.0f%%)", f.DiskWriteMBps, f.DiskSeqWriteMBps, src, 100*f.DiskWriteMBps/f.DiskSeqWriteMBps))
	} else {
		parts = append(parts, fmt.Sprintf("broker writes %.0f MB/s%s, the disk's bandwidth not probed", f.DiskWriteMBps, src))
	}
	if f.OpenLoop {
		parts = append(parts, fmt.Sprintf("achieved %.0f of %.0f/s offered, last send %s late", f.Achieved, f.Offered, fmtMs(ms(f.FinalLag))))
		if f.Backpressure > 0 {
			parts = append(parts, fmt.Sprintf("%s waiting for the broker's in-flight bound", fmtMs(ms(f.Backpressure))))
		}
	}
	return strings.Join(parts, ", ")
}

// boundOf labels a finished round from its own figures; diskMBps is the
// disk's sequential write bandwidth (0: unknown).
func boundOf(r *RoundResult, generatorLimit float64, machineCores int, diskMBps float64) {
	f := BoundFigures{
		MachineCores: machineCores,
		MachineBusy:  r.MachineBusy, MachineBusyOK: r.MachineBusyOK,
		GeneratorCores: r.GeneratorCPU.Cores(), GeneratorLimit: generatorLimit, GeneratorKnown: r.GeneratorCPU.OK,
		BrokerCores: r.BrokerCPU.Cores(), BrokerKnown: r.BrokerCPU.OK,
		DiskSeqWriteMBps: diskMBps,
		OpenLoop:         r.Mode == "open-loop",
		Offered:          r.Offered, Achieved: r.Throughput, FinalLag: r.FinalLag, Backpressure: r.Backpressure,
		Window: time.Duration(r.ElapsedSec * float64(time.Second)),
	}
	switch {
	case r.BrokerWrite.OK && r.BrokerWrite.Wall > 0:
		f.DiskWriteMBps = float64(r.BrokerWrite.Bytes) / r.BrokerWrite.Wall.Seconds() / 1e6
		f.DiskWriteSource = "/proc/PID/io write_bytes"
	case r.Mode != "consume":
		f.DiskWriteMBps = r.MBps
		f.DiskWriteSource = "payload acknowledged"
	}
	r.BoundFigures, r.Bound = f, Bound(f)
}

// summarizeBound is a system's label over its rounds: the most frequent
// (ties: the one first in precedence), with the count when rounds differ
// ("machine-bound (2 of 3 rounds; 1 generator-bound)").
func summarizeBound(rounds []RoundResult) (label, detail string) {
	order := []string{BoundOfferedRate, BoundMachine, BoundGenerator, BoundDisk, BoundBroker, BoundUndetermined}
	count := map[string]int{}
	for _, r := range rounds {
		count[r.Bound]++
	}
	for _, l := range order {
		if count[l] > count[label] {
			label = l
		}
	}
	if count[label] == len(rounds) {
		return label, label
	}
	var others []string
	for _, l := range order {
		if l != label && count[l] > 0 {
			others = append(others, fmt.Sprintf("%d %s", count[l], l))
		}
	}
	slices.Sort(others)
	return label, fmt.Sprintf("%s (%d of %d rounds; %s)", label, count[label], len(rounds), strings.Join(others, ", "))
}
