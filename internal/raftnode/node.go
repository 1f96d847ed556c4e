package raftnode

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Node is one node's raft: its groups, the scheduler running them, the
// node-wide ticker and the transport to its peers.
type Node struct {
	cfg     Config
	raftLog raftLogger

	sched     scheduler
	transport *transport

	groupsMu sync.RWMutex
	groups   map[uint64]*group

	// activeMu guards active: the groups that are not quiescent, the only
	// ones the ticker touches. Taken under a group's inboxMu.
	activeMu sync.Mutex
	active   map[uint64]*group

	tickMu   sync.Mutex // one Tick at a time
	tickBuf  []*group
	tickNow  atomic.Int64
	stopOnce sync.Once
	stopped  atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup

	stats nodeStats
}

type nodeStats struct {
	ticks        atomic.Uint64
	groupTicks   atomic.Uint64
	groupRuns    atomic.Uint64
	readies      atomic.Uint64
	groupsFailed atomic.Uint64
}

// Stats are a node's counters since New.
type Stats struct {
	Ticks        uint64 // node-wide ticks
	GroupTicks   uint64 // ticks given to groups (quiescent ones get none)
	GroupRuns    uint64 // runs of a group on a worker
	Readies      uint64 // raft Readys handled
	GroupsFailed uint64
	Groups       int
	ActiveGroups int // not quiescent
	Transport    TransportStats
}

// New makes a node. Peers are added with AddPeer and groups with AddGroup;
// Start starts the scheduler, the transport and (unless ManualTicks) the
// ticker.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:     cfg,
		raftLog: raftLogger{cfg.Logger.With("raft", cfg.ID)},
		groups:  make(map[uint64]*group),
		active:  make(map[uint64]*group),
		done:    make(chan struct{}),
	}
	n.transport = newTransport(n)
	return n, nil
}

// ID is the node's id.
func (n *Node) ID() uint64 { return n.cfg.ID }

// Addr is the peer listener's address.
func (n *Node) Addr() string { return n.cfg.Listener.Addr().String() }

// AddPeer names a peer node and its peer address; a known peer's address is
// replaced (its connection redials).
func (n *Node) AddPeer(id uint64, addr string) error {
	if id == 0 || id == n.cfg.ID {
		return fmt.Errorf("raftnode: peer id %d", id)
	}
	n.transport.addPeer(id, addr)
	return nil
}

// Start starts the node's goroutines: the workers, the transport's
// (accept loop, one writer per peer, one reader per accepted connection) and
// the ticker.
func (n *Node) Start() {
	n.sched.start(n.cfg.Workers)
	n.transport.start()
	if !n.cfg.ManualTicks {
		n.wg.Add(1)
		go n.tickLoop()
	}
}

// AddGroup adds a raft group to the node. A group whose storage is empty
// starts with gc.Voters as its configuration; it starts awake (ticking).
func (n *Node) AddGroup(gc GroupConfig) error {
	g, err := newGroup(n, gc)
	if err != nil {
		return err
	}
	n.groupsMu.Lock()
	defer n.groupsMu.Unlock()
	if _, ok := n.groups[gc.ID]; ok {
		return fmt.Errorf("raftnode: group %d exists", gc.ID)
	}
	n.groups[gc.ID] = g
	n.activeMu.Lock()
	n.active[g.id] = g
	n.activeMu.Unlock()
	return nil
}

// RemoveGroup takes a group off the node (a deleted partition's replica):
// the group stops, the proposals it still holds are answered
// ErrGroupRemoved, its OnLeader is told 0, and it leaves the node's tables
// (groups, the ticked ones, the scheduler's queue); messages for it
// afterwards are counted as UnknownGroup and proposals answered
// ErrUnknownGroup, as for a group the node never had. When it returns, no
// callback of the group runs any more and nothing uses its storage, which is
// the caller's to close. It waits for the group's current run, if any: do
// not call it from a callback of the node's groups. Safe at any time but
// concurrently with Start.
func (n *Node) RemoveGroup(id uint64) error {
	n.groupsMu.Lock()
	g := n.groups[id]
	delete(n.groups, id)
	n.groupsMu.Unlock()
	if g == nil {
		return ErrUnknownGroup
	}
	g.inboxMu.Lock()
	g.removed = true
	n.deactivate(g) // and wakeLocked does not put it back
	g.inboxMu.Unlock()
	if n.sched.workersRun() {
		n.sched.enqueue(g) // its next run tears it down
		select {
		case <-g.gone:
			return nil
		case <-n.done: // stopping: the queue may never be run
		}
	}
	// No worker will run it (not started, or stopped): once the workers
	// are done it is this goroutine's.
	n.sched.wg.Wait()
	g.teardown()
	return nil
}

func (n *Node) group(id uint64) *group {
	n.groupsMu.RLock()
	g := n.groups[id]
	n.groupsMu.RUnlock()
	return g
}

// Propose proposes data to a group. done is called once by the group's
// worker: nil when the entry is in the leader's log (it is not committed
// yet: its commit is seen by Apply), ErrProposalDropped on a replica that
// is not the leader, or another error. done must not block.
func (n *Node) Propose(groupID uint64, data []byte, done func(error)) {
	switch g := n.group(groupID); {
	case n.stopped.Load():
		done(ErrStopped)
	case g == nil:
		done(ErrUnknownGroup)
	case len(data) > n.cfg.MaxFrameBytes-64<<10:
		done(ErrProposalTooLarge)
	default:
		g.propose(proposal{data: data, done: done})
	}
}

// ProposeSaved proposes data to a group as Propose does, but answers once
// the entry is saved in the leader's log (Storage.Save returned: written,
// and fsynced as raft's MustSync asked), with the entry's index and term:
// what a replicated partition needs to answer acks=1 with the entry's
// offset and to know which committed entry is its own (the same index with
// another term is a new leader's entry that replaced it). An error (index
// and term 0): ErrProposalDropped on a replica that is not the leader,
// ErrStopped, ErrUnknownGroup, ErrProposalTooLarge, ErrGroupFailed. done is
// called once, by the group's worker (or at once, for an error found
// before), and must not block.
func (n *Node) ProposeSaved(groupID uint64, data []byte, done func(index, term uint64, err error)) {
	switch g := n.group(groupID); {
	case n.stopped.Load():
		done(0, 0, ErrStopped)
	case g == nil:
		done(0, 0, ErrUnknownGroup)
	case len(data) > n.cfg.MaxFrameBytes-64<<10:
		done(0, 0, ErrProposalTooLarge)
	default:
		g.propose(proposal{data: data, saved: done})
	}
}

// ProposeConfChange proposes a configuration change (pb.ConfChange or
// pb.ConfChangeV2) to a group, answered as Propose. Once committed every
// replica applies it to raft before its Apply sees the entry.
func (n *Node) ProposeConfChange(groupID uint64, cc pb.ConfChangeI, done func(error)) {
	switch g := n.group(groupID); {
	case n.stopped.Load():
		done(ErrStopped)
	case g == nil:
		done(ErrUnknownGroup)
	default:
		g.propose(proposal{cc: cc, done: done})
	}
}

// Campaign makes this replica of a group campaign at once instead of
// waiting out an election timeout (a new group's chosen first leader: its
// preferred replica). Refused by peers that hear from a leader.
func (n *Node) Campaign(groupID uint64) error {
	return n.ask(groupID, func(g *group) { g.campaign = true })
}

// TransferLeadership asks this replica of a group, if it leads, to hand
// leadership to node to (raft's leadership transfer; Kafka's preferred
// leader election, ElectLeaders, will use it).
func (n *Node) TransferLeadership(groupID, to uint64) error {
	return n.ask(groupID, func(g *group) { g.transferTo = to })
}

// ask sets a request in a group's inbox (set runs under inboxMu), wakes
// the group if it is quiescent and schedules it.
func (n *Node) ask(groupID uint64, set func(*group)) error {
	g := n.group(groupID)
	if g == nil {
		return ErrUnknownGroup
	}
	g.inboxMu.Lock()
	set(g)
	if g.quiesced {
		g.wakeLocked()
	}
	g.inboxMu.Unlock()
	n.sched.enqueue(g)
	return nil
}

// CutPeer drops every frame to and from peer id while cut is set, as a
// network partition between the two nodes would (the peer is taken for
// down after an election timeout): fault injection for tests of what runs
// on raftnode, outside this package. Cut both nodes' sides for a clean
// partition.
func (n *Node) CutPeer(id uint64, cut bool) {
	if p := n.transport.peer(id); p != nil {
		p.cut.Store(cut)
	}
}

// Leader is the leader this replica of the group knows (0: none), and the
// term it last persisted.
func (n *Node) Leader(groupID uint64) (leader, term uint64) {
	g := n.group(groupID)
	if g == nil {
		return 0, 0
	}
	return g.leader.Load(), g.term.Load()
}

// Tick is one node-wide tick: the liveness heartbeat to each peer, peers
// not heard from for an election timeout taken for down (waking the groups
// shared with them), and one raft tick for each group that is not quiescent.
// Quiescent groups cost nothing here. The ticker goroutine calls it every
// TickInterval; with ManualTicks the owner does.
func (n *Node) Tick() {
	if n.stopped.Load() {
		return
	}
	n.tickMu.Lock()
	defer n.tickMu.Unlock()
	now := n.tickNow.Add(1)
	n.stats.ticks.Add(1)
	for _, peer := range n.transport.tick(now, int64(n.cfg.ElectionTicks)) {
		n.peerDown(peer)
	}

	n.activeMu.Lock()
	n.tickBuf = n.tickBuf[:0]
	for _, g := range n.active {
		n.tickBuf = append(n.tickBuf, g)
	}
	n.activeMu.Unlock()
	for i, g := range n.tickBuf {
		g.inboxMu.Lock()
		g.ticks++
		g.inboxMu.Unlock()
		n.sched.enqueue(g)
		n.tickBuf[i] = nil
	}
	n.stats.groupTicks.Add(uint64(len(n.tickBuf)))
}

// peerDown wakes every group that has peer among its voters: their
// liveness came from the node's, and now they must elect on their own.
// O(groups), once per peer failure.
func (n *Node) peerDown(peer uint64) {
	n.cfg.Logger.Warn("raft peer down: waking the groups it shares", "node", n.cfg.ID, "peer", peer)
	n.groupsMu.RLock()
	groups := make([]*group, 0, len(n.groups))
	for _, g := range n.groups {
		groups = append(groups, g)
	}
	n.groupsMu.RUnlock()
	for _, g := range groups {
		g.inboxMu.Lock()
		g.peerDown = append(g.peerDown, peer)
		if g.quiesced {
			g.wakeLocked()
		}
		g.inboxMu.Unlock()
		n.sched.enqueue(g)
	}
}

func (n *Node) activate(g *group) {
	n.activeMu.Lock()
	n.active[g.id] = g
	n.activeMu.Unlock()
}

func (n *Node) deactivate(g *group) {
	n.activeMu.Lock()
	delete(n.active, g.id)
	n.activeMu.Unlock()
}

func (n *Node) tickLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
			n.Tick()
		}
	}
}

// Stop stops the node: the ticker, the transport (listener and every
// connection closed), then the workers once their current group is done.
// Proposals not yet taken are answered ErrStopped. Storage is left as it is:
// a node made again on the same storages resumes.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.stopped.Store(true)
		close(n.done)
		n.wg.Wait()
		n.transport.stop()
		n.sched.stop()
		n.groupsMu.RLock()
		defer n.groupsMu.RUnlock()
		for _, g := range n.groups {
			g.inboxMu.Lock()
			props := g.proposals
			g.proposals = nil
			g.inboxMu.Unlock()
			for _, p := range props {
				p.answer(ErrStopped)
			}
			// The workers are done: nothing will commit or apply here any
			// more, so whoever waits on this replica's leadership is told.
			g.notifyLeader(0, g.notifiedTerm)
		}
	})
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.groupsMu.RLock()
	groups := len(n.groups)
	n.groupsMu.RUnlock()
	n.activeMu.Lock()
	active := len(n.active)
	n.activeMu.Unlock()
	return Stats{
		Ticks:        n.stats.ticks.Load(),
		GroupTicks:   n.stats.groupTicks.Load(),
		GroupRuns:    n.stats.groupRuns.Load(),
		Readies:      n.stats.readies.Load(),
		GroupsFailed: n.stats.groupsFailed.Load(),
		Groups:       groups,
		ActiveGroups: active,
		Transport:    n.transport.stats(),
	}
}

var _ raft.Logger = raftLogger{}

// busy says whether the scheduler has groups queued or running, or the
// queue of a connected peer holds messages (tests wait for it to clear).
func (n *Node) busy() bool {
	n.sched.mu.Lock()
	queued := len(n.sched.queue) - n.sched.head
	n.sched.mu.Unlock()
	if queued > 0 || n.sched.running.Load() > 0 {
		return true
	}
	n.transport.mu.RLock()
	defer n.transport.mu.RUnlock()
	for _, p := range n.transport.peers {
		p.mu.Lock()
		q := len(p.queue)
		p.mu.Unlock()
		if q > 0 && p.connected.Load() {
			return true
		}
	}
	return false
}

// votersOf is the voters a group's replica applied last (tests; read after
// the group's runs are done).
func (n *Node) votersOf(groupID uint64) []uint64 {
	g := n.group(groupID)
	if g == nil {
		return nil
	}
	done := make(chan []uint64, 1)
	g.inboxMu.Lock()
	g.inspect = append(g.inspect, func() { done <- slices.Sorted(slices.Values(g.voters)) })
	g.inboxMu.Unlock()
	n.sched.enqueue(g)
	return <-done
}
