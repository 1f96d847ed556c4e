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
// framework's concurrency so that the three loops handle as many messages
// at once (seeds/004: the runtime's threads and concurrency are the same
// in all three): per partition, lanes goroutines by the hash of the key
// (one lane: the partition in order; more: sequential per key), at most
// window records of a partition in flight (the dispatcher waits at the
// bound: backpressure, where the framework pauses the partition), and the
// mark only over the finished prefix. With batchMax > 0 the partition's
// one lane hands over what has arrived, up to batchMax, as one batch (the
// framework's HandleBatch with BatchMaxWait 0). The polling goroutine
// calls dispatch; close waits for every lane.
type keyLanes struct {
	lanes, window, batchMax int
	m                       *meter
	mark                    markFunc
	parts                   map[partitionKey]*partitionLanes // the polling goroutine's only
	failed                  chan error
}

type partitionKey struct {
	topic     string
	partition int32
}

var laneSeed = maphash.MakeSeed()

type partitionLanes struct {
	key   partitionKey
	lanes []chan item
	wg    sync.WaitGroup

	mu   sync.Mutex
	cond sync.Cond
	base int64  // guarded by mu: the lowest offset not finished
	next int64  // guarded by mu: one past the highest dispatched offset
	done []bool // guarded by mu: ring over [base, base+window), by offset mod window
}

// newConsumeLoop is the handler side of sc for the raw and adapter loops.
func newConsumeLoop(sc Scenario, m *meter, mark markFunc) *keyLanes {
	return &keyLanes{lanes: max(sc.KeyLanes, 1), window: MaxInFlight, batchMax: sc.BatchMaxCount, m: m, mark: mark,
		parts: map[partitionKey]*partitionLanes{}, failed: make(chan error, 1)}
}

func (k *keyLanes) dispatch(it item) {
	pk := partitionKey{it.topic, it.partition}
	p := k.parts[pk]
	if p == nil {
		p = &partitionLanes{key: pk, base: it.offset, next: it.offset, done: make([]bool, k.window)}
		p.cond.L = &p.mu
		for range k.lanes {
			ch := make(chan item, k.window)
			p.lanes = append(p.lanes, ch)
			p.wg.Add(1)
			go k.run(p, ch)
		}
		k.parts[pk] = p
	}
	p.mu.Lock()
	for it.offset-p.base >= int64(k.window) {
		p.cond.Wait()
	}
	for o := p.next; o < it.offset; o++ { // a gap (compaction, markers) is done already
		p.done[o%int64(k.window)] = true
	}
	p.next = it.offset + 1
	p.mu.Unlock()
	p.lanes[maphash.Bytes(laneSeed, it.key)%uint64(k.lanes)] <- it
}

func (k *keyLanes) run(p *partitionLanes, ch chan item) {
	defer p.wg.Done()
	if k.batchMax > 0 {
		k.runBatches(p, ch)
		return
	}
	var o Order
	for it := range ch {
		if err := handleOne(k.m, &o, it.value); err != nil {
			k.fail(err)
		}
		p.finish(it.offset, k.window, k.mark)
	}
}

// runBatches hands over what has arrived, up to batchMax, decoded into one
// reused slice, and finishes the batch as a whole.
func (k *keyLanes) runBatches(p *partitionLanes, ch chan item) {
	batch := make([]item, 0, k.batchMax)
	orders := make([]Order, 0, k.batchMax)
	for first := range ch {
		batch = append(batch[:0], first)
	collect:
		for len(batch) < k.batchMax {
			select {
			case it, ok := <-ch:
				if !ok {
					break collect
				}
				batch = append(batch, it)
			default:
				break collect
			}
		}
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
		clear(batch)
	}
}

func (k *keyLanes) fail(err error) {
	select {
	case k.failed <- err:
	default:
	}
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
		p.cond.Broadcast()
	}
}

// close stops the lanes after they finish what was dispatched and returns
// the first handler error.
func (k *keyLanes) close() error {
	for _, p := range k.parts {
		for _, ch := range p.lanes {
			close(ch)
		}
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
