package bench

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// stallingCluster is a kfake cluster that, once armed, holds one produce
// request for stall: the whole cluster stops answering meanwhile.
func stallingCluster(t *testing.T, stall time.Duration) (*kfake.Cluster, *atomic.Bool) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var armed atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if armed.CompareAndSwap(true, false) {
			time.Sleep(stall)
		}
		return nil, nil, false
	})
	return c, &armed
}

// TestOpenLoopShowsStallClosedLoopHides is MEASURING.md rule 7 as a test:
// the same 400 ms stall of the server is in the open loop's p99 and
// nowhere in the closed loop's percentiles (only in its max).
func TestOpenLoopShowsStallClosedLoopHides(t *testing.T) {
	const stall = 400 * time.Millisecond
	c, armed := stallingCluster(t, stall)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"),
		kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	op := func(seq int64, _ time.Time, done func(error)) {
		if seq == 200 {
			armed.Store(true)
		}
		cl.Produce(ctx, &kgo.Record{Value: []byte("v")}, func(_ *kgo.Record, err error) { done(err) })
	}

	open := OpenLoop(ctx, 500, 2*time.Second, 10*time.Second, op)
	closed := ClosedLoop(ctx, 1, 2*time.Second, 10*time.Second, op)
	ol, cll := open.Latency.Summary(), closed.Latency.Summary()
	t.Logf("open loop:   %d acked, %s", open.Acked, ol)
	t.Logf("closed loop: %d acked, %s", closed.Acked, cll)
	if open.Errors+closed.Errors+open.Unfinished+closed.Unfinished != 0 {
		t.Fatalf("errors: open %+v closed %+v", open, closed)
	}
	// 500/s for 400 ms: ~200 of ~1000 records were due during the stall,
	// so ~20% of the open loop's latencies carry part of it.
	if ol.P90 < 50 || ol.P99 < 0.7*float64(stall.Milliseconds()) {
		t.Errorf("open loop must show the stall: %s", ol)
	}
	// The closed loop had one request in flight during the stall: it shows
	// in max only; p99 stays small because the loop stopped asking.
	if cll.Max < 0.7*float64(stall.Milliseconds()) {
		t.Errorf("the stall did not happen in the closed loop: %s", cll)
	}
	if cll.P99 > 0.25*float64(stall.Milliseconds()) {
		t.Errorf("closed loop p99 %s: expected it to hide the stall (slow machine?)", fmtMs(cll.P99))
	}
	if closed.Issued >= open.Issued*3 {
		t.Logf("note: closed loop issued %d vs open %d", closed.Issued, open.Issued)
	}
}

func TestOpenLoopSchedule(t *testing.T) {
	var n atomic.Int64
	r := OpenLoop(context.Background(), 1000, 500*time.Millisecond, time.Second, func(seq int64, due time.Time, done func(error)) {
		if seq != n.Load() {
			t.Errorf("seq %d, want %d", seq, n.Load())
		}
		n.Add(1)
		go done(nil)
	})
	if r.Issued != 500 || r.Acked != 500 || r.Mode != "open-loop" || r.Offered != 1000 {
		t.Errorf("%+v", r)
	}
	if a := r.Achieved(); a < 800 || a > 1100 {
		t.Errorf("achieved %.0f/s for 1000/s offered", a)
	}
}

func TestUnfinishedCountedWithTheirWait(t *testing.T) {
	r := OpenLoop(context.Background(), 100, 100*time.Millisecond, 200*time.Millisecond, func(seq int64, _ time.Time, done func(error)) {
		if seq%2 == 0 {
			done(nil)
		} // odd requests never answer
	})
	if r.Unfinished != r.Issued/2 || r.Latency.Count() != uint64(r.Issued) {
		t.Fatalf("%+v count %d", r, r.Latency.Count())
	}
	if r.Latency.Max() < 200*time.Millisecond {
		t.Errorf("unanswered requests must count at least their wait: max %v", r.Latency.Max())
	}
}

func TestProcCPU(t *testing.T) {
	w := WatchCPU("self")
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	s := w.Stop()
	if !s.OK || s.CPU <= 0 || s.Cores() > float64(generatorCores())+0.5 {
		t.Errorf("self CPU %+v", s)
	}
	if _, err := ProcCPU(strconv.Itoa(os.Getpid())); err != nil {
		t.Error(err)
	}
	if s := WatchCPU("").Stop(); s.OK {
		t.Error("no pid must give no sample")
	}
	if got := s.SecondsPerGB(1e9); got != s.CPU.Seconds() {
		t.Errorf("s/GB %v", got)
	}
}

// TestOpenLoopBatches: requests of 10 records at 1000 records/s for 200 ms
// are 20 requests, due 10 ms apart; a request's failed records count as
// errors, the rest as acknowledged.
func TestOpenLoopBatches(t *testing.T) {
	var first time.Time
	var last time.Time
	r := OpenLoopBatches(context.Background(), 1000, 10, 200*time.Millisecond, time.Second, func(seq int64, due time.Time, done func(int64, error)) {
		if seq == 0 {
			first = due
		}
		last = due
		if seq%2 == 1 {
			go done(3, errors.New("t[1]: NOT_LEADER_FOR_PARTITION"))
			return
		}
		go done(0, nil)
	})
	if r.Issued != 200 || r.Acked != 170 || r.Errors != 30 || r.Unfinished != 0 || r.Latency.Count() != 20 ||
		r.FirstError != "t[1]: NOT_LEADER_FOR_PARTITION" {
		t.Fatalf("%+v count %d", r, r.Latency.Count())
	}
	if gap := last.Sub(first); gap != 190*time.Millisecond {
		t.Errorf("the 20th request due %v after the first, want 190ms", gap)
	}
}

// TestRawOpenLoopShowsStall: the raw engine measures from the due time
// too; a 400 ms stall of the broker is in its p99 although at most 16
// requests were in flight during it (the others waited in the generator,
// and that wait counts).
func TestRawOpenLoopShowsStall(t *testing.T) {
	const stall = 400 * time.Millisecond
	c, armed := stallingCluster(t, stall)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := Workload{RecordSize: 100, Codec: "none", Acks: "all", Partitions: 1, Rate: 2000, Duration: 2 * time.Second, Drain: 10 * time.Second}
	go func() { time.Sleep(time.Second); armed.Store(true) }()
	res, err := RawProduce(ctx, c.ListenAddrs()[0], "t", w, RawOptions{Connections: 1, BatchRecords: 10, Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	l, s := res.Load, res.Load.Latency.Summary()
	t.Logf("%d acked, %s, send lag p99 %s", l.Acked, s, fmtMs(l.SendLag.Summary().P99))
	if l.Errors != 0 || l.Unfinished != 0 || l.Acked != 4000 {
		t.Fatalf("%+v", l)
	}
	// 200 requests/s for 400 ms: ~80 of 400 requests were due in the stall.
	if s.P99 < 0.7*float64(stall.Milliseconds()) || s.P90 < 50 {
		t.Errorf("the raw open loop must show the stall: %s", s)
	}
	// 32 requests fit in flight and queued; the rest of the stall the loop
	// waited for the broker, and says so (its lag is not the generator's).
	if l.Backpressure < 100*time.Millisecond {
		t.Errorf("backpressure %v during a %v stall", l.Backpressure, stall)
	}
}
