// Command producer-batching is the program from the producer-throughput
// lesson (linger × compression with franz-go), kept runnable against Sushka.
//
// It runs a 3×3 matrix — linger 0 / 5 / 50 ms × codec none / lz4 / zstd —
// and for every combination produces -messages unique JSON records of about
// -payload bytes into its own topic <prefix>-l<linger>-<codec>, with
// asynchronous cl.Produce calls and a per-record callback. It prints, per
// scenario: records sent and failed, elapsed time up to the end of Flush,
// throughput, the P50 / P99 / P99.9 of the time from Produce to its callback,
// and DISK: how many bytes the scenario added to the partition logs, read
// with kadm's DescribeAllLogDirs (one replica per partition).
//
// Usage:
//
//	go run ./examples/producer-batching -brokers 127.0.0.1:9092 -rf 1
//	go run ./examples/producer-batching -rf 1 -messages 10000 -payload 512
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// config is what the flags set.
type config struct {
	brokers     []string
	topicPrefix string
	partitions  int32
	rf          int16
	messages    int
	payload     int
	timeout     time.Duration
}

func main() {
	defBrokers := os.Getenv("SUSHKA_BROKERS")
	if defBrokers == "" {
		defBrokers = "127.0.0.1:9092"
	}
	brokers := flag.String("brokers", defBrokers, "comma-separated seed brokers (env SUSHKA_BROKERS)")
	prefix := flag.String("topic-prefix", "lecture-02-04-batching", "topic name prefix; each scenario writes to <prefix>-l<linger>-<codec>")
	partitions := flag.Int("partitions", 3, "partitions of each topic when it is created")
	rf := flag.Int("rf", 3, "replication factor of each topic when it is created (a single-node Sushka accepts 1)")
	messages := flag.Int("messages", 100_000, "records per scenario")
	payload := flag.Int("payload", 1024, "approximate size of one JSON record in bytes")
	timeout := flag.Duration("timeout", 5*time.Minute, "upper bound for one scenario")
	flag.Parse()

	if *messages <= 0 || *payload <= 0 || *partitions <= 0 {
		fmt.Fprintln(os.Stderr, "producer-batching: -messages, -payload and -partitions must be positive")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := config{
		brokers:     strings.Split(*brokers, ","),
		topicPrefix: *prefix,
		partitions:  int32(*partitions),
		rf:          int16(*rf),
		messages:    *messages,
		payload:     *payload,
		timeout:     *timeout,
	}
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "producer-batching:", err)
		os.Exit(1)
	}
}

// scenario is one cell of the matrix.
type scenario struct {
	label  string // as printed in the table
	suffix string // topic name suffix
	linger time.Duration
	codec  kgo.CompressionCodec
}

// matrix returns linger 0/5/50 ms × none/lz4/zstd, linger-major.
func matrix() []scenario {
	lingers := []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	var out []scenario
	for _, l := range lingers {
		ms := strconv.FormatInt(l.Milliseconds(), 10) + "ms"
		for _, c := range codecs {
			out = append(out, scenario{
				label:  fmt.Sprintf("linger=%-4s compression=%s", ms, c.name),
				suffix: fmt.Sprintf("l%s-%s", ms, c.name),
				linger: l,
				codec:  c.codec,
			})
		}
	}
	return out
}

// result is what one scenario measured.
type result struct {
	Scenario  string
	Topic     string
	Sent      int64 // records acknowledged
	Failed    int64 // records whose callback got an error
	Elapsed   time.Duration
	Latencies []time.Duration // Produce → callback, successful records only
	Errors    map[string]int64
	DiskBytes int64 // growth of the topic's logs, one replica per partition
}

// run executes the whole matrix and prints the table to w.
func run(ctx context.Context, cfg config, w io.Writer) ([]result, error) {
	scenarios := matrix()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	defer admCl.Close()
	admin := kadm.NewClient(admCl)

	// Every scenario gets its own topic, created up front, so that the DISK
	// column of one is not mixed with another's.
	topics := make([]string, len(scenarios))
	for i, s := range scenarios {
		topics[i] = cfg.topicPrefix + "-" + s.suffix
		if err := createTopic(ctx, w, admin, topics[i], cfg.partitions, cfg.rf); err != nil {
			return nil, fmt.Errorf("topic %s: %w", topics[i], err)
		}
	}

	// Unique records: a shared JSON shape (compressible) around random hex
	// (not compressible). Reusing one buffer would let the codecs encode
	// "the same thing N times" and report a fantasy ratio.
	payloads, err := orderPayloads(cfg.messages, cfg.payload)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(w, "%d scenarios, %d JSON records of ~%d B each, partitions=%d, rf=%d\n\n",
		len(scenarios), cfg.messages, cfg.payload, cfg.partitions, cfg.rf)

	// Sizes before, so that re-runs into existing topics report the delta.
	before, err := logDirSizes(ctx, admin, topics)
	if err != nil {
		return nil, fmt.Errorf("DescribeAllLogDirs before the run: %w", err)
	}

	results := make([]result, len(scenarios))
	for i, s := range scenarios {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "[%d/%d] %s ... ", i+1, len(scenarios), s.label)
		sctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		results[i] = produceScenario(sctx, cfg.brokers, s, topics[i], payloads)
		cancel()
		fmt.Fprintf(w, "sent=%d failed=%d elapsed=%s\n",
			results[i].Sent, results[i].Failed, results[i].Elapsed.Round(time.Millisecond))
	}

	// Give the broker a moment to account for the last batches before the
	// sizes are read again.
	time.Sleep(500 * time.Millisecond)
	after, err := logDirSizes(ctx, admin, topics)
	if err != nil {
		return nil, fmt.Errorf("DescribeAllLogDirs after the run: %w", err)
	}
	for i := range results {
		results[i].DiskBytes = after[topics[i]] - before[topics[i]]
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "results:")
	printTable(w, results)
	for _, r := range results {
		if len(r.Errors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n[%s] errors by class:\n", r.Scenario)
		printErrors(w, r.Errors)
	}
	return results, nil
}

// produceScenario writes all payloads to topic asynchronously with the
// scenario's linger and codec and waits for them with Flush.
func produceScenario(ctx context.Context, brokers []string, s scenario, topic string, payloads [][]byte) result {
	res := result{Scenario: s.label, Topic: topic, Errors: map[string]int64{}}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(s.linger),
		kgo.ProducerBatchCompression(s.codec),
		kgo.ProducerBatchMaxBytes(1<<20), // 1 MiB
		// The default of 10,000 buffered records would make Produce block
		// and measure backpressure instead of linger.
		kgo.MaxBufferedRecords(200_000),
	)
	if err != nil {
		res.Errors["client: "+err.Error()]++
		return res
	}
	defer cl.Close()

	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, len(payloads))
		sent      int64
		failed    int64
	)
	start := time.Now()
	for _, p := range payloads {
		if ctx.Err() != nil {
			break
		}
		rec := &kgo.Record{Value: p}
		sendAt := time.Now()
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			took := time.Since(sendAt)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				res.Errors[errClass(err)]++
				return
			}
			sent++
			latencies = append(latencies, took)
		})
	}
	// Without Flush the loop above "finishes" as soon as the records are
	// buffered and the elapsed time means nothing.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	if err := cl.Flush(fctx); err != nil {
		mu.Lock()
		res.Errors["flush: "+errClass(err)]++
		mu.Unlock()
	}
	cancel()
	res.Elapsed = time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	res.Sent, res.Failed, res.Latencies = sent, failed, latencies
	return res
}

// orderPayloads returns n unique OrderPlaced-like JSON records of about size
// bytes: fixed keys, a random id and random hex padding.
func orderPayloads(n, size int) ([][]byte, error) {
	out := make([][]byte, n)
	rnd := make([]byte, size/2+16)
	for i := range out {
		if _, err := rand.Read(rnd); err != nil {
			return nil, err
		}
		id := hex.EncodeToString(rnd[:16])
		head := fmt.Sprintf(`{"seq":%d,"id":"%s","ts":%d,"event":"order.created","payload":"`,
			i, id, time.Now().UnixNano())
		const tail = `"}`
		pad := max(size-len(head)-len(tail), 0)
		padHex := hex.EncodeToString(rnd[16 : 16+(pad+1)/2])[:pad]
		b := make([]byte, 0, len(head)+pad+len(tail))
		b = append(b, head...)
		b = append(b, padHex...)
		b = append(b, tail...)
		out[i] = b
	}
	return out, nil
}

// createTopic creates topic; one that already exists is fine.
func createTopic(ctx context.Context, w io.Writer, admin *kadm.Client, topic string, partitions int32, rf int16) error {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := admin.CreateTopic(rctx, partitions, rf, nil, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		fmt.Fprintf(w, "topic %q created: partitions=%d rf=%d\n", topic, partitions, rf)
		return nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return nil
	case errors.Is(err, kerr.InvalidReplicationFactor):
		return fmt.Errorf("%w (this cluster has fewer brokers than -rf=%d; a single-node Sushka needs -rf 1)", err, rf)
	}
	return err
}

// logDirSizes sums the partition sizes of each wanted topic over
// DescribeAllLogDirs, counting the first replica seen of each partition only
// (at rf=3 the cluster holds three times as much).
func logDirSizes(ctx context.Context, admin *kadm.Client, topics []string) (map[string]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	all, err := admin.DescribeAllLogDirs(rctx, nil) // nil: every log dir
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, t := range topics {
		wanted[t] = true
	}
	sizes := map[string]int64{}
	seen := map[string]map[int32]bool{}
	all.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if !wanted[p.Topic] || seen[p.Topic][p.Partition] {
				return
			}
			if seen[p.Topic] == nil {
				seen[p.Topic] = map[int32]bool{}
			}
			seen[p.Topic][p.Partition] = true
			sizes[p.Topic] += p.Size
		})
	})
	return sizes, nil
}

func errClass(err error) string {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return ke.Message
	case errors.Is(err, context.Canceled):
		return "CONTEXT_CANCELED"
	case errors.Is(err, context.DeadlineExceeded):
		return "DEADLINE_EXCEEDED"
	}
	return err.Error()
}

// quantile returns the q-quantile of sorted (nearest rank below).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*q)]
}

func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tSENT\tFAILED\tELAPSED\tTHROUGHPUT\tP50\tP99\tP99.9\tDISK")
	for _, r := range results {
		lat := slices.Clone(r.Latencies)
		slices.Sort(lat)
		var rate float64
		if s := r.Elapsed.Seconds(); s > 0 {
			rate = float64(r.Sent) / s
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.0f msg/s\t%s\t%s\t%s\t%s\n",
			r.Scenario, r.Sent, r.Failed, fmtDur(r.Elapsed), rate,
			fmtDur(quantile(lat, 0.50)), fmtDur(quantile(lat, 0.99)), fmtDur(quantile(lat, 0.999)),
			fmtBytes(r.DiskBytes))
	}
	_ = tw.Flush()
}

func printErrors(w io.Writer, errs map[string]int64) {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ERROR\tCOUNT")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\n", k, errs[k])
	}
	_ = tw.Flush()
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtBytes(b int64) string {
	switch {
	case b <= 0:
		return "0"
	case b < 1<<10:
		return fmt.Sprintf("%dB", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1fKB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1fMB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2fGB", float64(b)/(1<<30))
}
