package main

// sushka bench: honest load and storage probes (MEASURING.md). The
// subcommands bind flags to package bench; the generator is this process,
// the broker another one.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/internal/server"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a Kafka-protocol broker and its disk, honestly (open loop, rounds, passport)",
		Long: `Load and storage probes that print their own passport (host, runtime profiles of
the generator and of the broker, storage and device of the data directory,
durability mode, load average) and refuse to measure the wrong thing.

Load is open loop (--rate: latency counts from the moment each record was due)
unless --max, which is a closed loop labelled as such. Every figure is
best (median) [worst] over --rounds interleaved rounds after a discarded
calibration round; with --vs the rounds alternate A B A B A B, and a gap below
the spread is printed as "indistinguishable". Raw counts are printed.

The broker's half of the passport comes from its admin endpoint
(--broker-admin, /v1/runtime); its CPU time from /proc/PID/stat (--broker-pid,
or the process found listening on the broker's port).`,
	}
	cmd.AddCommand(newBenchProduceCmd(), newBenchConsumeCmd(), newBenchE2ECmd(), newBenchMatrixCmd(),
		newBenchSweepCmd(), newBenchDiskCmd(), newBenchStreamCmd())
	return cmd
}

// benchFlags are shared by the load subcommands.
type benchFlags struct {
	client      clientFlags
	name, admin string
	pid         string
	vs, vsName  string
	vsAdmin     string
	vsPID       string
	vsExec      string
	rounds      int
	jsonPath    string
	dataDir     string
	allowTmpfs  bool
	diskProbe   int64
	topicPrefix string
	noCalibrate bool
	keepTopics  bool
	w           bench.Workload
	kind        string
	// idempotentSet: --idempotent was given (not its default).
	idempotentSet bool
}

func (f *benchFlags) register(fs *pflag.FlagSet, kind string) {
	f.kind = kind
	f.client.register(fs)
	fs.StringVar(&f.name, "name", "sushka", "name of the system at --brokers in the report")
	fs.StringVar(&f.admin, "broker-admin", "127.0.0.1:9644", `the broker's admin HTTP address (/v1/runtime: runtime profile, storage); "" for none`)
	fs.StringVar(&f.pid, "broker-pid", "", "the broker's process id, for its CPU time (default: the process listening on the broker's port)")
	fs.StringVar(&f.vs, "vs", "", "a second Kafka-protocol broker host:port: the same workload, rounds interleaved A B A B A B")
	fs.StringVar(&f.vsName, "vs-name", "peer", "name of the --vs system in the report")
	fs.StringVar(&f.vsAdmin, "vs-admin", "", "admin HTTP address of the --vs broker (/v1/runtime)")
	fs.StringVar(&f.vsPID, "vs-pid", "", "process id of the --vs broker")
	fs.StringVar(&f.vsExec, "vs-exec", "", "a command run through sh for each round of the second system instead of the Kafka generator "+
		"(a peer that does not speak Kafka): it gets the workload as SUSHKA_BENCH_* variables and prints a JSON round result as its last line")
	fs.IntVar(&f.rounds, "rounds", 3, "measured rounds per system (at least 3 for a figure worth recording)")
	fs.StringVar(&f.jsonPath, "json", "", "also write the results document (schema "+strconv.Itoa(bench.SchemaVersion)+") to FILE")
	fs.StringVar(&f.dataDir, "data-dir", "", "a directory on the broker's storage to probe for the disk's limits "+
		"(default: the parent of the broker's data directory, when it is on this host)")
	fs.BoolVar(&f.allowTmpfs, "allow-tmpfs", false, "measure storage on a filesystem in memory anyway (labelled loudly)")
	fs.Int64Var(&f.diskProbe, "disk-probe-bytes", 64<<20, "size of the quick disk probe printed in the header (0: none)")
	fs.StringVar(&f.topicPrefix, "topic-prefix", "sushka-bench", "each round writes to a fresh topic <prefix>-<kind>-<unix-nanos>")
	fs.BoolVar(&f.noCalibrate, "no-calibration", false, "skip the discarded calibration round (smoke runs only)")
	fs.BoolVar(&f.keepTopics, "keep-topics", false, "keep each round's topic instead of deleting it after the round (they add up to gigabytes)")
	w := &f.w
	fs.IntVar(&w.RecordSize, "record-size", 1024, "record value size in bytes (unique JSON with random filler)")
	fs.BoolVar(&w.Keys, "keys", false, "give records keys (1024 distinct)")
	fs.StringVarP(&w.Codec, "compression", "z", "none", "batch codec: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&w.Acks, "acks", "all", "required acks: all, 1 or 0")
	fs.DurationVar(&w.Linger, "linger", 0, "producer linger")
	fs.Int32Var(&w.Partitions, "partitions", 1, "partitions of each fresh topic")
	fs.IntVar(&w.Clients, "clients", 1, "producer clients (connections), the rate split between them")
	fs.DurationVar(&w.Duration, "duration", 10*time.Second, "length of one round")
	fs.DurationVar(&w.Drain, "drain", 30*time.Second, "how long to wait for outstanding answers after a round")
	switch kind {
	case "produce", "e2e", "sweep":
		fs.Float64Var(&w.Rate, "rate", 10000, "offered records per second (open loop)")
		fs.IntVar(&w.Window, "window", 10000, "outstanding records per client in the closed loop (--max, sweep calibration)")
	}
	if kind == "produce" {
		fs.BoolVar(&w.Max, "max", false, "closed loop as fast as the broker answers (saturation; labelled closed-loop)")
	}
	switch kind {
	case "produce", "sweep", "consume":
		fs.StringVar(&w.Engine, "engine", bench.EngineFranzGo, "load generator: franz-go (a real client), or raw (pre-encoded batches on pipelined "+
			"connections: a generator that costs almost nothing, to measure the broker alone)")
		fs.IntVar(&w.Raw.Connections, "connections", 1, "--engine raw: connections to the partitions' leaders")
	}
	if kind != "consume" {
		fs.IntVar(&w.Raw.InFlight, "in-flight", server.DefaultMaxInFlight, "--engine raw: unanswered Produce requests per connection (the broker's bound)")
		fs.IntVar(&w.Raw.BatchRecords, "batch-records", 0, "--engine raw: records per partition batch (0: 256 KiB of records)")
		fs.BoolVar(&w.Raw.Idempotent, "idempotent", true, "--engine raw: InitProducerId, then sequences and epoch per partition, as franz-go's engine (acks=all only)")
	}
}

func (f *benchFlags) validate() error {
	w := f.w
	switch {
	case w.RecordSize < 8:
		return fmt.Errorf("--record-size must be at least 8")
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be at least 1")
	case w.Duration <= 0:
		return fmt.Errorf("--duration must be positive")
	case (f.kind == "produce" || f.kind == "e2e") && !w.Max && w.Rate <= 0:
		return fmt.Errorf("--rate must be positive")
	case w.Partitions < 1 || w.Clients < 1:
		return fmt.Errorf("--partitions and --clients must be at least 1")
	case (f.kind == "produce" || f.kind == "sweep") && w.Window < 1:
		return fmt.Errorf("--window must be at least 1")
	}
	if f.vs != "" && f.vsExec != "" {
		return fmt.Errorf("--vs and --vs-exec name the second system two ways; give one")
	}
	if _, err := bench.Codec(w.Codec); err != nil {
		return err
	}
	switch w.Engine {
	case "", bench.EngineFranzGo:
	case bench.EngineRaw:
		if w.Codec != "none" {
			return fmt.Errorf("--engine raw sends uncompressed batches; --compression %s needs --engine franz-go", w.Codec)
		}
		if w.Raw.Connections < 1 || (f.kind != "consume" && (w.Raw.InFlight < 1 || w.Raw.BatchRecords < 0)) {
			return fmt.Errorf("--connections and --in-flight must be at least 1, --batch-records at least 0")
		}
		if level, err := bench.AcksLevel(w.Acks); err != nil {
			return err
		} else if level != -1 && w.Raw.Idempotent {
			if f.idempotentSet {
				return fmt.Errorf("--idempotent needs --acks all (Kafka refuses idempotent producers otherwise)")
			}
			f.w.Raw.Idempotent = false // as the franz-go engine, which drops idempotence below acks=all
		}
	default:
		return fmt.Errorf("unknown --engine %q (franz-go, raw)", w.Engine)
	}
	return nil
}

// session is one bench invocation: document, systems, progress.
type session struct {
	f        *benchFlags
	doc      *bench.Document
	out      io.Writer
	errw     io.Writer
	systems  []bench.System
	progress *bench.Progress
}

func (f *benchFlags) start(ctx context.Context, cmd *cobra.Command, kind string, steps int) (*session, error) {
	f.idempotentSet = cmd.Flags().Changed("idempotent")
	if err := f.validate(); err != nil {
		return nil, err
	}
	s := &session{f: f, out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr()}
	s.doc = bench.NewDocument(version, bench.Commandline(os.Args))
	s.systems = []bench.System{{Name: f.name, Brokers: f.client.brokers, Admin: f.admin, PID: f.pid}}
	if f.vs != "" {
		s.systems = append(s.systems, bench.System{Name: f.vsName, Brokers: f.vs, Admin: f.vsAdmin, PID: f.vsPID})
	}
	if f.vsExec != "" {
		s.systems = append(s.systems, bench.System{Name: f.vsName, Brokers: "(" + f.vsName + ")", Admin: f.vsAdmin, PID: f.vsPID, Exec: f.vsExec})
	}
	for i := range s.systems {
		s.systems[i].Resolve(ctx)
	}
	env := bench.Environment{Host: bench.ReadHost(), Generator: bench.SelfProfile(), Systems: s.systems,
		LoadBefore: bench.LoadAvg(), Durability: f.w.Durability()}
	// Storage refusal: a broker whose data directory is in memory measures
	// memory, whatever acks say.
	for _, sys := range s.systems {
		if sys.Runtime != nil && strings.Contains(sys.Runtime.Storage, "volatile") && !f.allowTmpfs {
			return nil, fmt.Errorf("%s keeps its data on %s: %w", sys.Name, sys.Runtime.Storage, bench.ErrVolatile)
		}
	}
	dir := f.dataDir
	if dir == "" && len(s.systems) > 0 && s.systems[0].Runtime != nil && s.systems[0].Runtime.DataDir != "" {
		if parent := filepath.Dir(s.systems[0].Runtime.DataDir); isDir(parent) {
			dir = parent
		}
	}
	if dir != "" {
		env.DataDir = dir
		st, err := bench.CheckStorage(dir, f.allowTmpfs)
		env.DataDirStorage = st
		if err != nil {
			return nil, err
		}
	}
	s.doc.Environment = env
	if dir != "" && f.diskProbe > 0 {
		d, err := bench.Disk(ctx, dir, f.diskProbe, 300, f.allowTmpfs)
		if err != nil {
			return nil, fmt.Errorf("disk probe of %s: %w", dir, err)
		}
		s.doc.Disk = d
	}
	bench.PrintPassport(s.out, s.doc)
	for _, sys := range s.systems {
		if sys.PID == "" {
			s.doc.Warn(s.out, "no process id for %s: its CPU per GB is not measured", sys.Name)
		}
	}
	if f.rounds < 3 {
		s.doc.Warn(s.out, "%d round(s): MEASURING.md asks for at least 3 before a figure is recorded", f.rounds)
	}
	perRound := len(s.systems) * (f.rounds + 1)
	if f.noCalibrate {
		perRound = len(s.systems) * f.rounds
	}
	s.progress = bench.NewProgressW(s.errw, steps*perRound)
	return s, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func (s *session) runner() *bench.Runner {
	w := s.f.w
	env := map[string]string{
		"RECORD_SIZE": strconv.Itoa(w.RecordSize), "CODEC": w.Codec, "ACKS": w.Acks, "LINGER": w.Linger.String(),
		"PARTITIONS": strconv.Itoa(int(w.Partitions)), "CLIENTS": strconv.Itoa(w.Clients),
		"RATE": strconv.FormatFloat(w.Rate, 'f', -1, 64), "MAX": strconv.FormatBool(w.Max), "WINDOW": strconv.Itoa(w.Window),
		"DURATION": w.Duration.String(), "DRAIN": w.Drain.String(), "ENGINE": w.Engine,
	}
	r := &bench.Runner{Systems: s.systems, Rounds: s.f.rounds, Progress: s.progress, Env: env, NoCalibration: s.f.noCalibrate}
	if s.doc.Disk != nil {
		r.DiskSeqWriteMBps = s.doc.Disk.SeqWriteMBps
	}
	return r
}

func (s *session) topic(kind string) string {
	return fmt.Sprintf("%s-%s-%d", s.f.topicPrefix, kind, time.Now().UnixNano())
}

// dropTopic deletes a round's topic once the round is measured, unless
// --keep-topics: a saturation round writes gigabytes, and a session of them
// fills the broker's disk otherwise.
func (s *session) dropTopic(ctx context.Context, sys bench.System, topic string) {
	if s.f.keepTopics || topic == "" {
		return
	}
	if err := bench.DeleteTopic(ctx, sys.Brokers, topic); err != nil {
		fmt.Fprintf(s.errw, "# warning: %v (the data stays on %s's disk)\n", err, sys.Name)
	}
}

func (s *session) scenario(sc *bench.Scenario) {
	s.doc.Scenarios = append(s.doc.Scenarios, sc)
	bench.PrintScenario(s.out, sc)
}

func (s *session) finish() error {
	s.doc.Environment.LoadAfter = bench.LoadAvg()
	fmt.Fprintf(s.out, "\n# loadavg before %s, after %s (%d cores)\n", s.doc.Environment.LoadBefore, s.doc.Environment.LoadAfter, runtime.NumCPU())
	if s.f.jsonPath != "" {
		if err := s.doc.Write(s.f.jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(s.out, "# results document: %s\n", s.f.jsonPath)
	}
	return nil
}

func newBenchProduceCmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Produce at a fixed rate (open loop) or as fast as possible (--max, closed loop)",
		Example: "  sushka bench produce --rate 20000 --record-size 1024 --duration 10s\n" +
			"  sushka bench produce --max --vs 127.0.0.1:9093 --vs-name kfake --json out.json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := f.start(ctx, cmd, "produce", 1)
			if err != nil {
				return err
			}
			w := f.w
			sc := &bench.Scenario{Name: w.Label("produce"), Kind: "produce", Primary: "p99_ms", Unit: "ms", Workload: w}
			if w.Max {
				sc.Primary, sc.Unit = "records_per_s", "records/s"
				sc.Notes = append(sc.Notes, "closed-loop: saturation throughput; latency counts from the send and hides queues")
			} else {
				sc.Notes = append(sc.Notes, "open-loop: latency counts from the moment each record was due")
			}
			before := s.scrapeFsync(ctx, !w.Max)
			err = s.runner().Run(ctx, sc, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
				return produceRound(ctx, s, sys, w)
			})
			if err != nil {
				return err
			}
			s.scenario(sc)
			s.item4(ctx, sc, before)
			return s.finish()
		},
	}
	f.register(cmd.Flags(), "produce")
	return cmd
}

func newBenchConsumeCmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Fill a topic, then read it from the start with a fresh client per round",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := f.start(ctx, cmd, "consume", 1)
			if err != nil {
				return err
			}
			w := f.w
			if w.Records <= 0 {
				return fmt.Errorf("--records must be positive")
			}
			topics := map[string]string{}
			for _, sys := range s.systems {
				if sys.Exec != "" {
					continue
				}
				t := s.topic("consume")
				if err := bench.CreateTopic(ctx, sys.Brokers, t, w.Partitions); err != nil {
					return err
				}
				fmt.Fprintf(s.errw, "# filling %s on %s with %d records of %d B\n", t, sys.Name, w.Records, w.RecordSize)
				if err := bench.Fill(ctx, sys.Brokers, t, w, w.Records); err != nil {
					return fmt.Errorf("filling %s on %s: %w", t, sys.Name, err)
				}
				topics[sys.Name] = t
				defer s.dropTopic(ctx, sys, t)
			}
			sc := &bench.Scenario{Name: w.Label("consume"), Kind: "consume", Primary: "records_per_s", Unit: "records/s", Workload: w,
				Notes: []string{"each round reads the whole topic from the start with a fresh client (no group); the window opens at the first record; the data was written just before, so it is likely in the page cache"}}
			err = s.runner().Run(ctx, sc, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
				var c bench.ConsumeResult
				var err error
				if w.Engine == bench.EngineRaw {
					c, err = bench.RawConsume(ctx, sys.Brokers, topics[sys.Name], w.Records, w.RecordSize, w.Drain+w.Duration*10, w.Raw)
				} else {
					c, err = bench.Consume(ctx, sys.Brokers, topics[sys.Name], w.Records, w.Drain+w.Duration*10)
				}
				r := bench.RoundResult{Mode: "consume", Issued: w.Records, Acked: c.Records, Bytes: c.Bytes, ElapsedSec: c.Elapsed.Seconds()}
				if c.Elapsed > 0 {
					r.Throughput = float64(c.Records) / c.Elapsed.Seconds()
					r.MBps = float64(c.Bytes) / c.Elapsed.Seconds() / 1e6
				}
				return r, err
			})
			if err != nil {
				return err
			}
			s.scenario(sc)
			return s.finish()
		},
	}
	f.register(cmd.Flags(), "consume")
	cmd.Flags().Int64Var(&f.w.Records, "records", 200000, "records written once and read back in every round")
	return cmd
}

func newBenchE2ECmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Produce at a fixed rate and measure due time → arrival at a consumer subscribed first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := f.start(ctx, cmd, "e2e", 1)
			if err != nil {
				return err
			}
			w := f.w
			sc := &bench.Scenario{Name: w.Label("e2e"), Kind: "e2e", Primary: "p99_ms", Unit: "ms", Workload: w,
				Notes: []string{"open-loop; latency from the moment a record was due to its arrival at the consumer (one process, one clock)",
					bench.E2EClients(w)}}
			err = s.runner().Run(ctx, sc, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
				topic := s.topic("e2e")
				if err := bench.CreateTopic(ctx, sys.Brokers, topic, w.Partitions); err != nil {
					return bench.RoundResult{}, err
				}
				e, err := bench.E2E(ctx, sys.Brokers, topic, w)
				var r bench.RoundResult
				r.Cleanup = func() { s.dropTopic(ctx, sys, topic) }
				r.FromLoad(e.Produce, e.Produce.Acked*int64(w.RecordSize))
				r.Mode = "e2e"
				if e.Latency != nil {
					r.Latency = e.Latency.Summary()
				}
				if e.Received < e.Produce.Acked {
					r.Note = fmt.Sprintf("received %d of %d acknowledged records", e.Received, e.Produce.Acked)
				}
				return r, err
			})
			if err != nil {
				return err
			}
			s.scenario(sc)
			return s.finish()
		},
	}
	f.register(cmd.Flags(), "e2e")
	cmd.Flags().Lookup("rate").DefValue = "1000"
	_ = cmd.Flags().Set("rate", "1000")
	return cmd
}

func newBenchMatrixCmd() *cobra.Command {
	f := &benchFlags{}
	var records int64
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "The producer-batching lesson's linger × codec table, with the DISK column",
		Long: `For linger 0/5/50 ms × codec none/lz4/zstd: --records unique JSON records queued at
once with asynchronous Produce, then Flush (as in the lesson), into a fresh topic
per cell and round. Latency is from Produce to the callback: it measures the
client's buffer, not one round trip (closed-loop by construction). DISK is what
the topic gained in the partition logs, from DescribeAllLogDirs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := f.start(ctx, cmd, "matrix", len(bench.MatrixLingers)*len(bench.MatrixCodecs))
			if err != nil {
				return err
			}
			type row struct {
				label string
				sc    *bench.Scenario
			}
			var rows []row
			for _, l := range bench.MatrixLingers {
				for _, c := range bench.MatrixCodecs {
					w := f.w
					w.Linger, w.Codec, w.Records, w.Max = l, c, records, true
					label := fmt.Sprintf("linger=%-4s compression=%s", strconv.FormatInt(l.Milliseconds(), 10)+"ms", c)
					sc := &bench.Scenario{Name: "matrix " + label, Kind: "matrix", Primary: "records_per_s", Unit: "records/s", Workload: w}
					suffix := fmt.Sprintf("l%dms-%s", l.Milliseconds(), c)
					err := s.runner().Run(ctx, sc, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
						topic := s.topic("matrix-" + suffix)
						r, err := bench.MatrixCell(ctx, sys.Brokers, topic, w, records)
						r.Cleanup = func() { s.dropTopic(ctx, sys, topic) }
						return r, err
					})
					if err != nil {
						return err
					}
					s.doc.Scenarios = append(s.doc.Scenarios, sc)
					rows = append(rows, row{label, sc})
				}
			}
			fmt.Fprintf(s.out, "\n## matrix: %d records of ~%d B per cell, partitions=%d, acks=%s (median round; best in the JSON)\n",
				records, f.w.RecordSize, f.w.Partitions, f.w.Acks)
			fmt.Fprintf(s.out, "%-10s %-29s %8s %7s %9s %13s %9s %9s %9s %10s\n", "SYSTEM", "SCENARIO", "SENT", "FAILED", "ELAPSED", "THROUGHPUT", "P50", "P99", "P99.9", "DISK")
			for _, r := range rows {
				for _, sr := range r.sc.Systems {
					m := medianRound(sr)
					fmt.Fprintf(s.out, "%-10s %-29s %8d %7d %9s %8.0f msg/s %9s %9s %9s %8.1fMB\n", sr.System, r.label, m.Acked, m.Errors+m.Unfinished,
						time.Duration(m.ElapsedSec*float64(time.Second)).Round(10*time.Microsecond), m.Throughput,
						msStr(m.Latency.P50), msStr(m.Latency.P99), msStr(m.Latency.P999), float64(m.DiskBytes)/1e6)
				}
			}
			for _, r := range rows {
				for _, v := range r.sc.Verdicts {
					fmt.Fprintf(s.out, "# %s: %s vs %s throughput %s\n", r.label, v.System, v.Against, v.Comparison)
				}
			}
			return s.finish()
		},
	}
	f.register(cmd.Flags(), "matrix")
	cmd.Flags().Int64Var(&records, "records", 100000, "records per cell and round")
	_ = cmd.Flags().Set("partitions", "3")
	cmd.Flags().Lookup("partitions").DefValue = "3"
	return cmd
}

func medianRound(sr *bench.SystemRounds) bench.RoundResult {
	for _, r := range sr.Raw {
		if r.Throughput == sr.Throughput.Median {
			return r
		}
	}
	return sr.Raw[0]
}

func msStr(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.2fms", v)
}

func newBenchSweepCmd() *cobra.Command {
	f := &benchFlags{}
	var steps []float64
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "A rate ladder (fractions of the closed-loop saturation) that finds the knee",
		Long: `Calibrates each system's saturation with a closed loop (--max for --duration),
then offers each fraction of it in an open loop, rounds interleaved across systems.
The knee is the highest rung before the first that achieves less than 95% of its
offered rate or whose p99 exceeds 10× the lowest rung's (and 10 ms). The p99 at
50% of saturation is printed beside the disk's fdatasync p99, of a 4 KiB append and
(with --broker-admin) of the broker's flush size (issue 12 item 4).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := f.start(ctx, cmd, "sweep", len(steps)+1)
			if err != nil {
				return err
			}
			// Calibration: closed loop per system.
			cw := f.w
			cw.Max = true
			cal := &bench.Scenario{Name: cw.Label("sweep-calibration"), Kind: "sweep-calibration", Primary: "records_per_s", Unit: "records/s", Workload: cw,
				Notes: []string{"closed-loop: the saturation each rung is a fraction of (median round)"}}
			r := s.runner()
			r.Env["MAX"] = "true"
			err = r.Run(ctx, cal, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
				return produceRound(ctx, s, sys, cw)
			})
			if err != nil {
				return err
			}
			s.scenario(cal)
			sat := map[string]float64{}
			for _, sr := range cal.Systems {
				sat[sr.System] = sr.Throughput.Median
			}
			ladder := map[string][]bench.SweepStep{}
			for _, frac := range steps {
				w := f.w
				w.Max = false
				name := strings.Replace(w.Label("produce"), fmt.Sprintf("open-loop %.0f/s", w.Rate), fmt.Sprintf("open-loop at %.0f%% of each system's saturation", 100*frac), 1)
				sc := &bench.Scenario{Name: "sweep " + name, Kind: "sweep", Primary: "p99_ms", Unit: "ms", Workload: w}
				rr := s.runner()
				var fsyncBefore map[string]bench.FsyncHistogram
				if frac == 0.5 { // item 4's rung
					fsyncBefore = s.scrapeFsync(ctx, true)
				}
				err := rr.Run(ctx, sc, func(ctx context.Context, sys bench.System, _ int) (bench.RoundResult, error) {
					ww := w
					ww.Rate = frac * sat[sys.Name]
					return produceRound(ctx, s, sys, ww)
				})
				if err != nil {
					return err
				}
				s.scenario(sc)
				s.item4(ctx, sc, fsyncBefore)
				for _, sr := range sc.Systems {
					med := sr.Raw[0]
					for _, x := range sr.Raw {
						if x.Latency.P99 == sr.P99.Median {
							med = x
						}
					}
					ladder[sr.System] = append(ladder[sr.System], bench.SweepStep{Fraction: frac, Offered: med.Offered, Achieved: med.Throughput,
						P50: sr.P50.Median, P99: sr.P99.Median})
				}
			}
			fmt.Fprintf(s.out, "\n## knee (median rounds)\n")
			var knees []bench.Knee
			for _, sys := range s.systems {
				k := bench.FindKnee(sys.Name, sat[sys.Name], ladder[sys.Name])
				knees = append(knees, k)
				fmt.Fprint(s.out, k)
			}
			if d := s.doc.Disk; d != nil {
				fmt.Fprintf(s.out, "# disk fdatasync (4 KiB append) p99 %s on %s\n", msStr(d.FdatasyncP99Ms), d.Storage)
				for _, k := range knees {
					if d.FdatasyncP99Ms > 0 && k.P99AtHalf > 0 {
						fmt.Fprintf(s.out, "#   %s: p99 at 50%% of saturation is %.1f× the disk's fdatasync p99\n", k.System, k.P99AtHalf/d.FdatasyncP99Ms)
					}
				}
			}
			s.extra("knees", knees)
			return s.finish()
		},
	}
	f.register(cmd.Flags(), "sweep")
	cmd.Flags().Float64SliceVar(&steps, "steps", bench.SweepFractions, "rungs of the ladder as fractions of saturation")
	return cmd
}

// scrapeFsync reads each system's fdatasync histogram (its admin
// /metrics) before an open-loop produce scenario, for item 4's comparison;
// nil when there is nothing to compare with (closed loop, no disk probe).
func (s *session) scrapeFsync(ctx context.Context, openLoop bool) map[string]bench.FsyncHistogram {
	if !openLoop || s.doc.Disk == nil {
		return nil
	}
	hs := map[string]bench.FsyncHistogram{}
	for _, sys := range s.systems {
		if sys.Admin == "" {
			continue
		}
		if h, err := bench.ScrapeFsync(ctx, sys.Admin); err == nil {
			hs[sys.Name] = h
		}
	}
	return hs
}

// item4 prints and records issue 12 item 4's ratio (bench/item4.go) for
// the systems scraped before the scenario: the median round's p99 against
// the disk's fdatasync p99 at the broker's flush size, and at 4 KiB.
func (s *session) item4(ctx context.Context, sc *bench.Scenario, before map[string]bench.FsyncHistogram) {
	if len(before) == 0 {
		return
	}
	var items []bench.Item4
	for _, sr := range sc.Systems {
		sys := s.system(sr.System)
		b, ok := before[sr.System]
		if !ok || sys == nil {
			continue
		}
		after, err := bench.ScrapeFsync(ctx, sys.Admin)
		if err != nil {
			fmt.Fprintf(s.errw, "# warning: %s's fdatasync histogram: %v\n", sr.System, err)
			continue
		}
		fsync := after.Since(b)
		if fsync.Count <= 0 {
			continue // not Sushka, or no acks=all append
		}
		partitionRate := sr.MBps.Median * 1e6 / float64(max(sc.Workload.Partitions, 1))
		items = append(items, bench.NewItem4(sr.System, sr.P99.Median, partitionRate, fsync, s.doc.Disk))
	}
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(s.out, "\n## item 4: p99 against the disk's fdatasync p99 (the probe of the flush size the broker's histogram shows)\n")
	for _, it := range items {
		fmt.Fprint(s.out, it)
	}
	s.extra("item4", items)
}

// extra records value under key in the document's extra figures.
func (s *session) extra(key string, value any) {
	m, ok := s.doc.Extra.(map[string]any)
	if !ok {
		m = map[string]any{}
		s.doc.Extra = m
	}
	m[key] = value
}

// system is the system named name.
func (s *session) system(name string) *bench.System {
	for i := range s.systems {
		if s.systems[i].Name == name {
			return &s.systems[i]
		}
	}
	return nil
}

func produceRound(ctx context.Context, s *session, sys bench.System, w bench.Workload) (bench.RoundResult, error) {
	topic := s.topic("produce")
	if err := bench.CreateTopic(ctx, sys.Brokers, topic, w.Partitions); err != nil {
		return bench.RoundResult{}, err
	}
	var p bench.ProduceResult
	var err error
	if w.Engine == bench.EngineRaw {
		p, err = bench.RawProduce(ctx, sys.Brokers, topic, w, w.Raw)
	} else {
		p, err = bench.Produce(ctx, sys.Brokers, topic, w)
	}
	var r bench.RoundResult
	r.FromLoad(p.Load, p.Bytes)
	r.Cleanup = func() { s.dropTopic(ctx, sys, topic) }
	return r, err
}

func newBenchDiskCmd() *cobra.Command {
	var (
		dir        string
		writeBytes int64
		syncs      int
		allowTmpfs bool
		jsonPath   string
	)
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "The physical limits of a directory's disk: sequential write, fdatasync latency, sequential read",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if dir == "" {
				return fmt.Errorf("--data-dir is required: a directory on the disk to measure")
			}
			doc := bench.NewDocument(version, bench.Commandline(os.Args))
			doc.Environment = bench.Environment{Host: bench.ReadHost(), Generator: bench.SelfProfile(), LoadBefore: bench.LoadAvg(),
				DataDir: dir, Durability: "fdatasync after each 4 KiB append; one fdatasync after the sequential write"}
			st, err := bench.CheckStorage(dir, allowTmpfs)
			doc.Environment.DataDirStorage = st
			if err != nil {
				return err
			}
			d, err := bench.Disk(cmd.Context(), dir, writeBytes, syncs, allowTmpfs)
			if err != nil {
				return err
			}
			doc.Disk = d
			doc.Environment.LoadAfter = bench.LoadAvg()
			bench.PrintPassport(out, doc)
			fmt.Fprintln(out, d.Raw)
			fmt.Fprintf(out, "# seq write %.0f MB/s, seq read %.0f MB/s (page cache dropped: %v), fdatasync p50 %s p90 %s p99 %s max %s over %d appends\n",
				d.SeqWriteMBps, d.SeqReadMBps, d.ReadCacheDropped, msStr(d.FdatasyncP50Ms), msStr(d.FdatasyncP90Ms), msStr(d.FdatasyncP99Ms), msStr(d.FdatasyncMaxMs), d.FdatasyncCount)
			fmt.Fprintf(out, "# loadavg before %s, after %s\n", doc.Environment.LoadBefore, doc.Environment.LoadAfter)
			if jsonPath != "" {
				return doc.Write(jsonPath)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "data-dir", "", "a directory on the disk to measure (the broker's data directory or its parent)")
	fs.Int64Var(&writeBytes, "write-bytes", 1<<30, "size of the sequential write and read")
	fs.IntVar(&syncs, "sync-iterations", 2000, "4 KiB append + fdatasync pairs (bounded to 5 s)")
	fs.BoolVar(&allowTmpfs, "allow-tmpfs", false, "measure a filesystem in memory anyway (labelled loudly)")
	fs.StringVar(&jsonPath, "json", "", "also write the results document to FILE")
	return cmd
}
