package netns

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Faults. Every one is reversible, and each takes effect for the packets
// the switch handles after the call returns (fabric.mu): none decided
// under the old state is still on its way then.
//
// A partition drops packets silently, in the switch, as a cut cable or a
// DROP rule does: a sender sees no error, its TCP retransmits and times
// out, which is what a cluster must live through. Taking a link down
// instead would answer the sender's own kernel at once (network
// unreachable) and would cut the node from every peer, not from some.

// Partition cuts every node of side from every node of other, both
// directions. Nodes on the same side still reach each other.
func (n *Net) Partition(side, other []*Node) {
	n.sw.block(side, other, true)
}

// Block drops what any node of from sends to any node of to, one
// direction only: to's packets still reach from. (A TCP connection needs
// both directions, so it stalls either way; one-way cuts matter to what
// uses datagrams, or to which side notices first.)
func (n *Net) Block(from, to []*Node) {
	n.sw.block(from, to, false)
}

// Isolate cuts node from every other node, both directions.
func (n *Net) Isolate(node *Node) {
	n.Partition([]*Node{node}, n.nodes)
}

// Heal ends every partition, Block and Isolate. Shaping and bandwidth
// limits stay.
func (n *Net) Heal() { n.sw.heal() }

// Counters returns what the switch did with the packets so far.
func (n *Net) Counters() Counters { return n.sw.counters() }

// Shaping is what a node's link does to the packets the node sends, as tc
// netem on the node's interface would (this kernel has no netem: the
// switch does it). The zero value is a plain link.
type Shaping struct {
	// Delay is added to every packet: the node's round trips grow by it.
	Delay time.Duration
	// Jitter varies each packet's delay uniformly within ±Jitter (clamped
	// so that no packet overtakes the one before it).
	Jitter time.Duration
	// Loss is the probability (0 to 1) that a packet is dropped.
	Loss float64
}

// Shape sets what node's link does to the packets the node sends;
// Shape(Shaping{}) ends it (packets already delayed still arrive, in
// order, before later ones).
func (n *Node) Shape(s Shaping) error {
	if s.Delay < 0 || s.Jitter < 0 || s.Loss < 0 || s.Loss > 1 {
		return fmt.Errorf("netns: Shaping %+v: delays at least 0, loss from 0 to 1", s)
	}
	n.net.sw.setShape(n.index, s)
	return nil
}

// tbfLatency bounds how long a packet may wait in the tbf queue (tc's
// latency: it sizes the queue); past it, packets are dropped as on a
// congested link.
const tbfLatency = 200 * time.Millisecond

// LimitBandwidth limits what node sends to bytesPerSecond with the
// kernel's token bucket filter (tc tbf on the node's eth0), or removes the
// limit when bytesPerSecond is 0.
func (n *Node) LimitBandwidth(bytesPerSecond int64) error {
	if bytesPerSecond < 0 {
		return fmt.Errorf("netns: bandwidth %d bytes/s: want at least 0", bytesPerSecond)
	}
	if bytesPerSecond == 0 {
		_, err := runTool(nil, "tc", "-n", n.ns, "qdisc", "del", "dev", "eth0", "root")
		return err
	}
	// The bucket holds at least one packet of the MTU (a smaller bucket
	// never passes a full packet) and 10 ms of the rate.
	burst := max(int64(2*DefaultMTU), bytesPerSecond/100)
	_, err := runTool(nil, "tc", "-n", n.ns, "qdisc", "replace", "dev", "eth0", "root", "tbf",
		"rate", strconv.FormatInt(bytesPerSecond*8, 10)+"bit",
		"burst", strconv.FormatInt(burst, 10),
		"latency", strconv.FormatInt(tbfLatency.Milliseconds(), 10)+"ms")
	if err != nil && strings.Contains(err.Error(), "qdisc kind is unknown") {
		return fmt.Errorf("%w: %v", ErrNoTBF, err)
	}
	return err
}

// ErrNoTBF is LimitBandwidth's error on a kernel without tbf
// (CONFIG_NET_SCH_TBF): a test may pass it to Unavailable.
var ErrNoTBF = errors.New("netns: this kernel has no tbf qdisc (CONFIG_NET_SCH_TBF)")
