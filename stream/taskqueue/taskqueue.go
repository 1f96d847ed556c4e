// Package taskqueue is the coordinator-less task queue (seed 000, M-102,
// M-103, M-105) as a stream pattern: tasks, claims and completions are
// records of one single-partition topic, whose order is the only
// arbiter. A worker reads the whole log, picks an available task (one with
// no claim yet), writes a claim and reads the log on until its own claim
// comes back: if no other claim for that task precedes it, the worker won
// and runs the task, then writes a completion and reads on until that
// comes back too (so that its next pick sees what was claimed while it
// worked); otherwise it lost and picks again. No coordinator, no locks, no consumer group: every worker sees
// the same order, so every worker agrees on every winner.
//
// Picking a random available task rather than the first is the seed's
// one-line fix: idle workers that wake together all see the same head of
// the queue, and taking the first makes them collide on it (M-103: 8-27 %
// lost claims at 3 workers, 0 % with random). Random is the default.
//
// Leases: a claim carries the time it was made and a deadline (its
// lease, Lease, DefaultLease by default). A winner that has not written
// its completion by the deadline loses the task: a claim made after the
// deadline wins it again. Every worker decides this from the two times in
// the claims themselves, never from its own clock, so all of them still
// agree on every winner; their clocks only matter for when a worker tries.
// The winner's fn runs under a context that ends at its deadline, and a
// winner past its deadline writes no completion (the task is another's by
// then). So a worker that dies mid-task delays its task by one lease, and
// a task runs at least once; twice only when fn outlives its deadline by
// ignoring its context.
//
// Not here yet: renewing a lease (a task longer than its lease cannot
// finish) and compaction of finished tasks; a worker replays the whole
// topic when it starts.
package taskqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/sushka-io/sushka/stream"
)

// Pick chooses among the available tasks.
type Pick uint8

const (
	PickRandom Pick = iota // the default: an available task at random
	PickFirst              // the oldest available task
)

// DefaultLease is how long a claim holds its task unless Lease says
// otherwise: long against the tasks the pattern is for (seconds), short
// against a worker's restart.
const DefaultLease = 30 * time.Second

const (
	headerKind = "taskqueue-kind"
	kindTask   = "task"
	kindClaim  = "claim"
	kindDone   = "done"
	// A claim's times, Unix nanoseconds in decimal. A claim without them
	// (written before leases) holds its task forever.
	headerClaimedAt  = "taskqueue-claimed-at"
	headerLeaseUntil = "taskqueue-lease-until"
)

// Queue is a task queue on one topic of a transport; the topic must have
// exactly one partition (its order decides the winners).
type Queue struct {
	transport stream.Transport
	topic     string
	lease     time.Duration
}

// An Option configures a Queue.
type Option func(*Queue)

// Lease sets how long a won claim holds its task (DefaultLease if not
// set); 0 means forever: a winner that dies then holds its task for good.
func Lease(d time.Duration) Option { return func(q *Queue) { q.lease = d } }

// New returns the queue on topic.
func New(transport stream.Transport, topic string, opts ...Option) *Queue {
	q := &Queue{transport: transport, topic: topic, lease: DefaultLease}
	for _, opt := range opts {
		opt(q)
	}
	return q
}

func (q *Queue) publish(ctx context.Context, kind, taskID string, value []byte, headers ...stream.Header) error {
	return q.transport.Producer().Publish(ctx, &stream.Record{
		Topic: q.topic, Partition: 0, Key: []byte(taskID), Value: value,
		Headers: append([]stream.Header{{Key: headerKind, Value: []byte(kind)}}, headers...),
	})
}

// Submit adds a task.
func (q *Queue) Submit(ctx context.Context, taskID string, payload []byte) error {
	return q.publish(ctx, kindTask, taskID, payload)
}

// Task is a task a worker won.
type Task struct {
	ID      string
	Payload []byte
}

// Stats counts one worker's claims.
type Stats struct {
	Claims  int // claims written
	Won     int // claims that won their task: tasks run
	Lost    int // claims that lost: another claim held the task, or it was done
	Expired int // tasks won whose lease ran out before fn returned: no completion written
}

// taskState is what the log says of one task.
type taskState struct {
	payload   []byte
	submitted bool
	done      bool
	winner    string    // the claim (worker/nonce) holding the task; "" if none
	heldUntil time.Time // the winner's lease; zero: forever
}

// log is what a worker knows of the topic, in its order.
type log struct {
	tasks map[string]*taskState
	open  []string // submitted and not done, in submission order
}

func (l *log) state(id string) *taskState {
	st := l.tasks[id]
	if st == nil {
		st = &taskState{}
		l.tasks[id] = st
	}
	return st
}

// unixNanos reads a claim's time header; zero if absent or malformed.
func unixNanos(r *stream.Record, key string) time.Time {
	v, ok := r.Header(key)
	if !ok {
		return time.Time{}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// apply advances the log by one record. The rule for claims is the whole
// protocol: a claim wins its task if the task is not done and either no
// claim holds it or the holder's lease ended before this claim was made
// (both times are in the claims, so every reader decides alike).
func (l *log) apply(r *stream.Record) {
	kind, _ := r.Header(headerKind)
	id := string(r.Key)
	switch string(kind) {
	case kindTask:
		st := l.state(id)
		if st.submitted {
			return
		}
		st.submitted, st.payload = true, append([]byte(nil), r.Value...)
		if !st.done {
			l.open = append(l.open, id)
		}
	case kindClaim:
		st := l.state(id)
		if st.done {
			return
		}
		if st.winner != "" && (st.heldUntil.IsZero() || !unixNanos(r, headerClaimedAt).After(st.heldUntil)) {
			return
		}
		st.winner, st.heldUntil = string(r.Value), unixNanos(r, headerLeaseUntil)
	case kindDone:
		st := l.state(id)
		if st.done {
			return
		}
		st.done = true
		for i, a := range l.open {
			if a == id {
				l.open = append(l.open[:i], l.open[i+1:]...)
				break
			}
		}
	}
}

// available appends to into the open tasks claimable at now and returns
// them with the earliest future end of a lease among the others (zero if
// none): when to look again.
func (l *log) available(into []string, now time.Time) ([]string, time.Time) {
	var next time.Time
	for _, id := range l.open {
		st := l.tasks[id]
		switch {
		case st.winner == "":
			into = append(into, id)
		case st.heldUntil.IsZero():
		case now.After(st.heldUntil):
			into = append(into, id)
		case next.IsZero() || st.heldUntil.Before(next):
			next = st.heldUntil
		}
	}
	return into, next
}

// Work runs tasks with fn as worker until ctx ends, and returns its
// counts. A task whose fn fails is still completed (its error is in the
// completion record's value): the queue runs each task once, retrying is
// fn's business. fn's context ends at the claim's lease.
func (q *Queue) Work(ctx context.Context, worker string, pick Pick, fn func(context.Context, Task) error) (Stats, error) {
	var stats Stats
	consumer, err := q.transport.Consume(ctx, stream.ConsumerConfig{
		Group:  "taskqueue-" + q.topic + "-" + worker + "-" + nonce(),
		Topics: []string{q.topic},
	})
	if err != nil {
		return stats, err
	}
	defer consumer.Close(context.Background())
	l := &log{tasks: map[string]*taskState{}}
	buf := make([]*stream.Record, 0, 256)
	var candidates []string
	pending := "" // our claim in flight: "worker/nonce", until it comes back
	pendingTask := ""
	var pendingUntil time.Time
	// catchUp is the task whose completion we wrote, until it comes back:
	// while fn ran, the log went on without us, and a pick from that stale
	// view takes a task claimed meanwhile and loses (measured: with
	// PickFirst every task cost two claims).
	catchUp := ""
	for {
		var wake time.Time // when a lease we wait on ends; zero: on records only
		if pending == "" && catchUp == "" {
			now := time.Now()
			candidates, wake = l.available(candidates[:0], now)
			if len(candidates) > 0 {
				i := 0
				if pick == PickRandom {
					i = mathrand.IntN(len(candidates))
				}
				pendingTask, pending = candidates[i], worker+"/"+nonce()
				headers := []stream.Header{{Key: headerClaimedAt, Value: strconv.AppendInt(nil, now.UnixNano(), 10)}}
				pendingUntil = time.Time{}
				if q.lease > 0 {
					pendingUntil = now.Add(q.lease)
					headers = append(headers, stream.Header{Key: headerLeaseUntil, Value: strconv.AppendInt(nil, pendingUntil.UnixNano(), 10)})
				}
				if err := q.publish(ctx, kindClaim, pendingTask, []byte(pending), headers...); err != nil {
					return stats, ignoreEnd(ctx, err)
				}
				stats.Claims++
				wake = time.Time{}
			}
		}
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if !wake.IsZero() {
			// Past the deadline by a little: the claim rule compares
			// strictly, and a claim made at the deadline loses.
			pollCtx, cancelPoll = context.WithDeadline(ctx, wake.Add(time.Millisecond))
		}
		records, err := consumer.Poll(pollCtx, buf)
		cancelPoll()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = nil // a lease ended: look again
		}
		if err != nil {
			return stats, ignoreEnd(ctx, err)
		}
		for i, r := range records {
			kind, _ := r.Header(headerKind)
			l.apply(r)
			if catchUp != "" && string(kind) == kindDone && string(r.Key) == catchUp {
				catchUp = ""
			}
			if pending != "" && string(kind) == kindClaim && string(r.Value) == pending {
				// Our claim is back: the log says who won.
				won := l.tasks[pendingTask].winner == pending
				task := Task{ID: pendingTask, Payload: l.tasks[pendingTask].payload}
				pending = ""
				if !won {
					stats.Lost++
					continue
				}
				stats.Won++
				completed, err := q.run(ctx, task, pendingUntil, fn, &stats)
				if err != nil {
					return stats, ignoreEnd(ctx, err)
				}
				if completed {
					catchUp = task.ID
				}
			}
			records[i] = nil
		}
		buf = records[:0]
	}
}

// run runs a won task under its lease and writes its completion, unless
// the lease ended first: the task is then another claim's to win, and a
// completion from us would end the run of the worker that took it over.
// It reports whether it wrote the completion.
func (q *Queue) run(ctx context.Context, task Task, heldUntil time.Time, fn func(context.Context, Task) error, stats *Stats) (bool, error) {
	fnCtx, cancel := ctx, context.CancelFunc(func() {})
	if !heldUntil.IsZero() {
		fnCtx, cancel = context.WithDeadline(ctx, heldUntil)
	}
	ferr := fn(fnCtx, task)
	cancel()
	if !heldUntil.IsZero() && !time.Now().Before(heldUntil) {
		stats.Expired++
		return false, nil
	}
	result := []byte("ok")
	if ferr != nil {
		result = []byte("error: " + ferr.Error())
	}
	return true, q.publish(ctx, kindDone, task.ID, result)
}

func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, stream.ErrClosed) {
		return nil
	}
	return fmt.Errorf("taskqueue: %w", err)
}

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
