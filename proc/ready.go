package proc

// readyRing is the ready queue: a ring of PIDs, a power of two long, that
// grows by doubling. Every operation is O(1): push at the tail, take the
// head (FIFO order), or take the element at any offset by swapping it with
// the head first (deterministic mode's seeded choice). No operation moves
// more than two elements, whatever the number of ready processes (the seed's
// sorted array moved half of them on every change).
//
// Invariant: a live process appears at most once with its current
// generation (flagQueued guards pushes); entries whose generation is stale
// (the process exited while queued) are skipped when taken.
type readyRing struct {
	buf   []PID
	head  int
	count int
}

func (r *readyRing) push(p PID) {
	if r.count == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.count)&(len(r.buf)-1)] = p
	r.count++
}

func (r *readyRing) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]PID, size)
	for i := 0; i < r.count; i++ {
		buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf, r.head = buf, 0
}

// take removes and returns the element offset places after the head
// (0 <= offset < count).
func (r *readyRing) take(offset int) PID {
	mask := len(r.buf) - 1
	if offset != 0 {
		i := (r.head + offset) & mask
		r.buf[r.head], r.buf[i] = r.buf[i], r.buf[r.head]
	}
	p := r.buf[r.head]
	r.head = (r.head + 1) & mask
	r.count--
	return p
}
