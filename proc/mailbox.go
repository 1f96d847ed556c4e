package proc

import "unsafe"

// nodeKind says what a mailbox node carries: a message for Receive, or a
// system signal the scheduler handles itself.
type nodeKind uint8

const (
	kindMessage   nodeKind = iota // a message for Receive
	kindLinkExit                  // a linked process exited; message holds its reason (error or nil)
	kindExit                      // Context.Exit (Erlang's exit/2); message holds the reason
	kindLink                      // from asks to be linked
	kindUnlink                    // from drops its link
	kindMonitor                   // from monitors the target under ref
	kindDemonitor                 // from drops monitor ref
)

// node is one queued message or signal. Nodes come from their shard's free
// list and go back to it as soon as they are taken out of a mailbox, so an
// empty mailbox holds no memory at all: a mailbox is just the tail pointer
// in the process struct.
//
// Ownership: a node belongs to exactly one of (the shard's free list, one
// mailbox), and only the shard's scheduler thread touches either.
type node struct {
	next    *node
	message any
	from    PID
	ref     uint64
	cost    uint32 // bytes it holds in the memory budget (nodeBytes + Sizer payload)
	kind    nodeKind
}

// nodeBytes is what one queued message costs in the memory budget.
const nodeBytes = int64(unsafe.Sizeof(node{}))

// nodeSlabSize is how many nodes the free list gets when it runs dry: one
// allocation per slab, none per message afterwards.
const nodeSlabSize = 256

// keepFreeNodes is how many free nodes an idle shard keeps; past it, going
// idle drops the free list, so a burst of queued messages does not hold its
// memory for the rest of the runtime's life (the collector frees a slab
// once none of its nodes is referenced).
const keepFreeNodes = 4 * nodeSlabSize

// allocNode takes a node from the free list, refilling it with a slab when
// it is empty.
func (s *shard) allocNode() *node {
	n := s.freeNodes
	if n == nil {
		slab := make([]node, nodeSlabSize)
		for i := range slab[1:] {
			slab[i+1].next = s.freeNodes
			s.freeNodes = &slab[i+1]
		}
		s.freeNodeCount += nodeSlabSize - 1
		return &slab[0]
	}
	s.freeNodes = n.next
	s.freeNodeCount--
	n.next = nil
	return n
}

// freeNode returns n to the free list, dropping its message so the free
// list keeps nothing alive.
func (s *shard) freeNode(n *node) {
	*n = node{next: s.freeNodes}
	s.freeNodes = n
	s.freeNodeCount++
}

// trimFreeNodes drops the free list when it holds more than keepFreeNodes
// (called when the shard goes idle).
func (s *shard) trimFreeNodes() {
	if s.freeNodeCount > keepFreeNodes {
		s.freeNodes, s.freeNodeCount = nil, 0
	}
}

// The mailbox is a circular singly linked list reached through its tail
// (tail.next is the head), so one pointer in the process struct holds it:
// the struct stays within one 64-byte cache line.

// hasMail reports whether p's mailbox is not empty.
func (p *process) hasMail() bool { return p.tail != nil }

// appendMailbox queues n at the tail of p's mailbox.
func (p *process) appendMailbox(n *node) {
	if p.tail == nil {
		n.next = n
	} else {
		n.next = p.tail.next
		p.tail.next = n
	}
	p.tail = n
	p.mailboxLen++
}

// popMailbox takes the head of p's non-empty mailbox.
func (p *process) popMailbox() *node {
	n := p.tail.next
	if n == p.tail {
		p.tail = nil
	} else {
		p.tail.next = n.next
	}
	n.next = nil
	p.mailboxLen--
	return n
}
