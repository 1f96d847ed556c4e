package proc

// timerEntry is one pending timer of a shard. Timers are ordered by deadline,
// then by creation (seq), so two timers due at the same instant fire in the
// order they were set: the order is deterministic.
type timerEntry struct {
	deadlineNanos int64 // on the runtime's time line (nanoseconds since its start)
	seq           uint64
	to, from      PID
	message       any
	index         int  // position in the heap; -1 once fired or cancelled
	receiveTimer  bool // the receive timeout of process to, not a SendAfter
}

// Timer is a handle on a SendAfter timer, for CancelTimer.
type Timer struct {
	entry *timerEntry
	seq   uint64
}

// timerHeap is a binary min-heap of timers (O(log n) set, cancel and fire).
type timerHeap []*timerEntry

func (h timerHeap) less(i, j int) bool {
	if h[i].deadlineNanos != h[j].deadlineNanos {
		return h[i].deadlineNanos < h[j].deadlineNanos
	}
	return h[i].seq < h[j].seq
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) push(t *timerEntry) {
	t.index = len(*h)
	*h = append(*h, t)
	h.up(t.index)
}

// remove takes the entry at index i out of the heap.
func (h *timerHeap) remove(i int) *timerEntry {
	old := *h
	last := len(old) - 1
	if i != last {
		old.swap(i, last)
	}
	t := old[last]
	old[last] = nil
	*h = old[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	t.index = -1
	return t
}

func (h timerHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h timerHeap) down(i int) {
	for {
		smallest := i
		if l := 2*i + 1; l < len(h) && h.less(l, smallest) {
			smallest = l
		}
		if r := 2*i + 2; r < len(h) && h.less(r, smallest) {
			smallest = r
		}
		if smallest == i {
			return
		}
		h.swap(i, smallest)
		i = smallest
	}
}
