// Package coordloop is what the coordinators (internal/group,
// internal/txn) share: their FindCoordinator answer (findcoordinator.go),
// the earliest of their deadlines (Earliest) and the driver goroutine
// (Loop), the one goroutine that owns a state machine. Calls and functions
// arrive in an inbox; each round takes one and then up to MaxDrain-1 more
// already queued (their records share one append and one fsync: group
// commit), and ends with the machine's Flush, which persists what the round
// changed and only then answers the round's calls (Answer). Between rounds
// a timer wakes the machine at its next deadline. Each round starts by
// having the machine's store reopen its broken partitions when it is time
// to (kvlog.Store.ReopenBroken), each replayed into the machine
// (LoadPartition). At Stop every call still waiting is answered with the
// machine's Stopped response.
package coordloop

import (
	"context"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/kvlog"
)

// MaxDrain bounds how many queued calls one round takes.
const MaxDrain = 256

// InboxDepth bounds the calls and functions queued for the loop.
const InboxDepth = 1024

// Machine is what a Loop drives. Every method runs on the loop's goroutine.
type Machine[Req, Resp any] interface {
	// Handle hands a call to the state machine with its id (assigned in
	// arrival order) and the time it was taken, and returns the request as
	// handed (kept for Answer and Stopped).
	Handle(id uint64, now time.Time, req Req) Req
	// Tick lets time pass in the state machine (timeouts, expiry).
	Tick(now time.Time)
	// NextDeadline is when the machine next needs a Tick (zero: none
	// before the loop's idle tick).
	NextDeadline() time.Time
	// LoadPartition replays partition p of the machine's store, reopened
	// after it broke, and serves its owners again.
	LoadPartition(p int32, records []kvlog.Record) error
	// Flush ends a round: persist what it changed, then answer its calls.
	Flush()
	// Stopped is the answer of a call still waiting when the loop stops.
	Stopped(req Req) Resp
}

// Store is a machine's store as the loop retries its broken partitions
// (kvlog.Store).
type Store interface {
	// ReopenAt is when ReopenBroken next has something to do (zero:
	// nothing).
	ReopenAt() time.Time
	// ReopenBroken reopens the broken partitions if ReopenAt has come,
	// handing each one's records to load.
	ReopenBroken(load func(p int32, records []kvlog.Record) error)
}

// Loop is the driver goroutine of one Machine.
type Loop[Req, Resp any] struct {
	m      Machine[Req, Resp]
	store  Store // nil: none
	clock  clock.Clock
	idle   time.Duration
	closed error

	inbox chan op[Req, Resp]
	stop  chan struct{}
	done  chan struct{}

	// Owned by the loop's goroutine.
	nextID  uint64
	pending map[uint64]*call[Req, Resp]
}

type call[Req, Resp any] struct {
	req   Req
	reply chan Resp // buffered 1: the loop never blocks on it
}

// op is a call or a function to run on the loop's goroutine.
type op[Req, Resp any] struct {
	call *call[Req, Resp]
	fn   func()
}

// New returns the loop of m and its store (nil: none); Start starts it.
// idle is the longest the loop goes without a Tick; closed is the error
// Call and Do return after Stop.
func New[Req, Resp any](m Machine[Req, Resp], store Store, clk clock.Clock, idle time.Duration, closed error) *Loop[Req, Resp] {
	return &Loop[Req, Resp]{
		m:       m,
		store:   store,
		clock:   clk,
		idle:    idle,
		closed:  closed,
		inbox:   make(chan op[Req, Resp], InboxDepth),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		pending: make(map[uint64]*call[Req, Resp]),
	}
}

// Start starts the loop's goroutine.
func (l *Loop[Req, Resp]) Start() { go l.run() }

// Call hands req to the machine and waits for its answer. ctx ending (the
// connection closed) abandons the wait; the machine still answers into the
// void.
func (l *Loop[Req, Resp]) Call(ctx context.Context, req Req) (Resp, error) {
	var zero Resp
	c := &call[Req, Resp]{req: req, reply: make(chan Resp, 1)}
	select {
	case l.inbox <- op[Req, Resp]{call: c}:
	case <-l.done:
		return zero, l.closed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case resp := <-c.reply:
		return resp, nil
	case <-l.done:
		select {
		case resp := <-c.reply: // answered by Stop
			return resp, nil
		default:
		}
		return zero, l.closed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Do runs fn on the loop's goroutine (admin, tests) and waits for it.
func (l *Loop[Req, Resp]) Do(fn func()) error {
	ran := make(chan struct{})
	select {
	case l.inbox <- op[Req, Resp]{fn: func() { fn(); close(ran) }}:
	case <-l.done:
		return l.closed
	}
	select {
	case <-ran:
		return nil
	case <-l.done:
		return l.closed
	}
}

// Post queues fn to run on the loop's goroutine, in the round that takes
// it (which ends with Flush), without waiting for it; false once the loop
// has stopped (fn will not run).
func (l *Loop[Req, Resp]) Post(fn func()) bool {
	select {
	case <-l.done: // not queued behind a stopped loop
		return false
	default:
	}
	select {
	case l.inbox <- op[Req, Resp]{fn: fn}:
		return true
	case <-l.done:
		return false
	}
}

// Answer sends the waiting call id the response resp makes of its request.
// An id that is not waiting (answered before) is ignored. Loop goroutine
// only (from Flush).
func (l *Loop[Req, Resp]) Answer(id uint64, resp func(req Req) Resp) {
	c := l.pending[id]
	if c == nil {
		return
	}
	delete(l.pending, id)
	c.reply <- resp(c.req)
}

// Stop stops the loop, answers the calls still waiting with the machine's
// Stopped response and waits for its goroutine to end. Idempotent.
func (l *Loop[Req, Resp]) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

func (l *Loop[Req, Resp]) run() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.resetTimer(timer)
		select {
		case <-l.stop:
			for id, c := range l.pending {
				c.reply <- l.m.Stopped(c.req)
				delete(l.pending, id)
			}
			return
		case o := <-l.inbox:
			l.reopen()
			l.take(o)
		drain:
			for i := 1; i < MaxDrain; i++ {
				select {
				case o := <-l.inbox:
					l.take(o)
				default:
					break drain
				}
			}
		case <-timer.C:
			l.reopen()
			l.m.Tick(l.clock.Now())
		}
		l.m.Flush()
	}
}

func (l *Loop[Req, Resp]) resetTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	d := l.idle
	next := l.m.NextDeadline()
	if l.store != nil {
		next = Earliest(next, l.store.ReopenAt())
	}
	if !next.IsZero() {
		if until := next.Sub(l.clock.Now()); until < d {
			d = max(until, time.Millisecond)
		}
	}
	t.Reset(d)
}

// reopen has the store reopen its broken partitions when it is time to.
func (l *Loop[Req, Resp]) reopen() {
	if l.store != nil {
		l.store.ReopenBroken(l.m.LoadPartition)
	}
}

func (l *Loop[Req, Resp]) take(o op[Req, Resp]) {
	if o.fn != nil {
		o.fn()
		return
	}
	l.nextID++
	o.call.req = l.m.Handle(l.nextID, l.clock.Now(), o.call.req)
	l.pending[l.nextID] = o.call
}

// Earliest is the earliest of deadlines, zero meaning none (and none at
// all: zero).
func Earliest(deadlines ...time.Time) time.Time {
	var next time.Time
	for _, d := range deadlines {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	return next
}
