package proc

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Process table pages: slots live in fixed pages so a *process stays valid
// while the table grows, and growing never copies the table.
const (
	pageShift = 10
	pageSize  = 1 << pageShift
)

type processFlags uint8

const (
	flagAlive    processFlags = 1 << iota
	flagQueued                // in the ready ring, or running its turn (so sends to it do not queue it again)
	flagTrapExit              // exit signals become Exit messages
	flagRunning               // one of its callbacks is on the scheduler's stack
	flagExiting               // exit has begun (Terminate is running)
	// flagBlocked: the process sent to a full MailboxBlock mailbox and gets
	// no turn until that mailbox has room. flagQueued stays set meanwhile,
	// so deliveries to it do not queue it; unblocking queues it.
	flagBlocked
	// flagReserved: the slot is set aside for a process another thread is
	// spawning here (SpawnOptions.Spread); it is neither free nor alive.
	flagReserved
)

// process is one slot of the process table. An idle process costs this
// struct, its name entry, and its behaviour: no goroutine, no mailbox
// buffer (tail is nil when empty), no extra block unless it uses
// links, monitors, a bounded mailbox or a receive timeout.
type process struct {
	behaviour  Behaviour // nil when the slot is free
	name       string    // registered name, "" if anonymous
	tail       *node     // the mailbox: a circular list, tail.next is its head; nil when empty
	extra      *processExtra
	mailboxLen uint32
	generation uint32 // of the current (or next) occupant; never 0
	flags      processFlags
}

// processBytes is what a process costs in the memory budget besides its
// name.
const (
	processBytes   = int64(unsafe.Sizeof(process{}))
	nameEntryBytes = 48 // a registry map slot: key header, PID, control byte, load factor
)

// processExtra holds what few processes need, allocated on first need.
type processExtra struct {
	links          []PID
	monitors       []monitorEntry // processes watching this one
	parent         PID            // the spawner, when spawned with Link
	mailboxLimit   uint32
	mailboxPolicy  MailboxPolicy
	receiveTimeout time.Duration
	lastActivity   int64 // nanoseconds on the runtime's time line
	receiveArmed   bool
	// parked holds messages that found the MailboxBlock mailbox full (from
	// outside the runtime, or from senders now blocked); while it is not
	// empty the process is marked full in Runtime.full, outside senders to
	// it wait, and blockedSenders get no turns.
	parked         []envelope
	blockedSenders []PID
}

type monitorEntry struct {
	ref     MonitorRef
	watcher PID
}

// envelope is a delivery or request that crosses into a shard from another
// thread: another shard's scheduler, or a caller outside the runtime.
type envelope struct {
	to, from PID
	message  any
	ref      uint64
	kind     nodeKind
	external bool          // sent from outside the runtime (Runtime.Send)
	spawn    *spawnRequest // non-nil: a Spawn from outside while running
}

type spawnRequest struct {
	name      string
	behaviour Behaviour
	options   SpawnOptions
	done      chan spawnResult // nil for a Spread spawn: nobody waits
	reserved  PID              // a Spread spawn: the slot reserved for it
	parent    PID
}

type spawnResult struct {
	pid PID
	err error
}

// shard is one scheduler thread and everything it owns: a part of the
// process table, its mailboxes and their nodes, its ready ring and timers.
// Only the shard's own goroutine touches those fields while the runtime
// runs (and the caller of a direct operation while it does not, under
// Runtime.runMu); other threads reach it only through the inbox.
type shard struct {
	rt    *Runtime
	id    uint32
	count uint32 // shards in the runtime: global index = local index*count + id

	pages     []*[pageSize]process
	slots     uint32   // slots ever created
	freeSlots []uint32 // local indexes of free slots, reused last-in first-out
	live      int

	ready         readyRing
	freeNodes     *node
	freeNodeCount int
	timers        timerHeap
	timerSeq      uint64

	deterministic   bool
	choiceWindow    int
	rng             splitmix64
	virtual         bool
	virtualNanos    int64
	messagesPerTurn int

	contexts []*Context // reused per nesting depth, so a callback allocates none
	depth    int

	usedBytes   int64
	budgetBytes int64
	nextRef     uint64

	turns     uint64
	delivered uint64
	dropped   uint64

	journalLine []byte

	// Inbox: envelopes from other threads. inboxMu guards inbox;
	// inboxPending mirrors len(inbox) > 0 for a lock-free check.
	inboxMu      sync.Mutex
	inbox        []envelope
	inboxSpare   []envelope
	inboxPending atomic.Bool
	sleeping     atomic.Bool
	wake         chan struct{}
	// outsideQueued counts envelopes from outside the runtime in inbox
	// (guarded by inboxMu); outside senders wait on inboxRoom while it is
	// at Options.OutsideQueueLimit, so the queue from outside is bounded.
	// Envelopes between scheduler threads are not bounded here: a thread
	// that waited for another could deadlock with it.
	outsideQueued int
	inboxRoom     sync.Cond

	// reserved is the pool of slots set aside for Spread spawns from other
	// threads (guarded by reserveMu, a leaf); reservedCount mirrors its
	// length for the owner's lock-free check.
	reserveMu     sync.Mutex
	reserved      []PID
	reservedCount atomic.Int32
}

func newShard(rt *Runtime, id, count uint32) *shard {
	s := &shard{
		rt:              rt,
		id:              id,
		count:           count,
		deterministic:   rt.opts.Deterministic,
		choiceWindow:    rt.opts.ChoiceWindow,
		rng:             splitmix64{state: rt.opts.Seed},
		virtual:         rt.opts.Deterministic,
		messagesPerTurn: rt.opts.MessagesPerTurn,
		wake:            make(chan struct{}, 1),
	}
	s.inboxRoom.L = &s.inboxMu
	if rt.opts.MemoryBudgetBytes > 0 {
		s.budgetBytes = rt.opts.MemoryBudgetBytes / int64(count)
	}
	return s
}

func (s *shard) global(local uint32) uint32 { return local*s.count + s.id }
func (s *shard) local(global uint32) uint32 {
	if s.count == 1 {
		return global // no division on the single-thread path
	}
	return global / s.count
}

func (s *shard) slot(local uint32) *process {
	return &s.pages[local>>pageShift][local&(pageSize-1)]
}

// lookup returns the live process pid names, or nil if pid is stale or not
// on this shard. A zero PID never matches: slot generations start at 1.
func (s *shard) lookup(pid PID) *process {
	local := pid.Index
	if s.count != 1 {
		if local%s.count != s.id {
			return nil
		}
		local /= s.count
	}
	if local >= s.slots {
		return nil
	}
	p := &s.pages[local>>pageShift][local&(pageSize-1)]
	if p.generation != pid.Generation || p.flags&flagAlive == 0 {
		return nil
	}
	return p
}

// nowNanos is the time on the runtime's time line: virtual in deterministic
// mode, else the injected clock's time since the runtime started.
func (s *shard) nowNanos() int64 {
	if s.virtual {
		return s.virtualNanos
	}
	return int64(s.rt.clock.Now().Sub(s.rt.start))
}

func (s *shard) now() time.Time {
	if s.virtual {
		return s.rt.opts.VirtualStart.Add(time.Duration(s.virtualNanos))
	}
	return s.rt.clock.Now()
}

// pushContext returns the context for a callback one level deeper.
func (s *shard) pushContext(self, sender PID, p *process) *Context {
	if s.depth == len(s.contexts) {
		s.contexts = append(s.contexts, &Context{shard: s})
	}
	c := s.contexts[s.depth]
	s.depth++
	c.self, c.sender, c.proc = self, sender, p
	c.stop, c.stopReason = false, nil
	p.flags |= flagRunning
	return c
}

func (s *shard) popContext(c *Context) {
	s.depth--
	c.proc.flags &^= flagRunning
	c.proc = nil
	c.message = nil
}

// runningContext returns the context of p's callback on the stack, if any.
func (s *shard) runningContext(p *process) *Context {
	for i := s.depth - 1; i >= 0; i-- {
		if s.contexts[i].proc == p {
			return s.contexts[i]
		}
	}
	return nil
}

// spawn creates a process on this shard. parent is the spawning process
// (zero from outside).
func (s *shard) spawn(name string, b Behaviour, opts SpawnOptions, parent PID) (PID, error) {
	if err := validSpawn(b, opts); err != nil {
		return PID{}, err
	}
	if s.budgetBytes > 0 && s.usedBytes+processBytes+int64(len(name)) > s.budgetBytes {
		return PID{}, ErrMemoryBudget // refused before a page of slots could be allocated
	}
	if !s.rt.reserveLive() {
		return PID{}, ErrTooManyProcesses
	}
	return s.start(s.takeSlot(), name, b, opts, parent, false)
}

func validSpawn(b Behaviour, opts SpawnOptions) error {
	if b == nil {
		return errNilBehaviour
	}
	if opts.MailboxLimit < 0 || opts.MailboxFull > MailboxBlock {
		return errBadSpawnOptions
	}
	return nil
}

// reserveLive counts a process about to start, refusing past MaxProcesses.
// It is reserved before a slot is taken, so threads spawning at once
// cannot pass the limit together.
func (rt *Runtime) reserveLive() bool {
	if live := rt.live.Add(1); rt.opts.MaxProcesses > 0 && live > int64(rt.opts.MaxProcesses) {
		rt.live.Add(-1)
		return false
	}
	return true
}

// takeSlot returns a free slot (last freed first) or a new one.
func (s *shard) takeSlot() uint32 {
	if n := len(s.freeSlots); n > 0 {
		local := s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
		return local
	}
	if s.slots>>pageShift == uint32(len(s.pages)) {
		s.pages = append(s.pages, new([pageSize]process))
	}
	local := s.slots
	s.slots++
	s.slot(local).generation = 1
	return local
}

// start brings a process to life in slot local, whose live count is
// already reserved. remote says the spawner is on another thread
// (SpawnOptions.Spread): it already holds its side of a Link and learns of
// a failure to start only by the link's exit signal.
func (s *shard) start(local uint32, name string, b Behaviour, opts SpawnOptions, parent PID, remote bool) (PID, error) {
	p := s.slot(local)
	pid := PID{Index: s.global(local), Generation: p.generation}
	fail := func(err error) (PID, error) {
		s.freeSlots = append(s.freeSlots, local)
		s.rt.live.Add(-1)
		if remote && opts.Link {
			_ = s.send(parent, pid, kindLinkExit, err, 0)
		}
		return PID{}, err
	}
	cost := processBytes
	if name != "" {
		cost += int64(len(name)) + nameEntryBytes
	}
	if s.budgetBytes > 0 && s.usedBytes+cost > s.budgetBytes {
		return fail(ErrMemoryBudget)
	}
	if name != "" && !s.rt.register(name, pid) {
		return fail(ErrNameTaken)
	}
	p.behaviour, p.name, p.flags = b, name, flagAlive
	if opts.TrapExit {
		p.flags |= flagTrapExit
	}
	if opts.MailboxLimit > 0 {
		ex := p.ensureExtra()
		ex.mailboxLimit, ex.mailboxPolicy = uint32(opts.MailboxLimit), opts.MailboxFull
	}
	s.usedBytes += cost
	s.live++
	if s.rt.journal != nil {
		s.journalSpawn(pid, name, parent)
	}
	if opts.Link && !parent.IsZero() {
		if pp := s.lookup(parent); pp != nil {
			p.ensureExtra().parent = parent
			addLink(pp, pid)
			addLink(p, parent)
		} else if remote {
			p.ensureExtra().parent = parent
			addLink(p, parent) // the spawner linked its side when it took the PID
		}
	}
	if in, ok := b.(Initializer); ok {
		c := s.pushContext(pid, parent, p)
		err := callInit(in, c)
		stop, stopReason := c.stop, c.stopReason
		s.popContext(c)
		if err == nil && stop {
			err = stopReason
			if err == nil {
				err = ErrShutdown
			}
		}
		if err != nil {
			// OTP: a failed init answers the spawner with the reason; the
			// spawner is not also killed by the link. A remote spawner has
			// no answer but the link's exit signal, which exit sends.
			if !parent.IsZero() && !remote {
				removeLink(p, parent)
				if pp := s.lookup(parent); pp != nil {
					removeLink(pp, pid)
				}
			}
			s.exit(p, pid, err)
			return PID{}, err
		}
	}
	return pid, nil
}

// Spread spawns: a shard keeps a pool of reserved slots that other
// threads take PIDs from without waiting for it, then send it the spawn.
const (
	reservePoolLow  = 32
	reservePoolHigh = 128
)

// refillReserve tops the pool of reserved slots up (the owner's thread,
// between turns).
func (s *shard) refillReserve() {
	s.reserveMu.Lock()
	for len(s.reserved) < reservePoolHigh {
		local := s.takeSlot()
		p := s.slot(local)
		p.flags = flagReserved
		s.reserved = append(s.reserved, PID{Index: s.global(local), Generation: p.generation})
	}
	s.reservedCount.Store(int32(len(s.reserved)))
	s.reserveMu.Unlock()
}

// takeReserved returns a reserved PID of this shard for a spawner on
// another thread, if the pool has one.
func (s *shard) takeReserved() (PID, bool) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	n := len(s.reserved)
	if n == 0 {
		return PID{}, false
	}
	pid := s.reserved[n-1]
	s.reserved = s.reserved[:n-1]
	s.reservedCount.Store(int32(n - 1))
	return pid, true
}

// startReserved materialises a process spawned from another thread into
// the slot reserved for it.
func (s *shard) startReserved(req *spawnRequest) {
	local := s.local(req.reserved.Index)
	p := s.slot(local)
	if p.flags&flagReserved == 0 || p.generation != req.reserved.Generation {
		panic("proc: spawn into a slot that was not reserved for it") // a broken invariant, not a user error
	}
	p.flags = 0
	_, _ = s.start(local, req.name, req.behaviour, req.options, req.parent, true)
}

func (p *process) ensureExtra() *processExtra {
	if p.extra == nil {
		p.extra = &processExtra{}
	}
	return p.extra
}

func addLink(p *process, other PID) {
	ex := p.ensureExtra()
	for _, l := range ex.links {
		if l == other {
			return
		}
	}
	ex.links = append(ex.links, other)
}

// removeLink drops other from p's links and reports whether it was there.
func removeLink(p *process, other PID) bool {
	if p.extra == nil {
		return false
	}
	links := p.extra.links
	for i, l := range links {
		if l == other {
			links[i] = links[len(links)-1]
			p.extra.links = links[:len(links)-1]
			return true
		}
	}
	return false
}

func callInit(in Initializer, c *Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return in.Init(c)
}

func callTerminate(t Terminator, c *Context, reason error) {
	defer func() { _ = recover() }() // a panicking Terminate must not stop the exit
	t.Terminate(c, reason)
}

// send delivers a message or signal from this shard's thread to any
// process: directly when the target is on this shard, through its shard's
// inbox otherwise.
func (s *shard) send(to, from PID, kind nodeKind, message any, ref uint64) error {
	if s.count > 1 {
		if owner := s.rt.shards[to.Index%s.count]; owner != s {
			s.rt.work.Add(1) // the envelope is work until its owner takes it (see Runtime.work)
			owner.push(envelope{to: to, from: from, kind: kind, message: message, ref: ref})
			return nil
		}
	}
	return s.deliver(to, from, kind, message, ref)
}

// deliver queues a message or signal in a process of this shard.
func (s *shard) deliver(to, from PID, kind nodeKind, message any, ref uint64) error {
	p := s.lookup(to)
	if p == nil {
		return s.deadLetter(to, from, kind, ref)
	}
	cost := nodeBytes
	if kind == kindMessage {
		if ex := p.extra; ex != nil && ex.mailboxLimit > 0 && p.mailboxLen >= ex.mailboxLimit {
			switch ex.mailboxPolicy {
			case MailboxDrop:
				s.dropped++
				return nil
			case MailboxBlock:
				if s.blockSender(p, to, from, message) {
					return nil
				}
			}
			return ErrMailboxFull
		}
		if s.budgetBytes > 0 {
			// Payload sizes count only under a budget: the type check
			// costs a few nanoseconds per message.
			if sz, ok := message.(Sizer); ok {
				cost += int64(sz.SizeBytes())
			}
			if s.usedBytes+cost > s.budgetBytes {
				return ErrMemoryBudget
			}
		}
	}
	n := s.allocNode()
	n.message, n.from, n.ref, n.kind, n.cost = message, from, ref, kind, uint32(cost)
	p.appendMailbox(n)
	s.usedBytes += cost
	if p.flags&flagQueued == 0 {
		p.flags |= flagQueued
		s.ready.push(to)
	}
	return nil
}

// deadLetter answers a delivery to a process that no longer exists: a link
// or monitor request gets its noproc answer, a message is reported stale.
func (s *shard) deadLetter(to, from PID, kind nodeKind, ref uint64) error {
	switch kind {
	case kindLink:
		_ = s.send(from, to, kindLinkExit, ErrNoProcess, 0)
	case kindMonitor:
		_ = s.send(from, to, kindMessage, Down{Ref: MonitorRef(ref), PID: to, Reason: ErrNoProcess}, 0)
	case kindMessage:
		return ErrNoProcess
	}
	return nil
}

// choose picks the offset in the ready ring of the next process to run:
// in deterministic mode the seeded PRNG's choice among the first
// choiceWindow entries (the longest waiting), the head otherwise.
func (s *shard) choose() int {
	if s.deterministic && s.ready.count > 1 {
		return s.rng.below(min(s.ready.count, s.choiceWindow))
	}
	return 0
}

// runTurns runs up to max turns, and ends the process whose Receive
// panicked. Receive is only ever called at depth 0 (Init and Terminate,
// which may run nested, recover on their own), so the panicking process is
// contexts[0]'s.
func (s *shard) runTurns(max int) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if s.depth == 0 {
			panic(r) // not from a callback: a bug of the runtime itself
		}
		c := s.contexts[0]
		p, pid := c.proc, c.self
		for s.depth > 0 {
			s.popContext(s.contexts[s.depth-1])
		}
		s.exit(p, pid, &PanicError{Value: r})
	}()
	for i := 0; i < max && s.ready.count > 0; i++ {
		s.runTurn()
	}
}

// runTurn runs the next ready process for up to messagesPerTurn messages.
// It reports false when the ring held only stale entries.
func (s *shard) runTurn() bool {
	pid := s.ready.take(s.choose())
	p := s.lookup(pid)
	if p == nil {
		return false
	}
	s.turns++
	// flagQueued stays set during the turn: a send to p from its own
	// handler must not queue it again; it is requeued below if needed.
	for budget := s.messagesPerTurn; budget > 0 && p.hasMail(); budget-- {
		n := p.popMailbox()
		kind, message, from, ref := n.kind, n.message, n.from, n.ref
		s.usedBytes -= int64(n.cost)
		s.freeNode(n)
		if p.extra != nil && len(p.extra.parked) > 0 {
			s.unpark(p)
		}
		if kind != kindMessage {
			if s.handleSignal(p, pid, kind, from, message, ref) {
				return true // p exited
			}
			continue
		}
		if s.handleMessage(p, pid, from, message) {
			return true
		}
		if p.flags&flagBlocked != 0 {
			return true // no more turns until the mailbox it filled has room
		}
	}
	p.flags &^= flagQueued
	if p.hasMail() {
		p.flags |= flagQueued
		s.ready.push(pid)
	}
	return true
}

// handleMessage runs p's Receive on one message and reports whether p
// exited.
func (s *shard) handleMessage(p *process, pid, from PID, message any) bool {
	s.delivered++
	if s.rt.journal != nil && s.rt.opts.JournalDeliveries {
		s.journalDeliver(from, pid, message)
	}
	if ex := p.extra; ex != nil && ex.receiveTimeout > 0 {
		ex.lastActivity = s.nowNanos()
	}
	c := s.pushContext(pid, from, p)
	c.message = message
	// No recover here: a panic unwinds to runTurns, which ends this
	// process (a deferred recover per message would cost an eighth of a
	// delivery).
	err := p.behaviour.Receive(c, message)
	stop, stopReason := c.stop, c.stopReason
	s.popContext(c)
	if err != nil || stop {
		if err == nil {
			err = stopReason
		}
		s.exit(p, pid, err)
		return true
	}
	return false
}

// handleSignal acts on a system signal taken from p's mailbox and reports
// whether p exited.
func (s *shard) handleSignal(p *process, pid PID, kind nodeKind, from PID, message any, ref uint64) bool {
	reason, _ := message.(error)
	switch kind {
	case kindLinkExit:
		if !removeLink(p, from) {
			return false // unlinked meanwhile: the signal no longer concerns p
		}
		if p.flags&flagTrapExit != 0 {
			return s.handleMessage(p, pid, from, Exit{From: from, Reason: reason})
		}
		if reason == nil {
			return false // a normal exit does not take linked processes along
		}
		s.exit(p, pid, reason)
		return true
	case kindExit:
		if p.flags&flagTrapExit != 0 {
			return s.handleMessage(p, pid, from, Exit{From: from, Reason: reason})
		}
		if reason == nil {
			return false
		}
		s.exit(p, pid, reason)
		return true
	case kindLink:
		addLink(p, from)
	case kindUnlink:
		removeLink(p, from)
	case kindMonitor:
		ex := p.ensureExtra()
		ex.monitors = append(ex.monitors, monitorEntry{ref: MonitorRef(ref), watcher: from})
	case kindDemonitor:
		removeMonitor(p, MonitorRef(ref))
	}
	return false
}

func removeMonitor(p *process, ref MonitorRef) {
	if p.extra == nil {
		return
	}
	ms := p.extra.monitors
	for i, m := range ms {
		if m.ref == ref {
			copy(ms[i:], ms[i+1:]) // keep the order: Down messages go out in monitor order
			p.extra.monitors = ms[:len(ms)-1]
			return
		}
	}
}

// exit ends process p with reason (nil: normal): Terminate, journal,
// name, links, monitors, mailbox, slot. A process whose callback is on the
// stack is only marked; it exits when that callback returns.
func (s *shard) exit(p *process, pid PID, reason error) {
	if p.flags&flagAlive == 0 || p.flags&flagExiting != 0 {
		return
	}
	if p.flags&flagRunning != 0 {
		if c := s.runningContext(p); c != nil {
			c.stop, c.stopReason = true, reason
			return
		}
	}
	p.flags |= flagExiting
	if t, ok := p.behaviour.(Terminator); ok {
		c := s.pushContext(pid, PID{}, p)
		callTerminate(t, c, reason)
		s.popContext(c)
	}
	if s.rt.journal != nil {
		s.journalExit(pid, reason)
	}
	if p.name != "" {
		s.rt.unregister(p.name, pid)
		s.usedBytes -= int64(len(p.name)) + nameEntryBytes
	}
	if ex := p.extra; ex != nil {
		for _, l := range ex.links {
			_ = s.send(l, pid, kindLinkExit, reason, 0)
		}
		for _, m := range ex.monitors {
			_ = s.send(m.watcher, pid, kindMessage, Down{Ref: m.ref, PID: pid, Reason: reason}, 0)
		}
	}
	if p.extra != nil && len(p.extra.parked) > 0 {
		s.dropped += uint64(len(p.extra.parked))
		p.extra.parked = nil
		s.rt.markRoom(pid)
		s.unblockSenders(p.extra)
	}
	for p.hasMail() {
		n := p.popMailbox()
		s.usedBytes -= int64(n.cost)
		from, kind, ref := n.from, n.kind, n.ref
		s.freeNode(n)
		// A link or monitor request still queued (from another thread) is
		// answered as if it had arrived just after the exit.
		switch kind {
		case kindLink:
			_ = s.send(from, pid, kindLinkExit, reason, 0)
		case kindMonitor:
			_ = s.send(from, pid, kindMessage, Down{Ref: MonitorRef(ref), PID: pid, Reason: reason}, 0)
		}
	}
	p.behaviour, p.name, p.extra, p.flags = nil, "", nil, 0
	p.generation++
	if p.generation == 0 {
		p.generation = 1
	}
	s.freeSlots = append(s.freeSlots, s.local(pid.Index))
	s.usedBytes -= processBytes
	s.live--
	s.rt.live.Add(-1)
}

// kill stops pid now if it is on this shard (untrappable), else signals its
// shard.
func (s *shard) kill(pid, from PID, reason error) {
	if p := s.lookup(pid); p != nil {
		s.exit(p, pid, reason)
		return
	}
	if s.count > 1 && pid.Index%s.count != s.id {
		s.rt.work.Add(1)
		s.rt.shards[pid.Index%s.count].push(envelope{to: pid, from: from, kind: kindExit, message: killSignal{reason}})
	}
}

// killSignal marks a cross-shard Kill: untrappable, unlike kindExit.
type killSignal struct{ reason error }

// push hands an envelope to this shard from another thread.
func (s *shard) push(e envelope) {
	s.inboxMu.Lock()
	s.inbox = append(s.inbox, e)
	s.inboxPending.Store(true)
	s.inboxMu.Unlock()
	s.wakeIfSleeping()
}

// wakeIfSleeping wakes the shard's thread after an envelope was added. The
// thread sets sleeping before its last look at the inbox, so either it sees
// the envelope or this sees it sleeping.
func (s *shard) wakeIfSleeping() {
	if s.sleeping.Load() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// pushOutside hands an envelope from outside the runtime to this shard,
// waiting while the outside queue is full.
func (s *shard) pushOutside(e envelope) {
	s.inboxMu.Lock()
	for s.outsideQueued >= s.rt.opts.OutsideQueueLimit {
		s.rt.senderWaits.Add(1)
		s.inboxRoom.Wait()
	}
	s.outsideQueued++
	s.inbox = append(s.inbox, e)
	s.inboxPending.Store(true)
	s.inboxMu.Unlock()
	s.wakeIfSleeping()
}

// drainInbox applies the envelopes other threads left; it returns how many.
func (s *shard) drainInbox() int {
	if !s.inboxPending.Load() {
		return 0
	}
	s.inboxMu.Lock()
	batch := s.inbox
	s.inbox = s.inboxSpare[:0]
	s.inboxPending.Store(false)
	if s.outsideQueued > 0 {
		s.outsideQueued = 0
		s.inboxRoom.Broadcast()
	}
	s.inboxMu.Unlock()
	for i := range batch {
		e := &batch[i]
		switch {
		case e.spawn != nil && !e.spawn.reserved.IsZero():
			s.startReserved(e.spawn)
		case e.spawn != nil:
			pid, err := s.spawn(e.spawn.name, e.spawn.behaviour, e.spawn.options, PID{})
			e.spawn.done <- spawnResult{pid, err}
		case e.kind == kindExit:
			if k, ok := e.message.(killSignal); ok {
				if p := s.lookup(e.to); p != nil {
					s.exit(p, e.to, k.reason)
				}
				break
			}
			_ = s.deliver(e.to, e.from, e.kind, e.message, e.ref)
		default:
			err := s.deliver(e.to, e.from, e.kind, e.message, e.ref)
			if err == ErrMailboxFull && e.external && s.park(*e) {
				break
			}
			if err != nil && err != ErrNoProcess {
				s.dropped++ // cross-thread sends cannot return the error: they are counted
			}
		}
		*e = envelope{}
	}
	s.inboxSpare = batch[:0]
	return len(batch)
}

// fireTimers fires every timer due at or before nowNanos; it returns how
// many fired.
func (s *shard) fireTimers(nowNanos int64) int {
	fired := 0
	for len(s.timers) > 0 && s.timers[0].deadlineNanos <= nowNanos {
		t := s.timers.remove(0)
		fired++
		if t.receiveTimer {
			s.fireReceiveTimeout(t, nowNanos)
			continue
		}
		_ = s.send(t.to, t.from, kindMessage, t.message, 0)
		t.message = nil
	}
	return fired
}

// fireReceiveTimeout delivers Timeout to an idle process whose receive
// timeout has passed, or re-arms the timer for the rest of the timeout if a
// message came meanwhile (one timer per process, never one per message).
func (s *shard) fireReceiveTimeout(t *timerEntry, nowNanos int64) {
	p := s.lookup(t.to)
	if p == nil || p.extra == nil {
		return
	}
	ex := p.extra
	ex.receiveArmed = false
	if ex.receiveTimeout <= 0 {
		return
	}
	due := ex.lastActivity + int64(ex.receiveTimeout)
	if due <= nowNanos {
		ex.lastActivity = nowNanos
		_ = s.deliver(t.to, PID{}, kindMessage, Timeout{}, 0)
		due = nowNanos + int64(ex.receiveTimeout)
	}
	s.armReceiveTimer(t.to, ex, due)
}

func (s *shard) armReceiveTimer(pid PID, ex *processExtra, deadlineNanos int64) {
	s.timerSeq++
	ex.receiveArmed = true
	s.timers.push(&timerEntry{deadlineNanos: deadlineNanos, seq: s.timerSeq, to: pid, receiveTimer: true})
}

// park keeps an outside message for a full MailboxBlock mailbox and marks
// the target full, so outside senders wait (Runtime.Send). It reports false
// when the target's policy is not MailboxBlock.
func (s *shard) park(e envelope) bool {
	p := s.lookup(e.to)
	if p == nil || p.extra == nil || p.extra.mailboxPolicy != MailboxBlock {
		return false
	}
	if len(p.extra.parked) == 0 {
		s.rt.markFull(e.to)
	}
	p.extra.parked = append(p.extra.parked, e)
	return true
}

// unpark moves parked messages into p's mailbox while it has room, and
// lets outside senders go once none is left.
func (s *shard) unpark(p *process) {
	ex := p.extra
	moved := 0
	for moved < len(ex.parked) && p.mailboxLen < ex.mailboxLimit {
		e := ex.parked[moved]
		if err := s.deliver(e.to, e.from, e.kind, e.message, e.ref); err != nil {
			break // the memory budget refused it: keep it parked
		}
		moved++
	}
	if moved == 0 {
		return
	}
	to := ex.parked[0].to
	n := copy(ex.parked, ex.parked[moved:])
	clear(ex.parked[n:])
	ex.parked = ex.parked[:n]
	if n == 0 {
		ex.parked = nil
		s.rt.markRoom(to)
		s.unblockSenders(ex)
	}
}

// blockSender parks message for the full MailboxBlock mailbox of target
// when it comes from the process whose callback is running (not a timer,
// not itself), and suspends that sender: its callback finishes, then it
// gets no turn until the mailbox has room. It reports false when the
// sender cannot be suspended (the caller then refuses the message).
func (s *shard) blockSender(target *process, to, from PID, message any) bool {
	if s.depth == 0 || from == to || s.contexts[s.depth-1].self != from {
		return false
	}
	sender := s.contexts[s.depth-1].proc
	ex := target.extra
	if len(ex.parked) == 0 {
		s.rt.markFull(to)
	}
	ex.parked = append(ex.parked, envelope{to: to, from: from, message: message, kind: kindMessage})
	if sender.flags&flagBlocked == 0 {
		sender.flags |= flagBlocked
		ex.blockedSenders = append(ex.blockedSenders, from)
		s.rt.senderWaits.Add(1)
	}
	return true
}

// unblockSenders gives the senders blocked on ex's mailbox their turns
// back.
func (s *shard) unblockSenders(ex *processExtra) {
	for _, pid := range ex.blockedSenders {
		sp := s.lookup(pid)
		if sp == nil || sp.flags&flagBlocked == 0 {
			continue
		}
		sp.flags &^= flagBlocked
		if sp.hasMail() {
			s.ready.push(pid) // flagQueued is still set
		} else {
			sp.flags &^= flagQueued
		}
	}
	ex.blockedSenders = ex.blockedSenders[:0]
}
