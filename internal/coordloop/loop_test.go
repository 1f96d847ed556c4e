package coordloop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/kvlog"
)

var errClosed = errors.New("closed")

// echo answers each call with its request times ten at the end of its
// round, unless hold is set (then calls wait until Stop); it counts rounds.
type echo struct {
	mu       sync.Mutex
	l        *Loop[int, int]
	hold     bool
	ids      []uint64
	flushes  int
	perRound []int
	taken    int
	ticks    int
	deadline time.Time
}

func (e *echo) Handle(id uint64, now time.Time, req int) int {
	e.ids = append(e.ids, id)
	e.taken++
	return req
}
func (e *echo) Tick(time.Time) {
	e.mu.Lock()
	e.ticks++
	e.deadline = time.Time{}
	e.mu.Unlock()
}
func (e *echo) NextDeadline() time.Time                   { e.mu.Lock(); defer e.mu.Unlock(); return e.deadline }
func (e *echo) LoadPartition(int32, []kvlog.Record) error { return nil }
func (e *echo) Stopped(req int) int                       { return -req }
func (e *echo) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flushes++
	e.perRound = append(e.perRound, e.taken)
	e.taken = 0
	if e.hold {
		return
	}
	for _, id := range e.ids {
		e.l.Answer(id, func(req int) int { return req * 10 })
		e.l.Answer(id, func(int) int { panic("answered twice") }) // answered already: ignored
	}
	e.ids = nil
}

func start(e *echo) *Loop[int, int] {
	e.l = New[int, int](e, nil, clock.Real{}, time.Hour, errClosed)
	e.l.Start()
	return e.l
}

func TestCallAnsweredAfterFlush(t *testing.T) {
	e := &echo{}
	l := start(e)
	defer l.Stop()
	for i := 1; i <= 3; i++ {
		got, err := l.Call(context.Background(), i)
		if err != nil || got != i*10 {
			t.Fatalf("Call(%d) = %d, %v; want %d", i, got, err, i*10)
		}
	}
}

// Calls queued while the loop is busy share one round (one Flush), at most
// MaxDrain of them.
func TestQueuedCallsShareARound(t *testing.T) {
	e := &echo{}
	l := start(e)
	defer l.Stop()
	release := make(chan struct{})
	l.Post(func() { <-release }) // the loop is busy: the calls below queue up
	const n = MaxDrain + 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := l.Call(context.Background(), i); err != nil || got != i*10 {
				t.Errorf("Call(%d) = %d, %v", i, got, err)
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(l.inbox) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := l.Do(func() {}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Rounds: the Post and MaxDrain-1 calls queued behind it, then the
	// other 11, then Do.
	if len(e.perRound) < 2 || e.perRound[0] != MaxDrain-1 || e.perRound[1] != n-(MaxDrain-1) {
		t.Fatalf("calls per round %v, want [%d %d ...]", e.perRound, MaxDrain-1, n-(MaxDrain-1))
	}
}

func TestStopAnswersWaitingCalls(t *testing.T) {
	e := &echo{hold: true}
	l := start(e)
	got := make(chan int, 1)
	go func() {
		v, err := l.Call(context.Background(), 7)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	for {
		var n int
		l.Do(func() { n = len(l.pending) })
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	l.Stop()
	if v := <-got; v != -7 {
		t.Fatalf("waiting call answered %d at Stop, want Stopped's -7", v)
	}
	if _, err := l.Call(context.Background(), 1); err != errClosed {
		t.Fatalf("Call after Stop: %v, want %v", err, errClosed)
	}
	if err := l.Do(func() {}); err != errClosed {
		t.Fatalf("Do after Stop: %v", err)
	}
	if l.Post(func() { t.Error("ran after Stop") }) {
		t.Fatal("Post after Stop accepted")
	}
	l.Stop() // idempotent
}

func TestCallContextEnds(t *testing.T) {
	e := &echo{hold: true}
	l := start(e)
	defer l.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Call(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call with an ending context: %v", err)
	}
}

func TestTickAtNextDeadline(t *testing.T) {
	e := &echo{deadline: time.Now().Add(20 * time.Millisecond)}
	l := start(e)
	defer l.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		ticks := e.ticks
		e.mu.Unlock()
		if ticks > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no Tick at the machine's deadline (idle tick is an hour)")
}

func TestEarliest(t *testing.T) {
	a, b := time.Unix(1, 0), time.Unix(2, 0)
	for _, c := range []struct{ x, y, want time.Time }{
		{time.Time{}, time.Time{}, time.Time{}}, {a, time.Time{}, a}, {time.Time{}, b, b}, {a, b, a}, {b, a, a},
	} {
		if got := Earliest(c.x, c.y); !got.Equal(c.want) {
			t.Errorf("Earliest(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
	c := time.Unix(3, 0)
	if got := Earliest(c, time.Time{}, b, a, time.Time{}); !got.Equal(a) {
		t.Errorf("Earliest of five = %v, want %v", got, a)
	}
	if got := Earliest(); !got.IsZero() {
		t.Errorf("Earliest() = %v, want zero", got)
	}
}
