package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/stream"
	"github.com/sushka-io/sushka/stream/kafka"
	"github.com/sushka-io/sushka/stream/streamtest"
)

// A delivery mode under test: every exactly-once test also runs its
// scenario at least once and requires duplicates there, which shows the
// scenario produces the failure that the transactions prevent.
type deliveryMode struct {
	name        string
	exactlyOnce bool
}

var deliveryModes = []deliveryMode{{"exactly-once", true}, {"at-least-once", false}}

// modeTransport is the transport of mode; id is the instance's
// transactional id.
func modeTransport(addr string, mode deliveryMode, id string, commitInterval time.Duration, consumerOpts ...kgo.Opt) *kafka.Kafka {
	opts := []kafka.Option{
		kafka.ConsumerOpts(append([]kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}, consumerOpts...)...),
		kafka.CommitInterval(commitInterval),
	}
	if mode.exactlyOnce {
		opts = append(opts, kafka.ExactlyOnce(id))
	}
	return kafka.New([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.TransactionTimeout(3 * time.Second)}, opts...)
}

// publishInputs writes "0".."n-1" to topic, keyed, spread over its
// partitions.
func publishInputs(t *testing.T, addr, topic string, n int) {
	t.Helper()
	tr := kafka.Transport(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation())
	defer tr.Close()
	for i := range n {
		rec := &stream.Record{Topic: topic, Partition: stream.AnyPartition, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
		if err := tr.Producer().Publish(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
}

// readCommitted reads topic from the start with read_committed until it
// has want distinct values and then for settle more (for late
// duplicates); it returns how often each value appeared.
func readCommitted(t *testing.T, addr, topic string, want int, settle time.Duration) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	counts := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	var settled time.Time
	for {
		now := time.Now()
		if !settled.IsZero() && !now.Before(settled) {
			return counts
		}
		if now.After(deadline) {
			t.Fatalf("read_committed %s: %d distinct values after 60 s, want %d", topic, len(counts), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { counts[string(r.Value)]++ })
		cancel()
		if settled.IsZero() && len(counts) >= want {
			settled = time.Now().Add(settle)
		}
	}
}

// checkOnce fails unless counts holds "r0".."r(n-1)" and, for
// exactly-once, each once; for at-least-once it requires a duplicate.
func checkOnce(t *testing.T, mode deliveryMode, counts map[string]int, n int) {
	checkResults(t, mode, counts, n, true)
}

// checkResults is checkOnce, requiring a duplicate at least once only if
// duplicatesExpected.
func checkResults(t *testing.T, mode deliveryMode, counts map[string]int, n int, duplicatesExpected bool) {
	t.Helper()
	duplicates := 0
	for i := range n {
		c := counts["r"+strconv.Itoa(i)]
		if c == 0 {
			t.Errorf("result r%d missing", i)
		}
		duplicates += max(c-1, 0)
	}
	if len(counts) != n {
		t.Errorf("%d distinct results, want %d", len(counts), n)
	}
	t.Logf("%s: %d results, %d duplicates", mode.name, n, duplicates)
	switch {
	case mode.exactlyOnce && duplicates > 0:
		t.Errorf("exactly-once: %d duplicate results visible to read_committed", duplicates)
	case !mode.exactlyOnce && duplicatesExpected && duplicates == 0:
		t.Errorf("at-least-once showed no duplicate: the scenario does not exercise what exactly-once prevents")
	}
}

// shutdownRace reports whether err is nil or what a 5 ms ShutdownTimeout
// may make of a shutdown: handlers abandoned, or the last commit (a
// transaction, under the same deadline) cut short, which only means the
// next owner redelivers.
func shutdownRace(err error) bool {
	return err == nil || errors.Is(err, stream.ErrShutdownTimeout) || errors.Is(err, context.DeadlineExceeded)
}

func runApp(app *stream.App) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	return func() error { cancel(); return <-done }
}

// TestExactlyOnceNack: a handler publishes its result and then fails the
// first attempt of every third message, with key lanes so that several
// messages of a partition are in flight. The failed attempt's publish is
// never visible to read_committed; the redelivery's result appears once.
func TestExactlyOnceNack(t *testing.T) { testFailedAttempts(t) }

// TestExactlyOnceRetry: the same with the Retry middleware, which runs the
// handler again within one delivery: the failed attempt's publish is
// replaced by the next attempt's.
func TestExactlyOnceRetry(t *testing.T) {
	testFailedAttempts(t, stream.WithMiddleware(stream.Retry(stream.RetryPolicy{InitialInterval: time.Millisecond})))
}

func testFailedAttempts(t *testing.T, opts ...stream.HandlerOption) {
	for _, mode := range deliveryModes {
		t.Run(mode.name, func(t *testing.T) {
			addr := streamtest.StartSushka(t, 3)
			const n = 60
			publishInputs(t, addr, "in", n)
			app := stream.New(modeTransport(addr, mode, "attempts-1", 50*time.Millisecond),
				stream.Group("g"), stream.RedeliveryBackoff(time.Millisecond))
			results := stream.NewPublisher[string](app, "out", nil)
			var mu sync.Mutex
			failed := map[string]bool{}
			stream.Consume(app, "in", func(ctx context.Context, v string) error {
				if err := results.PublishWith(ctx, stream.Envelope{Key: []byte(v)}, "r"+v); err != nil {
					return err
				}
				i, _ := strconv.Atoi(v)
				mu.Lock()
				defer mu.Unlock()
				if i%3 == 0 && !failed[v] {
					failed[v] = true
					return errors.New("injected failure after the publish")
				}
				return nil
			}, append([]stream.HandlerOption{stream.KeyConcurrency(4)}, opts...)...)
			stop := runApp(app)
			counts := readCommitted(t, addr, "out", n, time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			checkOnce(t, mode, counts, n)
		})
	}
}

// killedAppEnv names, for the helper process, the broker to use and the
// mode; TestExactlyOnceKill re-runs the test binary as that process.
const killedAppEnv = "SUSHKA_STREAM_EOS_KILLED_APP"

// billingApp is the App of the kill test: Handle with PublishTo, nothing
// transactional in the handler.
func billingApp(tr stream.Transport) *stream.App {
	app := stream.New(tr, stream.Group("billing"), stream.ShutdownTimeout(2*time.Second))
	stream.Handle(app, "in", func(ctx context.Context, v string) (string, error) {
		time.Sleep(2 * time.Millisecond)
		return "r" + v, nil
	}, stream.PublishTo("out"))
	return app
}

// TestKilledAppProcess is the process TestExactlyOnceKill kills: it runs
// billingApp until SIGKILL, from the test or, with atCommit, its own at
// its third offset commit: for exactly once right after writing the
// TxnOffsetCommit, inside the transaction, before its EndTxn.
func TestKilledAppProcess(t *testing.T) {
	env := os.Getenv(killedAppEnv)
	if env == "" {
		t.Skip("run by TestExactlyOnceKill")
	}
	var addr string
	var eos, atCommit bool
	if _, err := fmt.Sscanf(env, "%s %t %t", &addr, &eos, &atCommit); err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SessionTimeout(6 * time.Second)}
	if atCommit {
		opts = append(opts, kgo.WithHooks(&killAtCommit{}))
	}
	tr := modeTransport(addr, deliveryMode{exactlyOnce: eos}, "killed", 200*time.Millisecond, opts...)
	_ = billingApp(tr).Run(context.Background())
}

// killAtCommit kills its process when the consumer has written its third
// OffsetCommit or TxnOffsetCommit request.
type killAtCommit struct{ commits atomic.Int32 }

func (k *killAtCommit) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && (key == int16(kmsg.OffsetCommit) || key == int16(kmsg.TxnOffsetCommit)) && k.commits.Add(1) == 3 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

// TestExactlyOnceKill: an App is killed (SIGKILL: at a random moment, or
// inside a transaction right after its TxnOffsetCommit) with results
// published and offsets not yet committed, and a second App takes over
// its group. read_committed sees every input's result exactly once: the
// killed App's open transaction is aborted (its timeout), its committed
// ones hold offsets and results together.
func TestExactlyOnceKill(t *testing.T) {
	for _, atCommit := range []bool{false, true} {
		for _, mode := range deliveryModes {
			name := mode.name + "/killed-at-random"
			if atCommit {
				name = mode.name + "/killed-inside-commit"
			}
			t.Run(name, func(t *testing.T) {
				addr := streamtest.StartSushka(t, 3)
				const n = 600
				publishInputs(t, addr, "in", n)
				child := exec.Command(os.Args[0], "-test.run=^TestKilledAppProcess$", "-test.count=1")
				child.Env = append(os.Environ(), fmt.Sprintf("%s=%s %t %t", killedAppEnv, addr, mode.exactlyOnce, atCommit))
				child.Stdout, child.Stderr = os.Stderr, os.Stderr
				if err := child.Start(); err != nil {
					t.Fatal(err)
				}
				defer child.Process.Kill() //nolint:errcheck // already dead, normally
				if atCommit {
					exited := make(chan error, 1)
					go func() { exited <- child.Wait() }()
					select {
					case err := <-exited:
						if err == nil {
							t.Fatal("the App process ended without being killed at its commit")
						}
					case <-time.After(30 * time.Second):
						t.Fatal("the App process was not killed at its third commit within 30 s")
					}
				} else {
					readCommitted(t, addr, "out", n/4, 0) // kill once results are visible, mid-run
					if err := child.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					_ = child.Wait()
				}
				stop := runApp(billingApp(modeTransport(addr, mode, "successor", 50*time.Millisecond, kgo.SessionTimeout(6*time.Second))))
				counts := readCommitted(t, addr, "out", n, time.Second)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				// Killed as its OffsetCommit leaves, at least once loses
				// only the few results published after the commit's
				// snapshot of marks: its duplicates are shown by the
				// random kill.
				checkResults(t, mode, counts, n, !atCommit)
			})
		}
	}
}

// TestExactlyOnceRebalance: a second App joins the group mid-run and
// leaves again. The handler publishes its result and then works on,
// honouring its context; the revocation's deadline abandons the in-flight
// messages of the partitions that move, which the new owner handles
// again. Their first publishes must not be visible, also when the
// partitions come back to the App that buffered them.
func TestExactlyOnceRebalance(t *testing.T) {
	for _, mode := range deliveryModes {
		t.Run(mode.name, func(t *testing.T) {
			addr := streamtest.StartSushka(t, 3)
			const n = 300
			publishInputs(t, addr, "in", n)
			var mu sync.Mutex
			handledBy := map[string]int{}
			build := func(name string) *stream.App {
				app := stream.New(modeTransport(addr, mode, name, 50*time.Millisecond),
					stream.Group("g"), stream.ShutdownTimeout(5*time.Millisecond))
				results := stream.NewPublisher[string](app, "out", nil)
				stream.Consume(app, "in", func(ctx context.Context, v string) error {
					if err := results.Publish(ctx, "r"+v); err != nil {
						return err
					}
					select { // the rest of the work
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
						return ctx.Err()
					}
					mu.Lock()
					handledBy[name]++
					mu.Unlock()
					return nil
				}, stream.KeyConcurrency(2))
				return app
			}
			stop1 := runApp(build("first"))
			waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return handledBy["first"] >= 20 }, "the first App to handle 20")
			stop2 := runApp(build("second"))
			// Partitions move to the second App and, when it leaves, back
			// to the first: the first must not send what it buffered for
			// them before they moved.
			waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return handledBy["second"] >= 20 }, "the second App to handle 20")
			if err := stop2(); !shutdownRace(err) {
				t.Error(err)
			}
			counts := readCommitted(t, addr, "out", n, time.Second)
			if err := stop1(); !shutdownRace(err) {
				t.Error(err)
			}
			mu.Lock()
			t.Logf("handled by App: %v", handledBy)
			if handledBy["second"] == 0 {
				t.Error("the second App handled nothing: no rebalance happened mid-run")
			}
			mu.Unlock()
			checkOnce(t, mode, counts, n)
		})
	}
}
