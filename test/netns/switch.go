package netns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The switch: one goroutine per node reads the packets the node sends on
// eth0 and writes each into its destination node's eth0, unless the
// faults in force drop or delay it. A delayed packet waits in its sender's
// delay line (one goroutine per node, started with the switch).
//
// Who owns what: fabric.mu guards the fault table (blocked, shape). Each
// packet is decided and written under mu held for reading, and a fault
// change takes it for writing, so when Partition, Heal or Shape returns,
// no packet decided under the old table is still on its way (a delayed
// packet is checked against blocked again when its time comes). A reader
// goroutine owns its node's read buffer, random source and lastDue.

// delayLineLimit bounds the packets waiting in one node's delay line
// (netem's default limit); a packet past it is dropped, counted Overflow.
const delayLineLimit = 1000

// Counters are what the switch did with the packets the nodes sent.
type Counters struct {
	Forwarded  uint64 // written into their destination's eth0
	Blocked    uint64 // dropped by a partition or an isolation
	Lost       uint64 // dropped by a Shaping's Loss
	Overflow   uint64 // dropped: the sender's delay line was full
	Unroutable uint64 // not IPv4, or to no node of the Net
}

type fabric struct {
	nodes  []*Node
	prefix netip.Prefix

	mu      sync.RWMutex
	blocked [][]bool  // [from][to]: drop packets from node from to node to
	shape   []Shaping // [from]: delay, jitter and loss of what node from sends

	lines []chan delayed // [from]: the delay lines
	// pending counts the packets in each delay line: while a line holds
	// any, the node's next packets queue behind them, so that ending a
	// delay does not reorder what is already on the way.
	pending []atomic.Int64

	forwarded, blockedCount, lost, overflow, unroutable atomic.Uint64

	done chan struct{}
	wg   sync.WaitGroup
}

type delayed struct {
	packet []byte
	to     int
	due    time.Time
}

func newFabric(nodes []*Node) *fabric {
	f := &fabric{
		nodes:   nodes,
		prefix:  nodes[0].net.subnet,
		blocked: make([][]bool, len(nodes)),
		shape:   make([]Shaping, len(nodes)),
		lines:   make([]chan delayed, len(nodes)),
		pending: make([]atomic.Int64, len(nodes)),
		done:    make(chan struct{}),
	}
	for i := range nodes {
		f.blocked[i] = make([]bool, len(nodes))
		f.lines[i] = make(chan delayed, delayLineLimit)
	}
	f.wg.Add(2 * len(nodes))
	for i := range nodes {
		go f.read(i)
		go f.drain(i)
	}
	return f
}

// stop closes every port (their readers return) and ends the delay lines,
// dropping what they hold.
func (f *fabric) stop() {
	close(f.done)
	for _, node := range f.nodes {
		_ = node.port.Close()
	}
	f.wg.Wait()
}

// destination returns the index of the node packet is addressed to.
func (f *fabric) destination(packet []byte) (int, bool) {
	if len(packet) < 20 || packet[0]>>4 != 4 {
		return 0, false
	}
	dst := netip.AddrFrom4([4]byte(packet[16:20]))
	if !f.prefix.Contains(dst) {
		return 0, false
	}
	i := int(dst.As4()[3]) - 1
	if i < 0 || i >= len(f.nodes) {
		return 0, false
	}
	return i, true
}

// read forwards what node from sends until its port is closed.
func (f *fabric) read(from int) {
	defer f.wg.Done()
	port := f.nodes[from].port
	buf := make([]byte, 1<<16)
	rng := rand.New(rand.NewPCG(uint64(from), uint64(time.Now().UnixNano())))
	var lastDue time.Time
	for {
		n, err := port.Read(buf)
		if err != nil {
			return // closed by stop
		}
		packet := buf[:n]
		to, ok := f.destination(packet)
		if !ok {
			f.unroutable.Add(1)
			continue
		}
		f.mu.RLock()
		shape := f.shape[from]
		switch {
		case f.blocked[from][to]:
			f.blockedCount.Add(1)
		case shape.Loss > 0 && rng.Float64() < shape.Loss:
			f.lost.Add(1)
		case shape.Delay > 0 || shape.Jitter > 0 || f.pending[from].Load() > 0:
			due := time.Now().Add(shape.Delay)
			if shape.Jitter > 0 {
				due = due.Add(time.Duration(rng.Int64N(int64(2*shape.Jitter+1))) - shape.Jitter)
			}
			// No reordering: a packet never leaves before the one sent
			// before it (netem reorders with jitter; TCP between brokers
			// then sees spurious losses, which is not a slow link).
			if due.Before(lastDue) {
				due = lastDue
			}
			lastDue = due
			f.pending[from].Add(1)
			select {
			case f.lines[from] <- delayed{packet: append([]byte(nil), packet...), to: to, due: due}:
			default:
				f.pending[from].Add(-1)
				f.overflow.Add(1)
			}
		default:
			f.write(to, packet)
		}
		f.mu.RUnlock()
	}
}

// drain delivers node from's delayed packets when they are due.
func (f *fabric) drain(from int) {
	defer f.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-f.done:
			return
		case d := <-f.lines[from]:
			if wait := time.Until(d.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-f.done:
					return
				case <-timer.C:
				}
			}
			f.mu.RLock()
			if f.blocked[from][d.to] {
				f.blockedCount.Add(1)
			} else {
				f.write(d.to, d.packet)
			}
			f.pending[from].Add(-1)
			f.mu.RUnlock()
		}
	}
}

// write puts packet into node to's eth0. A TUN write never blocks; an
// error (the port closed by stop, the node's backlog full) loses the
// packet, as a wire would.
func (f *fabric) write(to int, packet []byte) {
	if _, err := f.nodes[to].port.Write(packet); err == nil {
		f.forwarded.Add(1)
	}
}

func (f *fabric) counters() Counters {
	return Counters{
		Forwarded:  f.forwarded.Load(),
		Blocked:    f.blockedCount.Load(),
		Lost:       f.lost.Load(),
		Overflow:   f.overflow.Load(),
		Unroutable: f.unroutable.Load(),
	}
}

// block drops packets from every node of from to every node of to, and
// the other way too when both is set, in one change (a node is never
// blocked from itself: its own traffic stays in its namespace).
func (f *fabric) block(from, to []*Node, both bool) {
	for _, node := range append(from[:len(from):len(from)], to...) {
		if node.net.sw != f {
			panic(fmt.Sprintf("netns: %s is a node of another Net", node))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range from {
		for _, b := range to {
			if a.index != b.index {
				f.blocked[a.index][b.index] = true
				if both {
					f.blocked[b.index][a.index] = true
				}
			}
		}
	}
}

func (f *fabric) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, row := range f.blocked {
		clear(row)
	}
}

func (f *fabric) setShape(from int, s Shaping) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shape[from] = s
}
