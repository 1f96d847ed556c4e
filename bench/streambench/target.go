package streambench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/bench"
)

// Loop names one of the three loops.
type Loop int

const (
	Raw Loop = iota
	Adapter
	Framework
)

// Loops is the order of a round: R A F.
var Loops = [...]Loop{Raw, Adapter, Framework}

func (l Loop) String() string {
	switch l {
	case Raw:
		return "raw"
	case Adapter:
		return "adapter"
	case Framework:
		return "framework"
	}
	return "unknown"
}

// A Target is one broker with its three loops. Each loop call is one run:
// it creates its own fresh topic (stream, subject) and group named after
// run.Name, subscribes, publishes run.Messages messages from run.Payloads
// once subscribed, consumes them all, and reports the run's Result.
type Target interface {
	// Name is the target's short name in the table ("sushka", "kafka").
	Name() string
	// Describe says what the broker is and how it runs, with its
	// durability, for the passport.
	Describe() string
	// Client names the client library and its version.
	Client() string
	// Partitions is how many partitions a run's topic gets when asked for
	// requested (JetStream: one, a subject has no partitions).
	Partitions(requested int32) int32
	RunLoop(ctx context.Context, loop Loop, run *Run) (Result, error)
	Close() error
}

// Run is what one loop run is asked to do.
type Run struct {
	Scenario Scenario
	// Name is unique per run: the loop names its topic and group after it.
	Name string
	// Messages is the backlog: the shared generator publishes messages
	// 0..Messages-1 into the run's fresh topic before the loop starts, and
	// the loop consumes exactly those. (A publish scenario ignores it.)
	Messages   int
	Payloads   *Payloads
	Partitions int32
	// Publishers and Duration are the publish scenario's: that many
	// goroutines publish one message at a time each through the loop's
	// publisher until Duration has passed.
	Publishers int
	Duration   time.Duration
	// CPUProfile, when set, is the file of a CPU profile of the consumer
	// loop, from after the backlog is published to the loop's return.
	CPUProfile string
}

// Result is what a run measured.
type Result struct {
	// Published is how many messages the run published: 0..Published-1.
	Published int
	Received  int
	Checksum  int64
	// Window is from the return of the poll that delivered the first
	// record to the return of the consumer's close (the commit of the
	// last offset); in a publish scenario, from the first publish to the
	// return of the last.
	Window time.Duration
	// PollWait is the time the polling goroutine spent blocked in its
	// poll within the window, until the last message was handled.
	PollWait time.Duration
	// AfterPublish is from the publishers' stop to the window's end: how
	// long the consumer still had work once nothing more was published.
	// Negative when the publishers stopped after the window's end.
	AfterPublish time.Duration
	// CPU is the generator process's user+system CPU time within the
	// window (the consumer loop alone: the backlog was published before),
	// and BrokerCPU the broker process's, when it can be read.
	CPU, BrokerCPU time.Duration
	BrokerCPUOK    bool
	// Diagnostics explain CPU (consumer loops only).
	Diagnostics Diagnostics
}

// PublishBoundSlack is how close to the publishers' stop a window may end
// for its round to count as publish-bound: its consumer had kept up, so
// the window measured the publishers, not the consumer.
const PublishBoundSlack = 25 * time.Millisecond

// PublishBound reports whether the run's consumer only kept pace with its
// publishers (its window ended within PublishBoundSlack of their stop).
func (r Result) PublishBound() bool { return r.AfterPublish < PublishBoundSlack }

// Check reports whether the run delivered every message exactly once.
func (r Result) Check(run *Run) error {
	if run.Scenario.Publish {
		if r.Published == 0 || r.Received != r.Published {
			return fmt.Errorf("published %d messages, the broker holds %d", r.Published, r.Received)
		}
	} else if want := run.Payloads.Checksum(r.Published); r.Published == 0 || r.Received != r.Published || r.Checksum != want {
		return fmt.Errorf("received %d messages with checksum %d, published %d with %d", r.Received, r.Checksum, r.Published, want)
	}
	if r.Window <= 0 || r.PollWait < 0 || r.PollWait > r.Window || r.CPU < 0 || r.BrokerCPU < 0 {
		return fmt.Errorf("impossible window %v with poll wait %v, CPU %v, broker CPU %v: the measurer is broken", r.Window, r.PollWait, r.CPU, r.BrokerCPU)
	}
	return nil
}

// meter is what every loop reports to: the handler's count and checksum,
// the poll's wait, the window's start. handled and polled may be called
// from any goroutine; polled from one at a time.
type meter struct {
	// total is what the run published (setTotal).
	total    atomic.Int64
	received atomic.Int64
	checksum atomic.Int64
	// done is closed when the last message has been handled.
	done     chan struct{}
	doneOnce sync.Once
	doneAt   atomic.Int64 // unix nanoseconds, set before done is closed
	firstAt  atomic.Int64 // unix nanoseconds of the first poll that returned records
	pollWait atomic.Int64 // nanoseconds
	// published is set once the publishers have returned, publishedAt
	// (unix nanoseconds) when.
	published   atomic.Int64
	publishedAt atomic.Int64
	// cpu is the generator's and the broker's CPU clocks, read when the
	// window opens (cpuAtFirst, set before firstAt) and when it closes.
	cpu         cpuClock
	cpuAtFirst  cpuReading
	diagAtFirst diagReading
}

func newMeter(cpu cpuClock) *meter {
	m := &meter{done: make(chan struct{}), cpu: cpu}
	m.total.Store(math.MaxInt64)
	return m
}

// backlog says that n messages were published, all before the consumer
// started: the run ends when it has handled n.
func (m *meter) backlog(n int) {
	m.published.Store(int64(n))
	m.publishedAt.Store(time.Now().UnixNano())
	m.setTotal(n)
}

// setTotal says how many messages were published. Whichever comes last,
// the last handled message or this, sees both counts and ends the run.
func (m *meter) setTotal(n int) {
	m.total.Store(int64(n))
	if m.received.Load() >= int64(n) {
		m.finish()
	}
}

func (m *meter) finish() {
	m.doneOnce.Do(func() {
		m.doneAt.Store(time.Now().UnixNano())
		close(m.done)
	})
}

// handled counts one decoded order by its ID: the decoded result is kept
// alive in the checksum, which the run verifies. (An ID, not a pointer:
// the framework's handler gets its Order by value, and taking its address
// would move it to the heap in that loop only.)
func (m *meter) handled(id int64) {
	m.checksum.Add(id)
	if m.received.Add(1) >= m.total.Load() {
		m.finish()
	}
}

// polled accounts one poll that started at start and returned records
// records. A poll before the first record is the consumer's start (the
// group's join, the first fetch), not the broker's pace, and a poll's time
// after the last message was handled is not waiting for anything: neither
// counts.
func (m *meter) polled(start time.Time, records int) {
	if m.firstAt.Load() == 0 {
		if records > 0 {
			m.diagAtFirst = readDiag()
			m.cpuAtFirst = m.cpu.read()
			m.firstAt.Store(time.Now().UnixNano())
		}
		return
	}
	end := time.Now().UnixNano()
	if d := m.doneAt.Load(); d != 0 && d < end {
		end = d
	}
	if w := end - start.UnixNano(); w > 0 {
		m.pollWait.Add(w)
	}
}

// finished is the run's Result with the window closed now.
func (m *meter) finished() Result {
	r := Result{Published: int(m.published.Load()), Received: int(m.received.Load()), Checksum: m.checksum.Load(),
		PollWait: time.Duration(m.pollWait.Load())}
	if f := m.firstAt.Load(); f != 0 {
		cpu := m.cpu.read()
		r.Diagnostics = readDiag().since(m.diagAtFirst)
		now := time.Now().UnixNano()
		r.Window = time.Duration(now - f)
		if p := m.publishedAt.Load(); p != 0 {
			r.AfterPublish = time.Duration(now - p)
		}
		r.CPU, r.BrokerCPU, r.BrokerCPUOK = cpu.since(m.cpuAtFirst)
	}
	return r
}

// cpuClock reads this process's CPU time and, when brokerPID is set, the
// broker's (bench.ProcCPU: /proc/PID/stat, 10 ms resolution, far below a
// window's seconds of CPU).
type cpuClock struct{ brokerPID string }

type cpuReading struct {
	self, broker time.Duration
	selfOK       bool
	brokerOK     bool
}

func (c cpuClock) read() cpuReading {
	var r cpuReading
	var err error
	r.self, err = bench.ProcCPU("self")
	r.selfOK = err == nil
	if c.brokerPID != "" {
		r.broker, err = bench.ProcCPU(c.brokerPID)
		r.brokerOK = err == nil
	}
	return r
}

// since is the CPU used from start to r: the generator's (0 when it could
// not be read) and the broker's with whether it could be read.
func (r cpuReading) since(start cpuReading) (self, broker time.Duration, brokerOK bool) {
	if r.selfOK && start.selfOK {
		self = r.self - start.self
	}
	if r.brokerOK && start.brokerOK {
		return self, r.broker - start.broker, true
	}
	return self, 0, false
}

// publishFor is the publish scenario's loop: run.Publishers goroutines
// publish messages 0, 1, 2... one at a time each through one, until
// run.Duration has passed since the first began; the window runs from
// then to the return of the last publish. Each publisher checks the end
// before it takes the next index and publishes every index it takes, so
// what was published is exactly 0..n-1 (Published). The caller counts
// what the broker holds (Received).
func publishFor(ctx context.Context, run *Run, cpu cpuClock, one func(ctx context.Context, key, value []byte) error) (Result, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	cpu0 := cpu.read()
	start := time.Now()
	deadline := start.Add(run.Duration)
	for range max(run.Publishers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := int(next.Add(1) - 1)
				key, value := run.Payloads.Message(i)
				if err := one(ctx, key, value); err != nil {
					once.Do(func() { first = fmt.Errorf("publish message %d: %w", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	res := Result{Published: int(next.Load()), Window: time.Since(start)}
	res.CPU, res.BrokerCPU, res.BrokerCPUOK = cpu.read().since(cpu0)
	return res, first
}

// errNotDelivered is the end of a run whose messages did not all arrive.
var errNotDelivered = errors.New("streambench: not every message was delivered before the run's deadline")
