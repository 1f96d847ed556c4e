package streambench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
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
	// Messages is the most the run publishes; Duration, when positive,
	// ends publishing once the window (from the first record received)
	// has lasted that long, so that a run lasts it whatever the machine's
	// pace. The run then consumes exactly what was published.
	Messages   int
	Duration   time.Duration
	Payloads   *Payloads
	Partitions int32
	// Publishers is the number of goroutines publishing concurrently,
	// each one message at a time through the loop's publisher.
	Publishers int
}

// Result is what a run measured.
type Result struct {
	// Published is how many messages the run published: 0..Published-1.
	Published int
	Received  int
	Checksum  int64
	// Window is from the return of the poll that delivered the first
	// record to the return of the consumer's close (the commit of the
	// last offset).
	Window time.Duration
	// PollWait is the time the polling goroutine spent blocked in its
	// poll within the window, until the last message was handled.
	PollWait time.Duration
}

// Check reports whether the run delivered every message exactly once.
func (r Result) Check(run *Run) error {
	if want := run.Payloads.Checksum(r.Published); r.Published == 0 || r.Received != r.Published || r.Checksum != want {
		return fmt.Errorf("received %d messages with checksum %d, published %d with %d", r.Received, r.Checksum, r.Published, want)
	}
	if r.Window <= 0 || r.PollWait < 0 || r.PollWait > r.Window {
		return fmt.Errorf("impossible window %v with poll wait %v: the measurer is broken", r.Window, r.PollWait)
	}
	return nil
}

// meter is what every loop reports to: the handler's count and checksum,
// the poll's wait, the window's start. handled and polled may be called
// from any goroutine; polled from one at a time.
type meter struct {
	// total is what the run published: unbounded until the publishers
	// have returned (setTotal).
	total    atomic.Int64
	received atomic.Int64
	checksum atomic.Int64
	// done is closed when the last message has been handled.
	done     chan struct{}
	doneOnce sync.Once
	doneAt   atomic.Int64 // unix nanoseconds, set before done is closed
	firstAt  atomic.Int64 // unix nanoseconds of the first poll that returned records
	pollWait atomic.Int64 // nanoseconds
	// published is set once the publishers have returned.
	published atomic.Int64
}

func newMeter() *meter {
	m := &meter{done: make(chan struct{})}
	m.total.Store(math.MaxInt64)
	return m
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

// windowLasted reports whether d has passed since the first record.
func (m *meter) windowLasted(d time.Duration) bool {
	f := m.firstAt.Load()
	return f != 0 && time.Now().UnixNano()-f >= int64(d)
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
// records. A poll before the first record is the wait for the publishers,
// not the broker's pace, and a poll's time after the last message was
// handled is not waiting for anything: neither counts.
func (m *meter) polled(start time.Time, records int) {
	end := time.Now().UnixNano()
	if m.firstAt.Load() == 0 {
		if records > 0 {
			m.firstAt.Store(end)
		}
		return
	}
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
		r.Window = time.Duration(time.Now().UnixNano() - f)
	}
	return r
}

// publish publishes messages 0, 1, 2... from run.Publishers goroutines
// through one, until run.Messages or, with run.Duration, until the window
// has lasted that long; then it tells m how many it published (setTotal)
// and the returned channel yields the first error (or nil). Each
// publisher checks the end before it takes the next index, and publishes
// every index it takes, so what was published is exactly 0..n-1.
func publish(ctx context.Context, run *Run, m *meter, one func(ctx context.Context, key, value []byte) error) <-chan error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range max(run.Publishers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if run.Duration > 0 && m.windowLasted(run.Duration) {
					return
				}
				i := int(next.Add(1) - 1)
				if i >= run.Messages {
					return
				}
				key, value := run.Payloads.Message(i)
				if err := one(ctx, key, value); err != nil {
					once.Do(func() { first = fmt.Errorf("publish message %d: %w", i, err) })
					return
				}
			}
		}()
	}
	out := make(chan error, 1)
	go func() {
		wg.Wait()
		published := min(int(next.Load()), run.Messages)
		m.published.Store(int64(published))
		if first != nil {
			published = 0 // ends the run now: its error says why
		}
		m.setTotal(published)
		out <- first
	}()
	return out
}

// errNotDelivered is the end of a run whose messages did not all arrive.
var errNotDelivered = errors.New("streambench: not every message was delivered before the run's deadline")
