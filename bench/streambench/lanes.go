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

// batcher is the raw and adapter loops' batch handler: the records of one
// poll, per partition in offset order, in batches of up to maxCount,
// decoded into one reused slice and marked after the batch.
type batcher struct {
	maxCount int
	orders   []Order
	byPart   map[partitionKey][]item
	order    []partitionKey
}

type partitionKey struct {
	topic     string
	partition int32
}

func newBatcher(maxCount int) *batcher {
	return &batcher{maxCount: maxCount, orders: make([]Order, 0, maxCount), byPart: map[partitionKey][]item{}}
}

// add collects one polled record.
func (b *batcher) add(it item) {
	k := partitionKey{it.topic, it.partition}
	if len(b.byPart[k]) == 0 { // first of the poll: flush empties every partition
		b.order = append(b.order, k)
	}
	b.byPart[k] = append(b.byPart[k], it)
}

// flush handles what add collected, batch by batch, marking after each.
func (b *batcher) flush(m *meter, mark markFunc) error {
	for _, k := range b.order {
		items := b.byPart[k]
		for len(items) > 0 {
			n := min(len(items), b.maxCount)
			b.orders = b.orders[:n]
			for i := range n {
				b.orders[i] = Order{}
				if err := json.Unmarshal(items[i].value, &b.orders[i]); err != nil {
					return err
				}
			}
			for i := range b.orders {
				m.handled(b.orders[i].ID)
			}
			clear(b.orders)
			mark(k.topic, k.partition, items[n-1].offset+1)
			items = items[n:]
		}
		b.byPart[k] = b.byPart[k][:0]
	}
	b.order = b.order[:0]
	return nil
}

// keyLanes is the raw and adapter loops' ordered concurrency: per
// partition, lanes goroutines by the hash of the key (sequential per key),
// at most window records of a partition in flight (the dispatcher waits
// at the bound: backpressure), and the mark only over the finished prefix.
// The polling goroutine calls dispatch; close waits for every lane.
type keyLanes struct {
	lanes, window int
	m             *meter
	mark          markFunc
	parts         map[partitionKey]*partitionLanes // the polling goroutine's only
	failed        chan error
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

func newKeyLanes(lanes, window int, m *meter, mark markFunc) *keyLanes {
	return &keyLanes{lanes: lanes, window: window, m: m, mark: mark, parts: map[partitionKey]*partitionLanes{},
		failed: make(chan error, 1)}
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
	var o Order
	for it := range ch {
		if err := handleOne(k.m, &o, it.value); err != nil {
			select {
			case k.failed <- err:
			default:
			}
		}
		p.finish(it.offset, k.window, k.mark)
	}
}

// finish marks offset done and moves the mark over the finished prefix.
func (p *partitionLanes) finish(offset int64, window int, mark markFunc) {
	p.mu.Lock()
	p.done[offset%int64(window)] = true
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
	p.mu.Unlock()
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

// consumeLoop is the handler side of the raw and adapter loops, shared so
// that the two differ only in the client calls around it: each polled
// record goes to record, endOfPoll follows every poll, close ends the run.
type consumeLoop struct {
	m     *meter
	mark  markFunc
	order Order
	batch *batcher  // the batch scenario
	lanes *keyLanes // the ordered-by-key scenario
}

func newConsumeLoop(sc Scenario, m *meter, mark markFunc) *consumeLoop {
	c := &consumeLoop{m: m, mark: mark}
	switch {
	case sc.BatchMaxCount > 0:
		c.batch = newBatcher(sc.BatchMaxCount)
	case sc.KeyLanes > 1:
		c.lanes = newKeyLanes(sc.KeyLanes, MaxInFlight, m, mark)
	}
	return c
}

// record handles one record (ack each: decode, handle, mark), or hands it
// to the batch or the lanes.
func (c *consumeLoop) record(it item) error {
	switch {
	case c.batch != nil:
		c.batch.add(it)
	case c.lanes != nil:
		c.lanes.dispatch(it)
	default:
		if err := handleOne(c.m, &c.order, it.value); err != nil {
			return err
		}
		c.mark(it.topic, it.partition, it.offset+1)
	}
	return nil
}

func (c *consumeLoop) endOfPoll() error {
	if c.batch != nil {
		return c.batch.flush(c.m, c.mark)
	}
	return nil
}

// close waits for the lanes to finish what was dispatched.
func (c *consumeLoop) close() error {
	if c.lanes != nil {
		return c.lanes.close()
	}
	return nil
}
