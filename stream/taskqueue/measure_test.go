package taskqueue_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamtest"
	"github.com/sushka-io/sushka/stream/taskqueue"
)

var (
	measure       = flag.Bool("taskqueue.measure", false, "run TestTaskQueueMeasure: the seed's M-103/M-105 table against in-process Sushka")
	measureWindow = flag.Duration("taskqueue.window", 10*time.Second, "TestTaskQueueMeasure: the measured window of each run")
	measureWarmup = flag.Duration("taskqueue.warmup", 3*time.Second, "TestTaskQueueMeasure: what runs before the window (workers joining, the queue filling)")
	measureOn     = flag.String("taskqueue.on", "sushka", "TestTaskQueueMeasure: sushka (in-process, one partition) or memory (the memory transport: no round trips)")
	measureOnly   = flag.Int("taskqueue.workers", 0, "TestTaskQueueMeasure: only this many workers (3 or 30; 0: both)")
)

// The seed's load (M-103, M-105): a task every 10 ms, 400 ms of work each.
const (
	measureTaskInterval = 10 * time.Millisecond
	measureWork         = 400 * time.Millisecond
)

// queueWindow is what the log says of one window: counted by replaying
// the topic (the seed's lesson: "attempts − completions" is not the number
// of lost claims; a task claimed before the window and finished inside it
// falls in one count and not the other).
type queueWindow struct {
	claims, won, done int
	seconds           float64
}

// tally replays records (the whole topic, in log order) and counts the
// claims, the winning claims and the completions whose timestamps fall in
// [from, to). The winner of a task is its first claim: the measured runs
// use a lease far longer than the run, so no lease ends.
func tally(records []*stream.Record, from, to time.Time) queueWindow {
	w := queueWindow{seconds: to.Sub(from).Seconds()}
	claimed := map[string]bool{}
	for _, r := range records {
		kind := ""
		for _, h := range r.Headers {
			if h.Key == "taskqueue-kind" {
				kind = string(h.Value)
			}
		}
		in := !r.Timestamp.Before(from) && r.Timestamp.Before(to)
		switch kind {
		case "claim":
			first := !claimed[string(r.Key)]
			claimed[string(r.Key)] = true
			if in {
				w.claims++
				if first {
					w.won++
				}
			}
		case "done":
			if in {
				w.done++
			}
		}
	}
	return w
}

// measuredLog is where a measurement runs: a transport per worker, and
// the whole topic in log order once nothing writes any more (the
// instrument: the log, not the workers' counters).
type measuredLog struct {
	name    string
	connect func() stream.Transport
	replay  func(t *testing.T, topic string) []*stream.Record
}

// sushkaLog is the in-process Sushka at addr, replayed by an observer
// client that reads the topic to its end.
func sushkaLog(addr string) measuredLog {
	return measuredLog{name: "in-process Sushka (one partition, acks=all)", connect: sushkaTransport(addr),
		replay: func(t *testing.T, topic string) []*stream.Record {
			observer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer observer.Close()
			// PollFetches waits for records, so a second without any is
			// the end (nothing writes any more).
			var records []*stream.Record
			for readUntil := time.Now().Add(30 * time.Second); ; {
				if time.Now().After(readUntil) {
					t.Fatalf("the observer still reads after 30 s (%d records)", len(records))
				}
				pollCtx, stopPoll := context.WithTimeout(context.Background(), time.Second)
				fetches := observer.PollFetches(pollCtx)
				stopPoll()
				if fetches.NumRecords() == 0 && len(records) > 0 {
					return records
				}
				fetches.EachRecord(func(r *kgo.Record) {
					sr := &stream.Record{Key: r.Key, Timestamp: r.Timestamp}
					for _, h := range r.Headers {
						sr.Headers = append(sr.Headers, stream.Header{Key: h.Key, Value: h.Value})
					}
					records = append(records, sr)
				})
			}
		}}
}

// memoryLog is the memory transport: the same workers with the log's
// round trips taken out (a claim is in the log when Publish returns),
// which separates what the pattern costs from what the broker and the
// machine's round trips add.
func memoryLog() measuredLog {
	store := memory.New(memory.Partitions(1))
	return measuredLog{name: "the memory transport", connect: store.Connect,
		replay: func(_ *testing.T, topic string) []*stream.Record { return store.Records(topic) }}
}

// measureRun runs workers on a fresh topic for warmup+window with the
// seed's load and returns the window's tally.
func measureRun(t *testing.T, log measuredLog, topic string, workers int, pick taskqueue.Pick) queueWindow {
	connect := log.connect
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var transports []stream.Transport
	defer func() {
		for _, tr := range transports {
			_ = tr.Close()
		}
	}()
	submitterTransport := connect()
	transports = append(transports, submitterTransport)
	submitter := taskqueue.New(submitterTransport, topic)
	if err := submitter.Submit(ctx, "task-0", nil); err != nil { // creates the topic before the workers look
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stats := make([]taskqueue.Stats, workers)
	errs := make([]error, workers)
	for w := range workers {
		tr := connect()
		transports = append(transports, tr)
		q := taskqueue.New(tr, topic)
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[w], errs[w] = q.Work(ctx, "w"+strconv.Itoa(w), pick, func(ctx context.Context, task taskqueue.Task) error {
				select {
				case <-time.After(measureWork):
				case <-ctx.Done():
				}
				return nil
			})
		}()
	}
	start := time.Now()
	from, to := start.Add(*measureWarmup), start.Add(*measureWarmup+*measureWindow)
	ticker := time.NewTicker(measureTaskInterval)
	for i := 1; time.Now().Before(to); i++ {
		<-ticker.C
		if err := submitter.Submit(ctx, "task-"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	ticker.Stop()
	// What the window's last claims wrote is in flight: let it land.
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	records := log.replay(t, topic)
	w := tally(records, from, to)
	// Impossible numbers mean a broken measurer (MEASURING.md, 10).
	var claimed, won, lost int
	for _, s := range stats {
		claimed, won, lost = claimed+s.Claims, won+s.Won, lost+s.Lost
		if s.Won+s.Lost > s.Claims || s.Expired != 0 {
			t.Fatalf("worker counts %+v: more outcomes than claims, or a lease ended", s)
		}
	}
	if w.won > w.claims || w.won == 0 {
		t.Fatalf("window %+v: no winning claim, or more winners than claims", w)
	}
	return w
}

// TestTaskQueueMeasure is the seed's measurement (M-103 three workers,
// M-105 thirty): claims per task, lost claims and throughput against the
// arithmetic ceiling, random pick against first, in pairs whose second
// runs in the opposite order, on one in-process Sushka. Behind a flag:
//
//	go test -run TestTaskQueueMeasure -taskqueue.measure -v ./stream/taskqueue/
func TestTaskQueueMeasure(t *testing.T) {
	if !*measure {
		t.Skip("a measurement: run with -taskqueue.measure")
	}
	var log measuredLog
	switch *measureOn {
	case "sushka":
		log = sushkaLog(streamtest.StartSushka(t, 1))
	case "memory":
		log = memoryLog()
	default:
		t.Fatalf("-taskqueue.on %q: sushka or memory", *measureOn)
	}
	type cell struct {
		workers int
		pick    taskqueue.Pick
	}
	pickName := map[taskqueue.Pick]string{taskqueue.PickRandom: "random", taskqueue.PickFirst: "first"}
	var plan []cell
	for _, workers := range []int{3, 30} {
		if *measureOnly != 0 && workers != *measureOnly {
			continue
		}
		plan = append(plan, cell{workers, taskqueue.PickRandom}, cell{workers, taskqueue.PickFirst},
			cell{workers, taskqueue.PickFirst}, cell{workers, taskqueue.PickRandom})
	}
	fmt.Printf("# taskqueue on %s, %s, GOMAXPROCS=%d; a task every %v, %v of work;\n# window %v after %v of warm-up; counts from the log's replay; loadavg %s\n",
		log.name, runtime.Version(), runtime.GOMAXPROCS(0), measureTaskInterval, measureWork, *measureWindow, *measureWarmup, loadavg())
	fmt.Printf("%-8s %-7s %8s %8s %10s %8s %12s %12s %9s\n", "workers", "pick", "claims", "won", "claims/task", "lost", "tasks/s", "ceiling/s", "of ceiling")
	for i, c := range plan {
		w := measureRun(t, log, "measure-"+strconv.Itoa(i), c.workers, c.pick)
		ceiling := min(float64(c.workers)/measureWork.Seconds(), 1/measureTaskInterval.Seconds())
		throughput := float64(w.done) / w.seconds
		fmt.Printf("%-8d %-7s %8d %8d %10.2f %7.1f%% %12.1f %12.1f %8.0f%%\n", c.workers, pickName[c.pick], w.claims, w.won,
			float64(w.claims)/float64(w.won), 100*float64(w.claims-w.won)/float64(w.claims), throughput, ceiling, 100*throughput/ceiling)
	}
}

// loadavg is /proc/loadavg's first three fields, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
