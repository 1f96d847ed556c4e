package main

// sushka bench stream: the handler framework (package stream) against the
// raw client, three loops per scenario (bench/streambench), and the
// framework's code cost from stream/internal/costbench's results.json.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sushka-io/sushka/bench"
	"github.com/sushka-io/sushka/bench/streambench"
	"github.com/sushka-io/sushka/stream/nats/natstest"
)

// codeResultsPath is where costbench writes its document, from the root of
// the repository.
const codeResultsPath = "stream/internal/costbench/results.json"

func newBenchStreamCmd() *cobra.Command {
	cfg := streambench.DefaultConfig()
	var (
		client      clientFlags
		name        string
		serveBinary string
		serveArgs   []string
		dataParent  string
		jsonPath    string
		codePath    string
		only        string
		keepTopics  bool
		targetNames []string
		natsURL     string
		childListen string
	)
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Measure the stream framework against the raw client: three interleaved loops per scenario",
		Long: `Runs each scenario three ways, identical but for what the messages pass through:
raw (franz-go's kgo directly), adapter (stream/kafka's own Consumer and Producer,
without the framework's runtime) and framework (stream.New + Consume/HandleBatch +
Run, as a user writes it). Same client options, commit after the handler, the
same payloads, a fresh topic and group per run.

Every round measures the consumer: the group's position is committed at the start
of the topic, one shared generator publishes a backlog (byte-identical for every
loop), and only then does the loop's consumer start; the window runs from the
first record received to the close that commits the last. A discarded calibration
round (R A F of --calibration-messages) sizes the backlog so that the fastest loop
needs at least --duration; then --rounds rounds interleaved R A F R A F R A F.
The publish scenario times each loop's own publisher (--publishers goroutines,
one message at a time each) for --duration and counts what the broker holds.

Each row prints best (median) msg/s per loop, the adapter's and the framework's
overhead against raw (or "indistinguishable" when the gap between medians is
below the larger best-to-worst spread), the share of the window the raw loop's
goroutine spent blocked in its poll (broker-bound above 50%), and the same
comparisons of the generator's CPU time per message. A round whose window ends
within 25ms of its publishers' stop is publish-bound, and its row gets no verdict.

--targets names the brokers: sushka ("sushka serve" started as a child process
from --serve-binary, default this executable, with a fresh data directory),
kafka (any Kafka-protocol broker at --brokers) and jetstream (NATS JetStream over
stream/nats: nats-server from test/natsserver as a child process, or --nats-url).
The code-cost rows come from stream/internal/costbench's results.json (--code).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			cfg.Progress = out
			if only != "" {
				var picked []streambench.Scenario
				for _, s := range streambench.Scenarios() {
					if strings.Contains(strings.ToLower(s.Name), strings.ToLower(only)) {
						picked = append(picked, s)
					}
				}
				if len(picked) == 0 {
					return fmt.Errorf("--scenario %q matches none of the scenarios", only)
				}
				cfg.Scenarios = picked
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			doc := bench.NewStreamDocument(version, bench.Commandline(os.Args))
			doc.Environment.RoundTrip = streambench.RoundTripProbe
			ctx := cmd.Context()

			if !cmd.Flags().Changed("targets") && cmd.Flags().Changed("brokers") {
				targetNames = []string{"kafka"}
			}
			var targets []streambench.Target
			defer func() {
				for _, t := range targets {
					t.Close()
				}
			}()
			var described []string
			for _, tn := range targetNames {
				var target streambench.Target
				switch tn {
				case "kafka":
					k, err := streambench.NewKafka(name, client.seeds(), fmt.Sprintf("%s: a Kafka-protocol broker at %s, not started by this command (its durability is its own)", name, client.brokers), keepTopics)
					if err != nil {
						return err
					}
					target = k
				case "sushka":
					bin := serveBinary
					if bin == "" {
						self, err := os.Executable()
						if err != nil {
							return err
						}
						bin = self
					}
					dir, err := streambench.TempDataDir(dataParent)
					if err != nil {
						return err
					}
					defer os.RemoveAll(dir)
					child, err := streambench.StartChild(bin, dir, childListen, serveArgs...)
					if err != nil {
						return err
					}
					defer child.Stop()
					k, err := streambench.NewKafka("sushka", []string{child.Addr}, "sushka: "+child.Describe(ctx), keepTopics)
					if err != nil {
						return err
					}
					target = k
				case "jetstream":
					url, describe := natsURL, "jetstream: the NATS server at "+natsURL+", not started by this command (its storage and sync are its own)"
					if url == "" {
						dir, err := streambench.TempDataDir(dataParent)
						if err != nil {
							return err
						}
						defer os.RemoveAll(dir)
						srv, err := natstest.Launch(natstest.Config{StoreDir: dir})
						if err != nil {
							return err
						}
						defer srv.Close()
						url = srv.URL
						describe = fmt.Sprintf("jetstream: nats-server (test/natsserver, github.com/nats-io/nats-server/v2 as its go.mod pins it) "+
							"as a child process on %s, JetStream file storage in %s (%s), nats-server's default sync: a publish is acknowledged "+
							"once stored, fsync every 2 minutes (not per message, unlike sushka's acks=all)", url, dir, bench.DescribeStorage(dir))
					}
					j, err := streambench.NewJetStream(url, describe)
					if err != nil {
						return err
					}
					target = j
				default:
					return fmt.Errorf("--targets: unknown target %q (sushka, kafka, jetstream)", tn)
				}
				targets = append(targets, target)
				described = append(described, target.Describe())
			}
			var clients []string
			for _, t := range targets {
				if c := t.Client(); !slices.Contains(clients, c) {
					clients = append(clients, c)
				}
			}
			doc.Environment.Broker = strings.Join(described, " | ")
			doc.Environment.Client = strings.Join(clients, ", ")

			if codePath == "" {
				codePath = findUp(codeResultsPath)
			}
			if rows, err := bench.ReadCodeRows(codePath); err != nil {
				doc.Warn(out, "no code rows: %v", err)
			} else {
				doc.Code = rows
			}
			bench.PrintStreamPassport(out, doc)

			rows, err := streambench.Measure(ctx, cfg, targets)
			doc.Scenarios = rows
			doc.Environment.LoadAfter = bench.LoadAvg()
			if len(rows) > 0 {
				fmt.Fprintln(out)
				bench.PrintStreamTable(out, doc)
				for _, r := range rows {
					for _, n := range r.Notes {
						fmt.Fprintf(out, "# %s, %s: %s\n", r.Target, r.Name, n)
					}
				}
			}
			fmt.Fprintf(out, "# loadavg after: %s\n", doc.Environment.LoadAfter)
			if err != nil {
				return err
			}
			if verr := doc.Validate(); verr != nil {
				return fmt.Errorf("the document fails its own schema: %w", verr)
			}
			if jsonPath != "" {
				if err := doc.Write(jsonPath); err != nil {
					return err
				}
				fmt.Fprintf(out, "# wrote %s\n", jsonPath)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	client.register(fs)
	fs.StringSliceVar(&targetNames, "targets", []string{"sushka"}, "what to measure, in order: sushka (sushka serve as a child process), "+
		"kafka (the broker at --brokers; the default when --brokers is given), jetstream (nats-server as a child process, or --nats-url)")
	fs.StringVar(&natsURL, "nats-url", "", "the NATS server of the jetstream target (default: start one from test/natsserver)")
	fs.StringVar(&name, "name", "kafka", "name of the broker at --brokers in the table")
	fs.StringVar(&serveBinary, "serve-binary", "", "the sushka binary to start as the broker when --brokers is not given (default: this executable)")
	fs.StringArrayVar(&serveArgs, "serve-arg", nil, "an extra argument for the child's `sushka serve` (repeatable)")
	fs.StringVar(&childListen, "serve-listen", "", "the child broker's Kafka and admin listeners, HOST:PORT,HOST:PORT (default: free 127.0.0.1 ports)")
	fs.StringVar(&cfg.CPUProfileDir, "cpuprofile", "", "write a CPU profile of every measured consumer run (backlog published to the loop's return) into DIR, <target>-<scenario>-<loop>-<round>.pprof")
	fs.StringVar(&dataParent, "data-parent", "", "where the child broker's fresh data directory is made (default: the system's temporary directory)")
	fs.StringVar(&jsonPath, "json", "", "also write the results document (schema 3, seeds/004) to FILE")
	fs.StringVar(&codePath, "code", "", "costbench's results.json with the code-cost rows (default: "+codeResultsPath+" above the working directory)")
	fs.StringVar(&only, "scenario", "", "run only the scenarios whose name contains this")
	fs.BoolVar(&keepTopics, "keep-topics", false, "keep each run's topic instead of deleting it")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "least length of a measured run's window: sizes the backlog from the calibration; the publish scenario publishes this long")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "measured rounds per loop, interleaved R A F")
	fs.IntVar(&cfg.CalibrationMessages, "calibration-messages", cfg.CalibrationMessages, "backlog of the discarded calibration round, which sizes the measured rounds' backlog")
	fs.Int32Var(&cfg.Partitions, "partitions", cfg.Partitions, "partitions of each run's fresh topic")
	fs.IntVar(&cfg.Publishers, "publishers", cfg.Publishers, "the publish scenario's goroutines, one message at a time each, through the loop's publisher")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", cfg.TopicPrefix, "each run's topic is <prefix>-<target>-<scenario>-<loop>-<unix-nanos>")
	return cmd
}

// findUp returns rel under the first directory from the working directory
// upwards that has it, or rel itself (which then fails to open, with its
// name in the error).
func findUp(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return rel
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		} else if !errors.Is(err, os.ErrNotExist) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return rel
		}
		dir = parent
	}
}
