package main

// sushka consume TOPIC...: print records in the style of `kcat -C` /
// `rpk topic consume`.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { rootCmd.AddCommand(newConsumeCmd()) }

type consumeOpts struct {
	offset    string
	at        string
	count     int
	format    string
	group     string
	exitAtEnd bool
	partition []int32
}

func newConsumeCmd() *cobra.Command {
	cf := &clientFlags{}
	o := &consumeOpts{}
	cmd := &cobra.Command{
		Use:   "consume TOPIC...",
		Short: "Print records from topics",
		Long: "Prints records, one per line by default (the value), until -n records, the end\n" +
			"(with -e) or Ctrl-C.\n\n" +
			"--offset: start (the beginning), end (only new records), N (absolute offset N),\n" +
			"          -N (N records before the end of each partition).\n" +
			"--time:   RFC3339 time or unix milliseconds: the first record at or after it.\n" +
			"--format: a kcat-style format string, or json. Format tokens:\n" +
			"          %t topic  %p partition  %o offset  %k key  %v (or %s) value\n" +
			"          %T timestamp (unix ms)  %h headers (k=v,k=v)  %K key length\n" +
			"          %S value length  %%  a percent sign;  \\n \\t \\r \\\\ escapes.",
		Example: "  sushka consume orders --offset start -n 10\n" +
			"  sushka consume orders --offset -5 --format '%p/%o %k=%v\\n'\n" +
			"  sushka consume orders --time 2026-01-02T15:04:05Z --format json",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConsume(cmd, cf, o, args)
		},
	}
	cf.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVarP(&o.offset, "offset", "o", "end", "where to start: start, end, N or -N")
	fs.StringVar(&o.at, "time", "", "start at the first record at or after this time (RFC3339 or unix ms)")
	fs.IntVarP(&o.count, "num", "n", 0, "exit after this many records (0: no limit)")
	fs.StringVarP(&o.format, "format", "f", `%v\n`, "kcat-style format string, or json")
	fs.StringVarP(&o.group, "group", "g", "", "consume as this consumer group (the offset applies when the group has none committed)")
	fs.BoolVarP(&o.exitAtEnd, "exit-at-end", "e", false, "exit after the last record present at start-up (like kcat -e)")
	fs.Int32SliceVarP(&o.partition, "partition", "p", nil, "consume only these partitions (repeatable)")
	return cmd
}

// startSpec is a parsed --offset/--time.
type startSpec struct {
	kind   string // "start", "end", "abs", "rel", "time"
	n      int64  // abs offset, rel count (positive) or time in ms
	offset kgo.Offset
}

func parseStart(offset, at string) (startSpec, error) {
	if at != "" {
		ms, err := parseTime(at)
		if err != nil {
			return startSpec{}, err
		}
		return startSpec{kind: "time", n: ms, offset: kgo.NewOffset().AfterMilli(ms)}, nil
	}
	switch strings.ToLower(offset) {
	case "start", "beginning", "oldest", "earliest":
		return startSpec{kind: "start", offset: kgo.NewOffset().AtStart()}, nil
	case "end", "newest", "latest", "":
		return startSpec{kind: "end", offset: kgo.NewOffset().AtEnd()}, nil
	}
	n, err := strconv.ParseInt(offset, 10, 64)
	if err != nil {
		return startSpec{}, fmt.Errorf("--offset %q: want start, end, N or -N", offset)
	}
	if n < 0 {
		return startSpec{kind: "rel", n: -n, offset: kgo.NewOffset().AtEnd().Relative(n)}, nil
	}
	return startSpec{kind: "abs", n: n, offset: kgo.NewOffset().At(n)}, nil
}

// parseTime accepts RFC3339 (with or without fractional seconds) or unix
// milliseconds.
func parseTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--time %q: want RFC3339 (2006-01-02T15:04:05Z) or unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

// partRange is where a partition starts and, for -e, where it ends.
type partRange struct{ start, end int64 }

// resolveStarts turns the start spec into exact per-partition offsets with
// ListOffsets, and returns the end offsets seen at start-up.
func resolveStarts(ctx context.Context, cf *clientFlags, adm *kadm.Client, topics []string, only []int32, spec startSpec) (map[string]map[int32]partRange, error) {
	rctx, cancel := cf.reqCtx(ctx)
	defer cancel()
	tds, err := adm.ListTopics(rctx, topics...)
	if err != nil {
		return nil, cf.explain("metadata", err)
	}
	for _, t := range topics {
		td, ok := tds[t]
		if !ok {
			return nil, cf.explain("topic "+t, kerr.UnknownTopicOrPartition)
		}
		if td.Err != nil {
			return nil, cf.explain("topic "+t, td.Err)
		}
	}
	starts, err := adm.ListStartOffsets(rctx, topics...)
	if err != nil {
		return nil, cf.explain("list start offsets", err)
	}
	ends, err := adm.ListEndOffsets(rctx, topics...)
	if err != nil {
		return nil, cf.explain("list end offsets", err)
	}
	var byTime kadm.ListedOffsets
	if spec.kind == "time" {
		byTime, err = adm.ListOffsetsAfterMilli(rctx, spec.n, topics...)
		if err != nil {
			return nil, cf.explain("list offsets by time", err)
		}
	}
	want := map[int32]bool{}
	for _, p := range only {
		want[p] = true
	}
	out := map[string]map[int32]partRange{}
	for _, t := range topics {
		out[t] = map[int32]partRange{}
		for _, p := range tds[t].Partitions.Numbers() {
			if len(want) > 0 && !want[p] {
				continue
			}
			lo, ok1 := starts.Lookup(t, p)
			hi, ok2 := ends.Lookup(t, p)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%s[%d]: no offsets from the broker", t, p)
			}
			if lo.Err != nil {
				return nil, cf.explain(fmt.Sprintf("%s[%d] start offset", t, p), lo.Err)
			}
			if hi.Err != nil {
				return nil, cf.explain(fmt.Sprintf("%s[%d] end offset", t, p), hi.Err)
			}
			r := partRange{end: hi.Offset}
			switch spec.kind {
			case "start":
				r.start = lo.Offset
			case "end":
				r.start = hi.Offset
			case "abs":
				r.start = min(max(spec.n, lo.Offset), hi.Offset)
			case "rel":
				r.start = max(hi.Offset-spec.n, lo.Offset)
			case "time":
				r.start = hi.Offset
				if at, ok := byTime.Lookup(t, p); ok && at.Err == nil && at.Offset >= 0 {
					r.start = at.Offset
				}
			}
			out[t][p] = r
		}
		if len(want) > 0 && len(out[t]) != len(want) {
			return nil, cf.explain(fmt.Sprintf("topic %s partitions %v", t, only), kerr.UnknownTopicOrPartition)
		}
	}
	return out, nil
}

func runConsume(cmd *cobra.Command, cf *clientFlags, o *consumeOpts, topics []string) error {
	spec, err := parseStart(o.offset, o.at)
	if err != nil {
		return err
	}
	f, err := newFormatter(o.format)
	if err != nil {
		return err
	}
	if o.group != "" && (o.exitAtEnd || len(o.partition) > 0) {
		return errors.New("--group cannot be combined with --exit-at-end or --partition")
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []kgo.Opt{kgo.FetchMaxWait(time.Second)}
	var ranges map[string]map[int32]partRange
	if o.group != "" {
		if err := checkGroupSupport(ctx, cf); err != nil {
			return err
		}
		opts = append(opts,
			kgo.ConsumerGroup(o.group),
			kgo.ConsumeTopics(topics...),
			kgo.ConsumeResetOffset(spec.offset),
			kgo.AutoCommitMarks(),
		)
	} else {
		adm, acl, err := cf.newAdmin()
		if err != nil {
			return err
		}
		ranges, err = resolveStarts(ctx, cf, adm, topics, o.partition, spec)
		acl.Close()
		if err != nil {
			return err
		}
		parts := map[string]map[int32]kgo.Offset{}
		for t, ps := range ranges {
			parts[t] = map[int32]kgo.Offset{}
			for p, r := range ps {
				parts[t][p] = kgo.NewOffset().At(r.start)
			}
		}
		opts = append(opts, kgo.ConsumePartitions(parts))
	}
	cl, err := cf.newClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	// For -e: partitions still short of their start-up end offset.
	pending := map[string]map[int32]int64{}
	npending := 0
	if o.exitAtEnd {
		for t, ps := range ranges {
			for p, r := range ps {
				if r.start < r.end {
					if pending[t] == nil {
						pending[t] = map[int32]int64{}
					}
					pending[t][p] = r.end
					npending++
				}
			}
		}
		if npending == 0 {
			return nil
		}
	}

	w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	defer w.Flush()
	printed := 0
	var buf []byte
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		var fatal error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "consume %s[%d]: %s\n", t, p, describeErr(err, ""))
			if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.TopicAuthorizationFailed) {
				fatal = cf.explain(fmt.Sprintf("consume %s[%d]", t, p), err)
			}
		})
		if fatal != nil {
			return fatal
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if done {
				return
			}
			buf = f.append(buf[:0], r)
			_, _ = w.Write(buf)
			printed++
			if o.group != "" {
				cl.MarkCommitRecords(r)
			}
			if o.count > 0 && printed >= o.count {
				done = true
			}
			if o.exitAtEnd {
				if end, ok := pending[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
					delete(pending[r.Topic], r.Partition)
					npending--
					if npending == 0 {
						done = true
					}
				}
			}
		})
		if err := w.Flush(); err != nil {
			return err // e.g. a closed pipe downstream
		}
		if done {
			break
		}
	}
	if o.group != "" {
		cctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
		defer cancel()
		if err := cl.CommitMarkedOffsets(cctx); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "committing offsets: %s\n", describeErr(err, ""))
		}
	}
	return nil
}

// checkGroupSupport fails fast when the brokers serve no group coordinator
// (FindCoordinator, JoinGroup, OffsetCommit), instead of retrying forever.
func checkGroupSupport(ctx context.Context, cf *clientFlags) error {
	rctx, adm, done, err := cf.adminRequest(ctx)
	if err != nil {
		return err
	}
	defer done()
	vs, err := adm.ApiVersions(rctx)
	if err != nil {
		return cf.explain("api versions", err)
	}
	for _, v := range vs {
		if v.Err != nil {
			return cf.explain("api versions", v.Err)
		}
		for _, key := range []int16{10, 11, 8} { // FindCoordinator, JoinGroup, OffsetCommit
			if _, ok := v.KeyMaxVersion(key); !ok {
				return fmt.Errorf("--group: broker %d does not serve consumer groups (API key %d)\n"+
					"hint: consume without --group (with --offset / --time), or use a broker with group support", v.NodeID, key)
			}
		}
	}
	return nil
}

// formatter renders one record.
type formatter struct {
	json  bool
	parts []fmtPart
}

type fmtPart struct {
	lit  string
	verb byte // 0 for a literal
}

func newFormatter(s string) (*formatter, error) {
	if strings.EqualFold(s, "json") {
		return &formatter{json: true}, nil
	}
	f := &formatter{}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			f.parts = append(f.parts, fmtPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				lit.WriteByte('\n')
			case 't':
				lit.WriteByte('\t')
			case 'r':
				lit.WriteByte('\r')
			case '0':
				lit.WriteByte(0)
			case '\\':
				lit.WriteByte('\\')
			default:
				lit.WriteByte('\\')
				lit.WriteByte(s[i])
			}
		case c == '%' && i+1 < len(s):
			i++
			switch v := s[i]; v {
			case '%':
				lit.WriteByte('%')
			case 't', 'p', 'o', 'k', 'v', 's', 'T', 'h', 'K', 'S':
				flush()
				f.parts = append(f.parts, fmtPart{verb: v})
			default:
				return nil, fmt.Errorf("--format: unknown token %%%c (want %%t %%p %%o %%k %%v %%s %%T %%h %%K %%S %%%%)", v)
			}
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return f, nil
}

type jsonHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type jsonRecord struct {
	Topic     string       `json:"topic"`
	Partition int32        `json:"partition"`
	Offset    int64        `json:"offset"`
	Timestamp int64        `json:"timestamp"`
	Key       *string      `json:"key"`
	Value     *string      `json:"value"`
	Headers   []jsonHeader `json:"headers"`
}

func (f *formatter) append(dst []byte, r *kgo.Record) []byte {
	if f.json {
		jr := jsonRecord{
			Topic:     r.Topic,
			Partition: r.Partition,
			Offset:    r.Offset,
			Timestamp: r.Timestamp.UnixMilli(),
			Headers:   []jsonHeader{},
		}
		if r.Key != nil {
			k := string(r.Key)
			jr.Key = &k
		}
		if r.Value != nil {
			v := string(r.Value)
			jr.Value = &v
		}
		for _, h := range r.Headers {
			jr.Headers = append(jr.Headers, jsonHeader{Key: h.Key, Value: string(h.Value)})
		}
		b, _ := json.Marshal(jr)
		dst = append(dst, b...)
		return append(dst, '\n')
	}
	for _, p := range f.parts {
		switch p.verb {
		case 0:
			dst = append(dst, p.lit...)
		case 't':
			dst = append(dst, r.Topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'k':
			dst = append(dst, r.Key...)
		case 'v', 's':
			dst = append(dst, r.Value...)
		case 'T':
			dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
		case 'K':
			dst = strconv.AppendInt(dst, int64(len(r.Key)), 10)
		case 'S':
			dst = strconv.AppendInt(dst, int64(len(r.Value)), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				dst = append(dst, '=')
				dst = append(dst, h.Value...)
			}
		}
	}
	return dst
}
