package plog

import (
	"sync/atomic"
	"time"
)

// A Waker wakes one reader that long-polls many logs (a Fetch over many
// partitions): every log it is registered with signals it when its high
// watermark advances or the log closes. Waiting on any number of partitions
// is then one receive on C: no select over one channel per partition and no
// goroutine per partition, so the cost of a wait does not grow with the
// partitions waited on.
//
// A signal is a non-blocking send on C (capacity 1): signals coalesce, and
// one that arrives while the reader is busy stays in C, so a reader that
// registers, then reads, then waits on C never misses an append that
// landed after its registration.
type Waker struct {
	C chan struct{}

	// signalledAt is when the first signal not yet taken by SignalTime
	// arrived (Config.Clock, Unix nanoseconds; 0: none): how long the
	// reader took to answer after the append that woke it.
	signalledAt atomic.Int64
}

// NewWaker returns a Waker registered with no log.
func NewWaker() *Waker { return &Waker{C: make(chan struct{}, 1)} }

// signal wakes the reader; at (Unix nanoseconds) is when.
func (w *Waker) signal(at int64) {
	w.signalledAt.CompareAndSwap(0, at)
	select {
	case w.C <- struct{}{}:
	default: // already signalled; the reader has not looked yet
	}
}

// SignalTime returns when the earliest signal since the previous call
// arrived (the zero Time if none did) and forgets it: a reader woken by C
// measures its wake-up from there (the broker's sushka_fetch_wake_seconds).
func (w *Waker) SignalTime() time.Time {
	at := w.signalledAt.Swap(0)
	if at == 0 {
		return time.Time{}
	}
	return time.Unix(0, at)
}

// AddWaker registers w: l signals it at every advance of the high watermark
// and when it closes, until RemoveWaker. Register before reading: an
// append published after AddWaker returns is signalled. Every AddWaker
// needs its RemoveWaker, or the log keeps w.
func (l *Log) AddWaker(w *Waker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wakers == nil {
		l.wakers = make(map[*Waker]struct{})
	}
	l.wakers[w] = struct{}{}
}

// RemoveWaker unregisters w; removing a Waker not registered does nothing.
func (l *Log) RemoveWaker(w *Waker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.wakers, w)
}

// Wakers is the number of registered Wakers (tests: a reader that has gone
// must not stay registered).
func (l *Log) Wakers() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.wakers)
}

// signalWakersLocked signals every registered Waker; l.mu must be held.
func (l *Log) signalWakersLocked() {
	l.tellWatchersLocked() // watch.go
	if len(l.wakers) == 0 {
		return
	}
	at := l.clock.Now().UnixNano()
	for w := range l.wakers {
		w.signal(at)
	}
}
