package streambench

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"github.com/sushka-io/sushka/bench"
)

// Config is one measurement: every scenario on every target.
type Config struct {
	Scenarios []Scenario
	// Duration is the least length of a measured run's window: the
	// backlog is sized from the calibration so that the fastest loop
	// takes at least this long to consume it (BacklogMargin); a publish
	// scenario publishes for this long.
	Duration time.Duration
	// Rounds is the number of measured rounds of each loop.
	Rounds int
	// CalibrationMessages is the backlog of the discarded calibration
	// round, whose rates size the measured rounds' backlog.
	CalibrationMessages int
	Partitions          int32
	// Publishers is the publish scenario's concurrency.
	Publishers int
	// TopicPrefix starts every run's topic name.
	TopicPrefix string
	// Progress gets a line per run.
	Progress io.Writer
	// CPUProfileDir, when set, gets a CPU profile of every measured
	// consumer run: <scenario>-<loop>-<round>.pprof.
	CPUProfileDir string
}

// BacklogMargin scales the calibration's fastest rate × Duration into the
// measured rounds' backlog: a calibration round is short and starts cold,
// so it underestimates the rate.
const BacklogMargin = 1.5

// DefaultConfig is the method's defaults: windows of at least 5 s, three
// interleaved rounds. The publish scenario's publishes are synchronous
// (each returns with the broker's acknowledgement, after its fsync), so
// 1024 publishers keep the broker busy.
func DefaultConfig() Config {
	return Config{Scenarios: Scenarios(), Duration: 5 * time.Second, Rounds: 3, CalibrationMessages: 50000,
		Partitions: 4, Publishers: 1024, TopicPrefix: "sushka-bench-stream", Progress: io.Discard}
}

// Validate rejects a configuration that cannot give a figure.
func (c Config) Validate() error {
	switch {
	case len(c.Scenarios) == 0:
		return fmt.Errorf("no scenarios")
	case c.Duration <= 0:
		return fmt.Errorf("the duration must be positive")
	case c.Rounds < 1:
		return fmt.Errorf("at least one round")
	case c.CalibrationMessages < 1:
		return fmt.Errorf("the calibration round needs messages")
	case c.Partitions < 1:
		return fmt.Errorf("at least one partition")
	case c.Publishers < 1:
		return fmt.Errorf("at least one publisher")
	case c.Duration < time.Millisecond:
		return fmt.Errorf("a duration below 1ms cannot size a backlog")
	}
	for _, s := range c.Scenarios {
		if s.BatchMaxCount > MaxInFlight {
			return fmt.Errorf("%s: a batch of %d is above MaxInFlight %d", s.Name, s.BatchMaxCount, MaxInFlight)
		}
	}
	return nil
}

// RoundTripProbe says how broker_bound is decided, for the passport.
const RoundTripProbe = "the backlog is published before each round's consumer starts; each loop times its polling goroutine's blocking poll call (kgo PollRecords, Consumer.Poll) from the first " +
	"record to the last handled one; raw_poll_wait_percent is the raw loop's median round's share of its window spent there, " +
	"broker_bound when above 50%"

// Measure runs cfg on every target and returns one row per target and
// scenario. A failed run (a lost message, an error) fails the measurement:
// a figure with a hole in it is no figure.
func Measure(ctx context.Context, cfg Config, targets []Target) ([]*bench.StreamScenario, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rows []*bench.StreamScenario
	for _, t := range targets {
		for _, sc := range cfg.Scenarios {
			row, err := measureScenario(ctx, cfg, t, sc)
			if err != nil {
				return rows, fmt.Errorf("%s, %s: %w", t.Name(), sc.Name, err)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func measureScenario(ctx context.Context, cfg Config, t Target, sc Scenario) (*bench.StreamScenario, error) {
	payloads, err := NewPayloads(sc.ValueBytes)
	if err != nil {
		return nil, err
	}
	run := func(loop Loop, round string, messages int, duration time.Duration) (Result, error) {
		r := &Run{Scenario: sc, Messages: messages, Duration: duration, Payloads: payloads, Partitions: t.Partitions(cfg.Partitions),
			Publishers: cfg.Publishers, Name: fmt.Sprintf("%s-%s-%s-%s-%d", cfg.TopicPrefix, t.Name(), sc.Slug(), loop, time.Now().UnixNano())}
		// A stuck run fails instead of hanging.
		runCtx, cancel := context.WithTimeout(ctx, 20*cfg.Duration+2*time.Minute)
		defer cancel()
		if cfg.CPUProfileDir != "" && round != "calibration" {
			r.CPUProfile = filepath.Join(cfg.CPUProfileDir, fmt.Sprintf("%s-%s-%s-%s.pprof", t.Name(), sc.Slug(), loop, round))
		}
		res, err := t.RunLoop(runCtx, loop, r)
		if err != nil {
			return res, fmt.Errorf("%s round %s: %w", loop, round, err)
		}
		bound := ""
		if !sc.Publish && res.PublishBound() {
			bound = ", PUBLISH-BOUND"
		}
		fmt.Fprintf(cfg.Progress, "# %s, %s, round %s, %-9s %9.0f msg/s  (%d messages in %.2fs, poll wait %.0f%%, CPU %.2f µs/msg, broker %.2f µs/msg%s)\n",
			t.Name(), sc.Name, round, loop.String()+":", float64(res.Received)/res.Window.Seconds(), res.Received,
			res.Window.Seconds(), 100*res.PollWait.Seconds()/res.Window.Seconds(),
			bench.MicrosPerMessage(res.CPU, res.Received), bench.MicrosPerMessage(res.BrokerCPU, res.Received), bound)
		if !sc.Publish {
			fmt.Fprintf(cfg.Progress, "#   %s\n", res.Diagnostics.String(res.Received))
		}
		return res, nil
	}

	// The calibration round, R A F, discarded: connections, the group
	// protocol, the first allocations and the broker's first files are
	// start-up, not the message. Its fastest rate sizes the backlog.
	calibration := min(cfg.Duration, time.Second)
	fastest := 0.0
	for _, loop := range Loops {
		res, err := run(loop, "calibration", cfg.CalibrationMessages, calibration)
		if err != nil {
			return nil, err
		}
		fastest = max(fastest, float64(res.Received)/res.Window.Seconds())
	}
	backlog := max(cfg.CalibrationMessages, int(math.Ceil(fastest*cfg.Duration.Seconds()*BacklogMargin)))
	row := &bench.StreamScenario{Name: sc.Name, Target: t.Name(), Unit: "msg/s", Pairs: cfg.Rounds,
		Partitions: t.Partitions(cfg.Partitions), Publish: sc.Publish}
	if sc.Publish {
		row.Publishers = cfg.Publishers
	} else {
		row.Backlog = backlog
	}
	rounds := map[Loop][]bench.StreamRound{}
	short := 0
	for i := range cfg.Rounds {
		for _, loop := range Loops {
			res, err := run(loop, fmt.Sprint(i+1), backlog, cfg.Duration)
			if err != nil {
				return nil, err
			}
			if row.Messages == 0 || res.Received < row.Messages {
				row.Messages = res.Received
			}
			if res.Window < cfg.Duration {
				short++
			}
			rounds[loop] = append(rounds[loop], bench.StreamRound{Published: res.Published, Messages: res.Received, Window: res.Window,
				PollWait: res.PollWait, CPU: res.CPU, BrokerCPU: res.BrokerCPU, BrokerCPUOK: res.BrokerCPUOK,
				AfterPublish: res.AfterPublish, HasPublishStop: !sc.Publish, PublishBound: !sc.Publish && res.PublishBound()})
		}
	}
	row.Raw = bench.SummarizeLoop(rounds[Raw])
	row.Adapter = bench.SummarizeLoop(rounds[Adapter])
	row.Framework = bench.SummarizeLoop(rounds[Framework])
	row.Finish()
	if short > 0 {
		row.Notes = append(row.Notes, fmt.Sprintf("%d of %d rounds' windows were shorter than %v: the calibration underestimated the rate", short, 3*cfg.Rounds, cfg.Duration))
	}
	if row.PublishBoundRounds > 0 {
		row.Notes = append(row.Notes, fmt.Sprintf("%d rounds were publish-bound (the window ended within %v of the publishers' stop): no verdict", row.PublishBoundRounds, PublishBoundSlack))
	}
	return row, nil
}
