package streambench

import (
	"encoding/json"
	"hash/maphash"
	"sync"
)

// item is one fetched record as the raw and adapter loops' handlers see
// it: both loops build it from their own record type, at the same cost.
type item struct {
	topic     string
	partition int32
	offset    int64
	key       []byte
	value     []byte
}

// markFunc records that a partition's offsets below next are done.
type markFunc func(topic string, partition int32, next int64)

// handleOne decodes one record into o (zeroed first, as the framework's
// codec path does) and hands it to the meter.
func handleOne(m *meter, o *Order, value []byte) error {
	*o = Order{}
	if err := json.Unmarshal(value, o); err != nil {
		return err
	}
	m.handled(o.ID)
	return nil
}

// keyLanes is the handler side of the raw and adapter loops, with the
// framework's threads and concurrency so that the three loops handle as
// many messages at once (seeds/004: the runtime's threads and concurrency
// are the same in all three), in the framework's shape (stream/worker.go):
// the polling goroutine hands each partition what one poll brought it, in
// one send, to the partition's goroutine (woken once per poll, not once
// per record); that goroutine runs the handler inline (one lane, in
// offset order), collects batches of what has arrived up to batchMax (the
// framework's HandleBatch with BatchMaxWait 0), or hands records to lanes
// goroutines by the hash of the key (sequential per key), at most window
// records of the partition in flight (it waits at the bound, woken once
// half the window is finished). The mark moves only over the finished
// prefix. Once HoldBytes of values are handed over and not yet handled
// (or handed to a lane), the polling goroutine waits (backpressure: the
// framework's consumer stops polling at the same bound). Before this shape the polling goroutine sent each record
// to its lane and waited on a partition's full window itself, stalling
// every other partition: the raw loop cost 28 % more CPU per message than
// the framework in ack each, at half its msg/s (issue 9). close waits for
// every goroutine.
type keyLanes struct {
	lanes, window, batchMax int
	m                       *meter
	mark                    markFunc
	parts                   map[partitionKey]*partitionLanes // the polling goroutine's only
	failed                  chan error
	hold                    holdBudget
}

// partitionQueue bounds the polls a partition's goroutine has waiting
// (HoldBytes is the bound that acts: 32 MiB of 512 B values are 128 polls
// of 512 records).
const partitionQueue = 1024

// holdBudget counts the value bytes handed over and not yet handled.
type holdBudget struct {
	mu      sync.Mutex
	cond    sync.Cond
	held    int64 // guarded by mu
	limit   int64
	waiting bool // guarded by mu: the polling goroutine waits
}

// take counts n bytes handed over, then waits while the budget is spent.
// The polling goroutine's only.
func (h *holdBudget) take(n int64) {
	h.mu.Lock()
	h.held += n
	for h.held >= h.limit {
		h.waiting = true
		h.cond.Wait()
	}
	h.waiting = false
	h.mu.Unlock()
}

// release gives n bytes back, waking the polling goroutine once the
// budget has room.
func (h *holdBudget) release(n int64) {
	h.mu.Lock()
	h.held -= n
	if h.waiting && h.held < h.limit {
		h.cond.Signal()
	}
	h.mu.Unlock()
}

// handover is what one poll brought a partition, sent to its goroutine in
// one send, with its value bytes (counted once, as dispatched: the hold
// budget takes them when the poll is handed over and gets them back when
// every record of it is handled).
type handover struct {
	items []item
	bytes int64
}

type partitionKey struct {
	topic     string
	partition int32
}

var laneSeed = maphash.MakeSeed()

type partitionLanes struct {
	key          partitionKey
	in           chan handover // polls' records, to the partition's goroutine
	pending      []item        // the polling goroutine's only: dispatched, not yet handed over
	pendingBytes int64         // the polling goroutine's only: pending's value bytes
	handovers    int           // the polling goroutine's only: sends on in so far
	wg           sync.WaitGroup

	lanes       []chan []item // key lanes (more than one lane)
	lanePending [][]item      // the partition goroutine's only: per lane, not yet handed over

	mu   sync.Mutex
	cond sync.Cond
	base int64 // guarded by mu: the lowest offset not finished
	next int64 // guarded by mu: one past the highest reserved offset
	// wakeAt, guarded by mu: the base at which the partition's goroutine,
	// waiting for room in the window, wants to be woken; -1 when it does
	// not wait.
	wakeAt int64
	wakes  int    // guarded by mu: its wake-ups so far
	done   []bool // guarded by mu: ring over [base, base+window), by offset mod window
}

// newConsumeLoop is the handler side of sc for the raw and adapter loops.
func newConsumeLoop(sc Scenario, m *meter, mark markFunc) *keyLanes {
	k := &keyLanes{lanes: max(sc.KeyLanes, 1), window: MaxInFlight, batchMax: sc.BatchMaxCount, m: m, mark: mark,
		parts: map[partitionKey]*partitionLanes{}, failed: make(chan error, 1)}
	k.hold.limit = HoldBytes
	k.hold.cond.L = &k.hold.mu
	return k
}

func newPartitionLanes(key partitionKey, offset int64, window int) *partitionLanes {
	p := &partitionLanes{key: key, in: make(chan handover, partitionQueue), base: offset, next: offset, wakeAt: -1, done: make([]bool, window)}
	p.cond.L = &p.mu
	return p
}

// dispatch takes one record of a poll; flush hands the poll over.
func (k *keyLanes) dispatch(it item) {
	pk := partitionKey{it.topic, it.partition}
	p := k.parts[pk]
	if p == nil {
		p = newPartitionLanes(pk, it.offset, k.window)
		p.wg.Add(1)
		go k.run(p)
		k.parts[pk] = p
	}
	p.pending = append(p.pending, it)
	p.pendingBytes += int64(len(it.value))
}

// flush hands each partition what was dispatched to it since the last
// flush, one send a partition; its goroutine owns the slice from then on.
// The polling goroutine calls it after each poll.
func (k *keyLanes) flush() {
	var n int64
	for _, p := range k.parts {
		if len(p.pending) > 0 {
			n += p.pendingBytes
			p.in <- handover{p.pending, p.pendingBytes}
			p.pending, p.pendingBytes = nil, 0
			p.handovers++
		}
	}
	if n > 0 {
		k.hold.take(n)
	}
}

// run is a partition's goroutine.
func (k *keyLanes) run(p *partitionLanes) {
	defer p.wg.Done()
	switch {
	case k.batchMax > 0:
		k.runBatches(p)
	case k.lanes == 1:
		var o Order
		for h := range p.in {
			for _, it := range h.items {
				p.reserve(it, k.window, nil)
				if err := handleOne(k.m, &o, it.value); err != nil {
					k.fail(err)
				}
				p.finish(it.offset, k.window, k.mark)
			}
			k.hold.release(h.bytes)
		}
	default:
		k.runLanes(p)
	}
}

// runLanes hands the partition's records to its key lanes, what one poll
// brought each lane in one send, waiting at the window.
func (k *keyLanes) runLanes(p *partitionLanes) {
	var lanes sync.WaitGroup
	for range k.lanes {
		ch := make(chan []item, k.window)
		p.lanes = append(p.lanes, ch)
		p.lanePending = append(p.lanePending, nil)
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			var o Order
			for items := range ch {
				for _, it := range items {
					if err := handleOne(k.m, &o, it.value); err != nil {
						k.fail(err)
					}
					p.finish(it.offset, k.window, k.mark)
				}
			}
		}()
	}
	for h := range p.in {
		for _, it := range h.items {
			// A full window waits for what this goroutine holds back:
			// hand it over before waiting.
			p.reserve(it, k.window, p.flushLanes)
			lane := int(maphash.Bytes(laneSeed, it.key) % uint64(k.lanes))
			p.lanePending[lane] = append(p.lanePending[lane], it)
		}
		p.flushLanes()
		k.hold.release(h.bytes) // the window bounds the lanes' share
	}
	for _, ch := range p.lanes {
		close(ch)
	}
	lanes.Wait()
}

// flushLanes hands each lane its pending records, one send a lane.
func (p *partitionLanes) flushLanes() {
	for lane, items := range p.lanePending {
		if len(items) > 0 {
			p.lanes[lane] <- items
			p.lanePending[lane] = nil
		}
	}
}

// runBatches hands over what has arrived, up to batchMax (and the window),
// decoded into one reused slice, and finishes the batch as a whole. A
// poll's bytes go back to the hold budget once its last record is handled
// (a batch may end inside a poll; the rest of what arrived is handled
// next, without waiting).
func (k *keyLanes) runBatches(p *partitionLanes) {
	most := min(k.batchMax, k.window)
	orders := make([]Order, 0, most)
	var polls []handover // the polls in arrived, in order
	for h := range p.in {
		arrived := h.items
		polls = append(polls[:0], h)
	collect:
		for len(arrived) < most {
			select {
			case more, ok := <-p.in:
				if !ok {
					break collect
				}
				arrived = append(arrived, more.items...)
				polls = append(polls, more)
			default:
				break collect
			}
		}
		head, handled := 0, 0 // polls[:head] handled in full; handled records of polls[head]
		for len(arrived) > 0 {
			n := min(len(arrived), most)
			for _, it := range arrived[:n] {
				p.reserve(it, k.window, nil)
			}
			k.handleBatch(p, arrived[:n], orders)
			arrived = arrived[n:]
			for handled += n; head < len(polls) && handled >= len(polls[head].items); head++ {
				handled -= len(polls[head].items)
				k.hold.release(polls[head].bytes)
			}
		}
		clear(polls) // the records are handled: keep none alive
	}
}

// handleBatch decodes batch into orders' storage and finishes it as a
// whole.
func (k *keyLanes) handleBatch(p *partitionLanes, batch []item, orders []Order) {
	orders = orders[:len(batch)]
	for i, it := range batch {
		orders[i] = Order{}
		if err := json.Unmarshal(it.value, &orders[i]); err != nil {
			k.fail(err)
		}
	}
	for i := range orders {
		k.m.handled(orders[i].ID)
	}
	clear(orders)
	p.finishBatch(batch, k.window, k.mark)
}

func (k *keyLanes) fail(err error) {
	select {
	case k.failed <- err:
	default:
	}
}

// reserve puts it into the window, waiting while the window is full until
// half of it is finished; beforeWait (if any) runs before the wait.
func (p *partitionLanes) reserve(it item, window int, beforeWait func()) {
	p.mu.Lock()
	if it.offset-p.base >= int64(window) {
		if beforeWait != nil {
			p.mu.Unlock()
			beforeWait()
			p.mu.Lock()
		}
		p.wakeAt = it.offset - int64(window/2)
		for p.base < p.wakeAt && p.base < p.next {
			p.cond.Wait()
			p.wakes++
		}
		p.wakeAt = -1
	}
	if p.base == p.next {
		p.base, p.next = it.offset, it.offset // all finished: a gap before it is done too
	}
	for o := p.next; o < it.offset; o++ { // a gap (compaction, markers) is done already
		p.done[o%int64(window)] = true
	}
	p.next = it.offset + 1
	p.mu.Unlock()
}

// finish marks offset done and moves the mark over the finished prefix.
func (p *partitionLanes) finish(offset int64, window int, mark markFunc) {
	p.mu.Lock()
	p.done[offset%int64(window)] = true
	p.advanceLocked(window, mark)
	p.mu.Unlock()
}

// finishBatch is finish for every record of a batch, with one mark.
func (p *partitionLanes) finishBatch(batch []item, window int, mark markFunc) {
	p.mu.Lock()
	for _, it := range batch {
		p.done[it.offset%int64(window)] = true
	}
	p.advanceLocked(window, mark)
	p.mu.Unlock()
}

func (p *partitionLanes) advanceLocked(window int, mark markFunc) {
	moved := false
	for p.base < p.next && p.done[p.base%int64(window)] {
		p.done[p.base%int64(window)] = false
		p.base++
		moved = true
	}
	if moved {
		mark(p.key.topic, p.key.partition, p.base)
		if p.wakeAt >= 0 && (p.base >= p.wakeAt || p.base == p.next) {
			p.cond.Broadcast()
		}
	}
}

// close stops the partitions' goroutines after they finish what was
// dispatched and returns the first handler error.
func (k *keyLanes) close() error {
	k.flush()
	for _, p := range k.parts {
		close(p.in)
	}
	for _, p := range k.parts {
		p.wg.Wait()
	}
	select {
	case err := <-k.failed:
		return err
	default:
		return nil
	}
}
