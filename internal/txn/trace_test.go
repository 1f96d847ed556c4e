package txn

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/tracefmt"
)

// Golden traces, as internal/group's: each testdata/*.txt is a script of
// inputs, each followed by "----" and everything it caused: records
// persisted, marker jobs and responses, in order. `go test ./internal/txn
// -rewrite` regenerates the outputs; the diff is the review.

func TestTraces(t *testing.T) {
	tracefmt.RunScripts(t, "./internal/txn", func(t *testing.T) func(string) string {
		h := newHarness()
		return func(cmd string) string { return h.run(t, cmd) }
	})
}

type fakeTopics map[string]int32

func (f fakeTopics) Partitions(topic string) ([16]byte, int32, bool) {
	n, ok := f[topic]
	return [16]byte{}, n, ok
}

// harness drives a Coordinator from script commands.
type harness struct {
	cfg       Config
	c         *Coordinator
	now       time.Time
	nextReqID uint64
	nextPID   int64
	persisted []Record
	jobs      map[string]MarkerJob // the last marker job of each id
}

func newHarness() *harness {
	h := &harness{now: tracefmt.Epoch, jobs: map[string]MarkerJob{}}
	h.configure(tracefmt.Args{})
	return h
}

func (h *harness) configure(args tracefmt.Args) {
	h.cfg = Config{NodeID: 1, Host: "127.0.0.1", Port: 9092, Topics: fakeTopics{"t1": 3, "t2": 2}}
	h.cfg.NewProducerID = func() (int64, error) { h.nextPID++; return h.nextPID, nil }
	if v, ok := args["maxtimeout"]; ok {
		h.cfg.MaxTimeout = tracefmt.MustDuration(v)
	}
	if v, ok := args["expiration"]; ok {
		h.cfg.IDExpiration = tracefmt.MustDuration(v)
	}
	h.c = New(h.cfg)
	if args["loading"] != "true" {
		h.c.Loaded(h.now)
	}
}

// parsePartitions parses "t1/0+1,t2/0".
func parsePartitions(s string) []TopicPartition {
	var tps []TopicPartition
	if s == "" {
		return nil
	}
	for _, tp := range strings.Split(s, ",") {
		topic, ps, _ := strings.Cut(tp, "/")
		for _, p := range strings.Split(ps, "+") {
			n, _ := strconv.Atoi(p)
			tps = append(tps, TopicPartition{topic, int32(n)})
		}
	}
	return tps
}

func (h *harness) run(t *testing.T, line string) string {
	fields := strings.Fields(line)
	cmd, args := fields[0], tracefmt.ParseArgs(fields[1:])
	version := int16(args.Int("v", -1))
	id := args["id"]
	pid, epoch := int64(args.Int("pid", -1)), int16(args.Int("epoch", -1))
	var req kmsg.Request
	switch cmd {
	case "config":
		h.configure(args)
		return ""
	case "loaded":
		h.c.Loaded(h.now)
		return h.ready()
	case "advance":
		h.now = h.now.Add(tracefmt.MustDuration(fields[1]))
		h.c.Tick(h.now)
		return h.ready()
	case "restart":
		h.c = New(h.cfg)
		if err := h.c.Load(h.persisted); err != nil {
			t.Fatal(err)
		}
		h.c.Loaded(h.now)
		return fmt.Sprintf("replayed %d records\n", len(h.persisted)) + h.ready() + h.state()
	case "state":
		return h.state()
	case "markers":
		// The driver reports the id's last marker job: written, or
		// failed on the partitions in fail=.
		job, ok := h.jobs[id]
		if !ok {
			t.Fatalf("no marker job for %q", id)
		}
		h.c.MarkersWritten(MarkerResult{Job: job, Failed: parsePartitions(args["fail"])}, h.now)
		return h.ready()
	case "verify":
		h.nextReqID++
		h.c.Handle(Request{ID: h.nextReqID, Now: h.now, Verify: &Verify{
			TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch,
			Partition: parsePartitions(args["part"])[0], ImplicitAdd: args["implicit"] == "true",
		}})
		return fmt.Sprintf("#%d Verify\n", h.nextReqID) + h.ready()
	case "find":
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorType = 1
		r.CoordinatorKey = args["key"]
		r.CoordinatorKeys = []string{r.CoordinatorKey}
		if k, ok := args["keys"]; ok {
			r.CoordinatorKeys = strings.Split(k, ",")
		}
		req = r
	case "init":
		r := kmsg.NewPtrInitProducerIDRequest()
		if v, ok := args["id"]; ok {
			r.TransactionalID = &v
		}
		r.TransactionTimeoutMillis = int32(args.Int("timeout", 60000))
		r.ProducerID, r.ProducerEpoch = pid, epoch
		req = r
	case "add":
		r := kmsg.NewPtrAddPartitionsToTxnRequest()
		tps := parsePartitions(args["parts"])
		if version >= 4 {
			rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
			rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, rt.VerifyOnly = id, pid, epoch, args["verify"] == "true"
			for _, tp := range tps {
				rt.Topics = append(rt.Topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
			}
			r.Transactions = append(r.Transactions, rt)
		} else {
			r.TransactionalID, r.ProducerID, r.ProducerEpoch = id, pid, epoch
			for _, tp := range tps {
				r.Topics = append(r.Topics, kmsg.AddPartitionsToTxnRequestTopic{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
			}
			if version < 0 {
				version = 3
			}
		}
		req = r
	case "offsets":
		r := kmsg.NewPtrAddOffsetsToTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = id, pid, epoch, args["group"]
		req = r
	case "end":
		r := kmsg.NewPtrEndTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit = id, pid, epoch, args["commit"] == "true"
		if version < 0 {
			version = 4
		}
		req = r
	case "describe":
		r := kmsg.NewPtrDescribeTransactionsRequest()
		r.TransactionalIDs = strings.Split(args["ids"], ",")
		req = r
	case "list":
		r := kmsg.NewPtrListTransactionsRequest()
		if v := args["states"]; v != "" {
			r.StateFilters = strings.Split(v, ",")
		}
		if v := args["pids"]; v != "" {
			for _, p := range strings.Split(v, ",") {
				n, _ := strconv.ParseInt(p, 10, 64)
				r.ProducerIDFilters = append(r.ProducerIDFilters, n)
			}
		}
		r.DurationFilterMillis = int64(args.Int("duration", -1))
		req = r
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	if version < 0 {
		version = req.MaxVersion()
	}
	req.SetVersion(version)
	h.nextReqID++
	h.c.Handle(Request{ID: h.nextReqID, Now: h.now, Body: req})
	return fmt.Sprintf("#%d %s v%d\n", h.nextReqID, kmsg.NameForKey(req.Key()), version) + h.ready()
}

// ready renders the coordinator's Ready and keeps its records as the
// "disk" for restart.
func (h *harness) ready() string {
	rd := h.c.Ready()
	var b strings.Builder
	for _, r := range rd.Records {
		h.persisted = append(h.persisted, r)
		b.WriteString("persist " + formatRecord(r) + "\n")
	}
	for _, m := range rd.Markers {
		h.jobs[m.TransactionalID] = m
		kind := "abort"
		if m.Commit {
			kind = "commit"
		}
		fmt.Fprintf(&b, "markers %s %s pid=%d epoch=%d %s\n", m.TransactionalID, kind, m.ProducerID, m.ProducerEpoch, formatPartitions(m.Partitions))
	}
	for _, r := range rd.Responses {
		if r.Body == nil {
			fmt.Fprintf(&b, "reply #%d %s\n", r.ID, codeName(r.Code))
			continue
		}
		fmt.Fprintf(&b, "reply #%d %s\n", r.ID, formatValue(reflect.ValueOf(r.Body).Elem()))
	}
	for _, r := range rd.Completions {
		h.persisted = append(h.persisted, r)
		b.WriteString("persist after the replies " + formatRecord(r) + "\n")
	}
	if next := h.c.NextDeadline(); !next.IsZero() {
		fmt.Fprintf(&b, "next deadline +%s\n", next.Sub(tracefmt.Epoch))
	}
	return b.String()
}

func codeName(code int16) string {
	if code == 0 {
		return "OK"
	}
	return tracefmt.ErrName(code)
}

func (h *harness) state() string {
	var b strings.Builder
	for _, t := range h.c.sortedTxns() {
		fmt.Fprintf(&b, "txn %s %s pid=%d epoch=%d last=%d prev=%d timeout=%s %s\n", t.id, t.state, t.producerID, t.epoch, t.lastEpoch, t.prevProducerID, t.timeout, formatPartitions(sortedPartitions(t.partitions)))
	}
	return b.String()
}

func formatPartitions(tps []TopicPartition) string {
	var parts []string
	for _, tp := range tps {
		parts = append(parts, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func formatRecord(r Record) string {
	var k kmsg.TxnMetadataKey
	k.ReadFrom(r.Key)
	s := fmt.Sprintf("p%d %s", r.Partition, k.TransactionalID)
	if r.Value == nil {
		return s + " tombstone"
	}
	var v kmsg.TxnMetadataValue
	v.ReadFrom(r.Value)
	start := "none"
	if v.StartTimestamp >= 0 {
		start = "+" + time.UnixMilli(v.StartTimestamp).Sub(tracefmt.Epoch).String()
	}
	var tps []string
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, fmt.Sprintf("%s/%d", t.Topic, p))
		}
	}
	return s + fmt.Sprintf(" %s pid=%d epoch=%d prev=%d next=%d timeout=%dms start=%s tv=%d [%s] (v%d)",
		State(v.State), v.ProducerID, v.ProducerEpoch, v.PreviousProducerID, v.NextProducerID, v.TimeoutMillis, start, v.ClientTransactionVersion, strings.Join(tps, " "), v.Version)
}

func formatValue(v reflect.Value) string {
	return tracefmt.Value(v, func(_ string, b []byte) string { return fmt.Sprintf("%x", b) })
}
