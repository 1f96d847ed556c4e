package main

// sushka produce TOPIC: one record per line of stdin, in the style of
// `kcat -P` / `rpk topic produce`.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/bench"
)

func init() { rootCmd.AddCommand(newProduceCmd()) }

type produceOpts struct {
	keySep      string
	partition   int32
	acks        string
	compression string
	linger      time.Duration
	headers     []string
	maxLine     int
}

func newProduceCmd() *cobra.Command {
	cf := &clientFlags{}
	o := &produceOpts{}
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per line of stdin",
		Long: "Reads stdin and produces one record per line (the newline is not part of the value).\n" +
			"With --key-separator SEP each line is split at the first SEP into key and value.\n" +
			"A summary (records, bytes, time) is printed on stderr.",
		Example: "  printf 'a\\nb\\n' | sushka produce orders\n" +
			"  echo 'user-1:{\"qty\":2}' | sushka produce orders --key-separator : -z zstd",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProduce(cmd, cf, o, args[0])
		},
	}
	cf.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVarP(&o.keySep, "key-separator", "K", "", "split each line into key and value at the first SEP")
	fs.Int32VarP(&o.partition, "partition", "p", -1, "produce to this partition (-1: the default partitioner)")
	fs.StringVar(&o.acks, "acks", "all", "required acks: all (-1), 1 (leader) or 0 (none)")
	fs.StringVarP(&o.compression, "compression", "z", "none", "batch codec: none, gzip, snappy, lz4, zstd")
	fs.DurationVar(&o.linger, "linger", 0, "how long to wait to fill a batch (0: send at once)")
	fs.StringArrayVarP(&o.headers, "header", "H", nil, "add a header key=value to every record (repeatable)")
	fs.IntVar(&o.maxLine, "max-line-bytes", 16<<20, "longest accepted input line")
	return cmd
}

// parseAcks is bench.Acks for --acks, which also takes any case and the
// names leader (1) and none (0).
func parseAcks(s string) (kgo.Acks, bool, error) {
	name := strings.ToLower(s)
	switch name {
	case "leader":
		name = "1"
	case "none":
		name = "0"
	}
	acks, idempotent, err := bench.Acks(name)
	if err != nil {
		return kgo.Acks{}, false, fmt.Errorf("--acks %q: want all, 1 or 0", s)
	}
	return acks, idempotent, nil
}

// parseCodec is bench.Codec for --compression, which takes any case.
func parseCodec(s string) (kgo.CompressionCodec, error) {
	codec, err := bench.Codec(strings.ToLower(s))
	if err != nil {
		return kgo.CompressionCodec{}, fmt.Errorf("--compression %q: want none, gzip, snappy, lz4 or zstd", s)
	}
	return codec, nil
}

func runProduce(cmd *cobra.Command, cf *clientFlags, o *produceOpts, topic string) error {
	acks, idempotent, err := parseAcks(o.acks)
	if err != nil {
		return err
	}
	codec, err := parseCodec(o.compression)
	if err != nil {
		return err
	}
	var headers []kgo.RecordHeader
	for _, h := range o.headers {
		k, v, err := parseKV(h)
		if err != nil {
			return fmt.Errorf("--header %s", err)
		}
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}

	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(acks),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(o.linger),
		kgo.ProduceRequestTimeout(cf.timeout),
		kgo.RecordDeliveryTimeout(cf.timeout + 5*time.Second),
		// Fail fast on a topic that does not exist (unless the broker
		// creates it on the first metadata request).
		kgo.UnknownTopicRetries(3),
		kgo.AllowAutoTopicCreation(),
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if o.partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl, err := cf.newClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var (
		produced, failed atomic.Int64
		bytesOut         atomic.Int64
		errMu            sync.Mutex
		firstErr         error
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
			return
		}
		produced.Add(1)
		bytesOut.Add(int64(len(r.Key) + len(r.Value)))
	}

	start := time.Now()
	in := bufio.NewReaderSize(cmd.InOrStdin(), 64<<10)
	sep := []byte(o.keySep)
	var readErr error
	for ctx.Err() == nil {
		line, err := readLine(in, o.maxLine)
		if len(line) > 0 || err == nil {
			r := &kgo.Record{Headers: headers}
			if len(sep) > 0 {
				if k, v, ok := bytes.Cut(line, sep); ok {
					r.Key, r.Value = k, v
				} else {
					r.Value = line
				}
			} else {
				r.Value = line
			}
			if o.partition >= 0 {
				r.Partition = o.partition
			}
			cl.Produce(ctx, r, promise)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), cf.timeout+10*time.Second)
	defer cancel()
	if err := cl.Flush(flushCtx); err != nil && firstErr == nil {
		firstErr = err
	}
	elapsed := time.Since(start)

	n, b := produced.Load(), bytesOut.Load()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "produced %d records (%s) to %s in %s (%.0f records/s)",
		n, humanBytes(b), topic, elapsed.Round(time.Millisecond), rate)
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), ", %d failed", f)
	}
	fmt.Fprintln(cmd.ErrOrStderr())

	if readErr != nil {
		return fmt.Errorf("reading stdin: %w", readErr)
	}
	if firstErr != nil {
		return cf.explain(fmt.Sprintf("produce to %s (%d records failed)", topic, failed.Load()), firstErr)
	}
	return nil
}

// readLine returns the next line without its "\n" (and a preceding "\r"),
// or an error (io.EOF at the end; a final line without a newline is
// returned with io.EOF).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > max {
			return nil, fmt.Errorf("a line is longer than --max-line-bytes=%d", max)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			buf = buf[:len(buf)-1]
			if n := len(buf); n > 0 && buf[n-1] == '\r' {
				buf = buf[:n-1]
			}
		}
		return buf, err
	}
}

func humanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
