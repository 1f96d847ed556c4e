package server

import (
	"context"
	"sync"
	"sync/atomic"
)

// memoryBudget is the broker-wide budget of request bytes in memory
// (Kafka's queued.max.request.bytes; Redpanda reserves from a memory
// semaphore the same way): a connection reserves a frame's declared size
// before it reads the body, and the reservation is released when nothing
// refers to the frame any more. While the budget is short, readers wait
// (their connections stop reading: TCP backpressure).
//
// A reservation that fits is granted at once, even if larger ones wait
// (first fit, waiters served in arrival order among those that fit), as
// Kafka's memory pool lets any request in while memory is free: strict FIFO
// would let a few clients announcing huge frames, granted or queued,
// stall every other client until their frames time out. The price is that
// a large frame may wait while a stream of small requests keeps the budget
// too full for it.
//
// Invariant: used <= limit, and used is the sum of the reservations not yet
// released.
type memoryBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiters []*budgetWaiter // in arrival order

	inUse atomic.Int64 // mirror of used for metrics, read without mu
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the reservation is granted
}

func newMemoryBudget(limit int64) *memoryBudget { return &memoryBudget{limit: limit} }

// acquire reserves n bytes (n <= limit), waiting while the budget is short.
// If ctx ends first nothing stays reserved and ctx's error is returned.
func (b *memoryBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.used+n <= b.limit {
		b.used += n
		b.inUse.Store(b.used)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while we gave up: give it back.
		b.used -= n
		b.inUse.Store(b.used)
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	// Our leaving may let the waiters behind us in.
	b.grantLocked()
	return ctx.Err()
}

// release returns n reserved bytes.
func (b *memoryBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		panic("server: memory budget released more than reserved")
	}
	b.grantLocked()
	b.inUse.Store(b.used)
	b.mu.Unlock()
}

// grantLocked hands the free budget to the waiters that fit, in arrival
// order; the others keep their place.
func (b *memoryBudget) grantLocked() {
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if b.used+w.n <= b.limit {
			b.used += w.n
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
	b.inUse.Store(b.used)
}
