// Package taskqueue is the coordinator-less task queue (seed 000, M-102,
// M-103, M-105) as a stream pattern: tasks, claims and completions are
// records of one single-partition topic, whose order is the only
// arbiter. A worker reads the whole log, picks an available task (one with
// no claim yet), writes a claim and reads the log on until its own claim
// comes back: if no other claim for that task precedes it, the worker won
// and runs the task, then writes a completion; otherwise it lost and picks
// again. No coordinator, no locks, no consumer group: every worker sees
// the same order, so every worker agrees on every winner.
//
// Picking a random available task rather than the first is the seed's
// one-line fix: idle workers that wake together all see the same head of
// the queue, and taking the first makes them collide on it (M-103: 8-27 %
// lost claims at 3 workers, 0 % with random). Random is the default.
//
// Not here yet: leases (a winner that dies holds its task forever; a
// claim with an expiry and a re-claim rule would fix it) and compaction
// of finished tasks; a worker replays the whole topic when it starts.
package taskqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"

	"github.com/sushka-io/sushka/stream"
)

// Pick chooses among the available tasks.
type Pick uint8

const (
	PickRandom Pick = iota // the default: an available task at random
	PickFirst              // the oldest available task
)

const (
	headerKind = "taskqueue-kind"
	kindTask   = "task"
	kindClaim  = "claim"
	kindDone   = "done"
)

// Queue is a task queue on one topic of a transport; the topic must have
// exactly one partition (its order decides the winners).
type Queue struct {
	transport stream.Transport
	topic     string
}

// New returns the queue on topic.
func New(transport stream.Transport, topic string) *Queue {
	return &Queue{transport: transport, topic: topic}
}

func (q *Queue) publish(ctx context.Context, kind, taskID string, value []byte) error {
	return q.transport.Producer().Publish(ctx, &stream.Record{
		Topic: q.topic, Partition: 0, Key: []byte(taskID), Value: value,
		Headers: []stream.Header{{Key: headerKind, Value: []byte(kind)}},
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
	Claims int // claims written
	Won    int // claims that were first for their task: tasks run
	Lost   int // claims that another claim preceded
}

// log is what a worker knows of the topic, in its order.
type log struct {
	payload   map[string][]byte
	order     []string          // task IDs in submission order
	winner    map[string]string // task ID -> the claim (worker/nonce) that came first
	available []string          // submitted, unclaimed; in submission order
}

func (l *log) apply(r *stream.Record) {
	kind, _ := r.Header(headerKind)
	id := string(r.Key)
	switch string(kind) {
	case kindTask:
		if _, dup := l.payload[id]; dup {
			return
		}
		l.payload[id] = append([]byte(nil), r.Value...)
		l.order = append(l.order, id)
		if _, claimed := l.winner[id]; !claimed {
			l.available = append(l.available, id)
		}
	case kindClaim:
		if _, claimed := l.winner[id]; claimed {
			return
		}
		l.winner[id] = string(r.Value)
		for i, a := range l.available {
			if a == id {
				l.available = append(l.available[:i], l.available[i+1:]...)
				break
			}
		}
	}
}

// Work runs tasks with fn as worker until ctx ends, and returns its
// counts. A task whose fn fails is still completed (its error is in the
// completion record's value): the queue runs each task once, retrying is
// fn's business.
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
	l := &log{payload: map[string][]byte{}, winner: map[string]string{}}
	buf := make([]*stream.Record, 0, 256)
	pending := "" // our claim in flight: "worker/nonce", until it comes back
	pendingTask := ""
	for {
		if pending == "" && len(l.available) > 0 {
			i := 0
			if pick == PickRandom {
				i = mathrand.IntN(len(l.available))
			}
			pendingTask, pending = l.available[i], worker+"/"+nonce()
			if err := q.publish(ctx, kindClaim, pendingTask, []byte(pending)); err != nil {
				return stats, ignoreEnd(ctx, err)
			}
			stats.Claims++
		}
		records, err := consumer.Poll(ctx, buf)
		if err != nil {
			return stats, ignoreEnd(ctx, err)
		}
		for i, r := range records {
			kind, _ := r.Header(headerKind)
			l.apply(r)
			if pending != "" && string(kind) == kindClaim && string(r.Value) == pending {
				// Our claim is back: the log says who won.
				won := l.winner[pendingTask] == pending
				task := Task{ID: pendingTask, Payload: l.payload[pendingTask]}
				pending = ""
				if !won {
					stats.Lost++
					continue
				}
				stats.Won++
				result := []byte("ok")
				if ferr := fn(ctx, task); ferr != nil {
					result = []byte("error: " + ferr.Error())
				}
				if err := q.publish(ctx, kindDone, task.ID, result); err != nil {
					return stats, ignoreEnd(ctx, err)
				}
			}
			records[i] = nil
		}
		buf = records[:0]
	}
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
