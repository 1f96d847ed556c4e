package history

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/internal/vfs"
	"github.com/sushka-io/sushka/test/testbroker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerChildEnv makes the test binary a Sushka broker ("addr,dataDir")
// that the parent kills with SIGKILL: the broker package served on the
// OS filesystem, as `sushka serve` serves it, without building the binary.
const brokerChildEnv = "SUSHKA_HISTORY_BROKER_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(brokerChildEnv); spec != "" {
		runBrokerChild(spec)
		return
	}
	os.Exit(m.Run())
}

func runBrokerChild(spec string) {
	addr, dataDir, _ := strings.Cut(spec, ",")
	b, err := broker.New(broker.Config{DataDir: dataDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "serve:", b.Serve(l))
	os.Exit(1)
}

// childBroker is the test binary serving a broker on addr and dataDir.
type childBroker struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  strings.Builder
}

func startChildBroker(t *testing.T, addr, dataDir string) *childBroker {
	t.Helper()
	c := &childBroker{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), brokerChildEnv+"="+addr+","+dataDir)
	c.cmd.Stderr = &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	waitListening(t, addr, c.done)
	return c
}

func (c *childBroker) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func waitListening(t *testing.T, addr string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("the broker on %s exited at start-up", addr)
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no broker listening on %s after 20 s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a 127.0.0.1 address free a moment ago; the broker is
// restarted on it, so that the clients' seed stays valid.
func freeAddr(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))
}

const runTopic = "hist"

// workload is the run of the real tests: two idempotent acks=all
// producers, two members of group "g" and one consumer assigned every
// partition, recording into rec, while faults (a func the test passes)
// happen; then the producers flush and every consumer reads the topic to
// its end, and the group's committed offsets are fetched.
type workload struct {
	rec       *Recorder
	addr      string
	producers []*Producer
	consumers []*Consumer
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startWorkload(t *testing.T, addr string) *workload {
	t.Helper()
	w := &workload{rec: NewRecorder(), addr: addr, stop: make(chan struct{})}
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 3, 1, nil, runTopic); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	common := []kgo.Opt{kgo.SeedBrokers(addr), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })}
	for i := range 2 {
		p, err := NewProducer(w.rec, fmt.Sprintf("p%d", i+1), append(common, kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))...)
		if err != nil {
			t.Fatal(err)
		}
		w.producers = append(w.producers, p)
	}
	fromStart := kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())
	for i := range 2 {
		c, err := NewConsumer(w.rec, fmt.Sprintf("g%d", i+1), "g", append(common, kgo.ConsumeTopics(runTopic), fromStart,
			kgo.FetchMaxWait(100*time.Millisecond), kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(300*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		w.consumers = append(w.consumers, c)
	}
	c, err := NewConsumer(w.rec, "assigned", "", append(common, fromStart, kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{runTopic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	w.consumers = append(w.consumers, c)
	for _, p := range w.producers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			produceCtx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-w.stop; cancel() }()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				case <-time.After(time.Millisecond):
				}
				p.Produce(produceCtx, runTopic, fmt.Sprintf("%s-%d", p.name, i))
			}
		}()
	}
	for _, c := range w.consumers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				if _, err := c.Poll(ctx); err != nil && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond) // the broker is down: kgo retries
				}
				cancel()
			}
		}()
	}
	return w
}

// waitProgress waits until n more produces are acknowledged (the clients
// found the broker again), for up to 20 s.
func (w *workload) waitProgress(t *testing.T, n int) {
	t.Helper()
	count := func() int {
		acks := 0
		for _, e := range w.rec.Events() {
			if e.Type == OK {
				acks++
			}
		}
		return acks
	}
	start, deadline := count(), time.Now().Add(20*time.Second)
	for count() < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d produces acknowledged in 20 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish stops producing, flushes (every record acknowledged or failed),
// drains every consumer to the end and fetches the group's offsets.
func (w *workload) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range w.producers {
		if err := p.Client.Flush(ctx); err != nil {
			t.Logf("flush of %s: %v", p.name, err)
		}
		p.Close()
	}
	var drains sync.WaitGroup
	errs := make(chan error, len(w.consumers))
	for _, c := range w.consumers {
		drains.Add(1)
		go func() {
			defer drains.Done()
			if err := c.Drain(ctx, runTopic); err != nil {
				errs <- fmt.Errorf("%s: %w", c.name, err)
			}
		}()
	}
	drains.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := w.consumers[0].FetchCommitted(ctx); err != nil {
		t.Error(err)
	}
	for _, c := range w.consumers {
		c.Close()
	}
}

// TestRealRunKilledTwice: a broker in a child process, SIGKILLed twice
// during acks=all production and restarted on its data directory; the
// history of two idempotent producers and three consumers is clean.
func TestRealRunKilledTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills broker processes")
	}
	addr, dataDir := freeAddr(t), t.TempDir()
	b := startChildBroker(t, addr, dataDir)
	w := startWorkload(t, addr)
	var kills []int64 // when, on the recorder's clock
	for range 2 {
		w.waitProgress(t, 200)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		b.kill()
		kills = append(kills, time.Since(w.rec.start).Nanoseconds())
		b = startChildBroker(t, addr, dataDir)
	}
	w.waitProgress(t, 200)
	w.finish(t)
	rep := Require(t, w.rec, Options{})
	// The kills must have fallen during production: records acknowledged
	// in each of the three lives of the broker.
	perLife := make([]int, len(kills)+1)
	for _, e := range w.rec.Events() {
		if e.Type == OK {
			perLife[sort.Search(len(kills), func(i int) bool { return kills[i] > e.Time })]++
		}
	}
	if slices.Contains(perLife, 0) || rep.Stats.Reads < 2*rep.Stats.Acknowledged || rep.Stats.Commits == 0 {
		t.Fatalf("too little happened to check: acknowledged per life of the broker %v, %+v", perLife, rep.Stats)
	}
	t.Logf("acknowledged per life of the broker: %v", perLife)
}

// lyingFS acknowledges every Sync of files under a partition directory of
// the run's topic without doing it: a disk that loses what the broker
// acknowledged at a power loss.
type lyingFS struct{ vfs.FS }

type lyingFile struct{ vfs.File }

func (lyingFile) Sync() error { return nil }

func (fs lyingFS) lie(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(name, "/"+runTopic+"-") {
		return f, err
	}
	return lyingFile{f}, nil
}

func (fs lyingFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.lie(name, f, err)
}

func (fs lyingFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	return fs.lie(name, f, err)
}

// inProcessBroker serves the broker package on fs at addr.
func inProcessBroker(t *testing.T, fs vfs.FS, addr string) (stop func()) {
	t.Helper()
	b, err := broker.New(broker.Config{FS: fs, DataDir: "/data", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Shutdown(ctx)
			<-served
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRealRunCatchesLyingDisk: the same workload against a broker whose
// disk acknowledges fsyncs of the partition logs without doing them; a
// power loss (the in-memory filesystem's durable image) in the middle of
// production loses acknowledged records, and the checker must say so.
func TestRealRunCatchesLyingDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("a real run")
	}
	addr, mem := freeAddr(t), vfs.NewMem()
	stop := inProcessBroker(t, lyingFS{mem}, addr)
	w := startWorkload(t, addr)
	time.Sleep(800 * time.Millisecond)
	image := mem.Crash(nil) // the power goes: only what was synced survives
	stop()
	inProcessBroker(t, lyingFS{image}, addr)
	time.Sleep(500 * time.Millisecond)
	w.finish(t)
	rep := Check(w.rec.Events(), Options{})
	t.Logf("%s", rep)
	if rep.OK() {
		t.Fatal("the checker passed a run whose acknowledged records a power loss took")
	}
	kinds := map[Kind]bool{}
	for _, a := range rep.Anomalies {
		kinds[a.Kind] = true
	}
	if !kinds[LostWrite] && !kinds[Unseen] {
		t.Fatalf("no lost or unseen acknowledged record among %v", kinds)
	}
}
