package taskqueue_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamtest"
	"github.com/sushka-io/sushka/stream/taskqueue"
)

// run starts workers on connect()'s transports, submits tasks and waits
// until every task has run; it checks that each ran exactly once and
// returns the workers' counts.
func run(t *testing.T, connect func() stream.Transport, workers, tasks int, work time.Duration, pick taskqueue.Pick) []taskqueue.Stats {
	t.Helper()
	var transports []stream.Transport
	open := func() stream.Transport {
		tr := connect()
		transports = append(transports, tr)
		return tr
	}
	defer func() {
		for _, tr := range transports {
			_ = tr.Close()
		}
	}()
	submitter := taskqueue.New(open(), "tasks")
	var mu sync.Mutex
	ranBy := map[string][]string{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stats := make([]taskqueue.Stats, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		q := taskqueue.New(open(), "tasks")
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "w" + strconv.Itoa(w)
			stats[w], errs[w] = q.Work(ctx, name, pick, func(ctx context.Context, task taskqueue.Task) error {
				time.Sleep(work)
				mu.Lock()
				ranBy[task.ID] = append(ranBy[task.ID], name)
				mu.Unlock()
				return nil
			})
		}()
	}
	for i := range tasks {
		if err := submitter.Submit(context.Background(), "task-"+strconv.Itoa(i), []byte("payload")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(ranBy)
		mu.Unlock()
		if n == tasks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks ran", n, tasks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	for id, by := range ranBy {
		if len(by) != 1 {
			t.Fatalf("task %s ran %d times (by %v): two workers believed they won", id, len(by), by)
		}
	}
	won := 0
	for _, s := range stats {
		won += s.Won
		if s.Won+s.Lost > s.Claims {
			t.Fatalf("worker counts %+v: more outcomes than claims", s)
		}
	}
	if won != tasks {
		t.Fatalf("%d claims won for %d tasks", won, tasks)
	}
	return stats
}

// sushkaTransport connects a new Kafka transport to the broker at addr
// each time it is called: one client per worker, as separate processes.
func sushkaTransport(addr string) func() stream.Transport {
	return func() stream.Transport {
		return kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation()},
			kafka.ConsumerOpts(kgo.FetchMaxWait(50*time.Millisecond)))
	}
}

func summary(stats []taskqueue.Stats) (claims, lost int) {
	for _, s := range stats {
		claims += s.Claims
		lost += s.Lost
	}
	return
}

func TestEveryTaskRunsOnceInMemory(t *testing.T) {
	for _, pick := range []taskqueue.Pick{taskqueue.PickRandom, taskqueue.PickFirst} {
		store := memory.New()
		stats := run(t, store.Connect, 5, 60, 2*time.Millisecond, pick)
		claims, lost := summary(stats)
		t.Logf("pick %d: %d claims for 60 tasks, %d lost", pick, claims, lost)
	}
}

// TestEveryTaskRunsOnceOnSushka: the same against an in-process broker,
// whose log order decides.
func TestEveryTaskRunsOnceOnSushka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := streamtest.StartSushka(t, 1)
	stats := run(t, sushkaTransport(addr), 3, 30, 5*time.Millisecond, taskqueue.PickRandom)
	claims, lost := summary(stats)
	t.Logf("3 workers, 30 tasks: %d claims, %d lost", claims, lost)
}

// TestLeaseWinnerThatDies: a winner that dies mid-task (its Work stops
// and it never writes a completion) holds its task for one lease only:
// after it, exactly one of the surviving workers claims the task again
// and runs it; before it, none does.
func TestLeaseWinnerThatDies(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		store := memory.New()
		testLeaseWinnerThatDies(t, store.Connect)
	})
	t.Run("sushka", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a broker")
		}
		testLeaseWinnerThatDies(t, sushkaTransport(streamtest.StartSushka(t, 1)))
	})
}

func testLeaseWinnerThatDies(t *testing.T, connect func() stream.Transport) {
	const lease = 400 * time.Millisecond
	var transports []stream.Transport
	open := func() *taskqueue.Queue {
		tr := connect()
		transports = append(transports, tr)
		return taskqueue.New(tr, "tasks", taskqueue.Lease(lease))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	release := make(chan struct{}) // the dead worker's fn returns only when the test is over
	stop := sync.OnceFunc(func() {
		cancel()
		close(release)
		wg.Wait()
	})
	defer func() {
		stop()
		for _, tr := range transports {
			_ = tr.Close()
		}
	}()
	if err := open().Submit(ctx, "task-0", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	// The first worker wins the only task and dies in the middle of it.
	started := make(chan time.Time, 1)
	dyingCtx, kill := context.WithCancel(ctx)
	dying := open()
	// The claim is made after Work begins and its lease counts from the
	// claim, so a survivor may run the task no earlier than a lease after
	// workStart (fn starts later than the claim: measuring from it would
	// leave the claim's round trip out).
	workStart := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = dying.Work(dyingCtx, "dying", taskqueue.PickRandom, func(context.Context, taskqueue.Task) error {
			started <- time.Now()
			kill()
			<-release
			return nil
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first worker never started the task")
	}
	// Two survivors: both see the dead worker's claim, both try when its
	// lease ends, exactly one wins.
	type run struct {
		worker string
		at     time.Time
	}
	ran := make(chan run, 2)
	stats := make([]taskqueue.Stats, 2)
	for i, name := range []string{"survivor-a", "survivor-b"} {
		q := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i], _ = q.Work(ctx, name, taskqueue.PickRandom, func(ctx context.Context, task taskqueue.Task) error {
				ran <- run{name, time.Now()}
				return nil
			})
		}()
	}
	select {
	case r := <-ran:
		if waited := r.at.Sub(workStart); waited < lease {
			t.Fatalf("%s ran the task %v after the winner began to work, within its lease of %v", r.worker, waited, lease)
		}
	case <-time.After(lease + 10*time.Second):
		t.Fatalf("no survivor ran the task of the dead winner (lease %v)", lease)
	}
	// Time for the other survivor's claim to come back and lose.
	time.Sleep(lease)
	select {
	case r := <-ran:
		t.Fatalf("%s ran the task too: two claims won one expired lease", r.worker)
	default:
	}
	stop()
	if won := stats[0].Won + stats[1].Won; won != 1 {
		t.Fatalf("survivors won %d claims (%+v), want 1", won, stats)
	}
}

// TestPickAfterCompletionSeesTheLog: a worker that finishes a task reads
// the log up to its completion before it picks again. Picking from the
// view it had before the task ran takes a task claimed meanwhile: with
// PickFirst and a backlog, every task then cost two claims (one lost).
func TestPickAfterCompletionSeesTheLog(t *testing.T) {
	store := memory.New()
	const tasks = 30
	stats := run(t, store.Connect, 3, tasks, 10*time.Millisecond, taskqueue.PickFirst)
	claims, lost := summary(stats)
	t.Logf("PickFirst, 3 workers, a backlog of %d: %d claims, %d lost", tasks, claims, lost)
	if lost > tasks/5 {
		t.Fatalf("%d claims lost for %d tasks: workers pick from a stale view of the log", lost, tasks)
	}
}
