package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
)

var (
	errNilBehaviour    = fmt.Errorf("%w: nil behaviour", ErrBadOptions)
	errBadSpawnOptions = fmt.Errorf("%w: negative MailboxLimit or unknown MailboxFull policy", ErrBadOptions)
)

// Runtime is a set of processes and the scheduler threads that run them.
//
// Its methods may be called from any goroutine. While the runtime is not
// running they act at once; while it runs (Run, RunUntilIdle) they hand the
// operation to the owning scheduler thread: Spawn waits for its answer, Send
// and SendName return at once (errors about the target are then not
// reported). Inside a process, use the Context's methods instead: a
// Runtime method that waits, called from a callback, would wait for itself.
type Runtime struct {
	opts   Options
	shards []*shard
	clock  Clock
	start  time.Time

	// namesMu guards names; it is a leaf (nothing else is locked under it).
	namesMu sync.RWMutex
	names   map[string]PID

	live atomic.Int64 // live processes, all shards

	// runMu serializes direct operations (while not running) with the start
	// and end of a run; running says whether scheduler threads own the
	// shards.
	runMu   sync.Mutex
	running bool

	// work counts scheduler threads that may still produce work plus
	// envelopes not yet taken by their shard (multi-core quiescence: the
	// thread that brings it to zero ends RunUntilIdle).
	work     atomic.Int64
	idleDone chan struct{}
	idleOnce *sync.Once

	journalMu sync.Mutex // guards journal writes in multi-core mode; a leaf
	journal   io.Writer

	nextShard atomic.Uint32 // round-robin placement of spawns from outside

	// full marks MailboxBlock processes whose mailbox is full: outside
	// senders to them wait on the channel, closed when room is made.
	// fullMu guards full; it is a leaf. fullCount mirrors len(full).
	fullMu    sync.Mutex
	full      map[PID]chan struct{}
	fullCount atomic.Int32

	senderWaits atomic.Uint64 // times an outside sender waited (MailboxBlock, OutsideQueueLimit)
}

func (rt *Runtime) markFull(pid PID) {
	rt.fullMu.Lock()
	if rt.full == nil {
		rt.full = make(map[PID]chan struct{})
	}
	if _, ok := rt.full[pid]; !ok {
		rt.full[pid] = make(chan struct{})
		rt.fullCount.Add(1)
	}
	rt.fullMu.Unlock()
}

func (rt *Runtime) markRoom(pid PID) {
	rt.fullMu.Lock()
	if ch, ok := rt.full[pid]; ok {
		close(ch)
		delete(rt.full, pid)
		rt.fullCount.Add(-1)
	}
	rt.fullMu.Unlock()
}

// waitForRoom blocks while to is marked full; it reports whether it waited.
func (rt *Runtime) waitForRoom(to PID) bool {
	if rt.fullCount.Load() == 0 {
		return false
	}
	rt.fullMu.Lock()
	ch, ok := rt.full[to]
	rt.fullMu.Unlock()
	if !ok {
		return false
	}
	rt.senderWaits.Add(1)
	<-ch
	return true
}

// New returns a runtime configured by opts.
func New(opts Options) (*Runtime, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rt := &Runtime{opts: opts, names: make(map[string]PID), journal: opts.Journal}
	switch {
	case opts.Deterministic:
		rt.clock = clock.NewManual(opts.VirtualStart) // not read: deterministic shards keep virtual time
	case opts.Clock != nil:
		rt.clock = opts.Clock
	default:
		rt.clock = clock.Real{}
	}
	rt.start = rt.clock.Now()
	if opts.Deterministic {
		rt.start = opts.VirtualStart
	}
	n := uint32(opts.Schedulers)
	for i := uint32(0); i < n; i++ {
		rt.shards = append(rt.shards, newShard(rt, i, n))
	}
	return rt, nil
}

func (rt *Runtime) register(name string, pid PID) bool {
	rt.namesMu.Lock()
	defer rt.namesMu.Unlock()
	if _, taken := rt.names[name]; taken {
		return false
	}
	rt.names[name] = pid
	return true
}

func (rt *Runtime) unregister(name string, pid PID) {
	rt.namesMu.Lock()
	if rt.names[name] == pid {
		delete(rt.names, name)
	}
	rt.namesMu.Unlock()
}

// Lookup returns the PID registered under name.
func (rt *Runtime) Lookup(name string) (PID, bool) {
	rt.namesMu.RLock()
	pid, ok := rt.names[name]
	rt.namesMu.RUnlock()
	return pid, ok
}

// shardFor places a spawn from outside: round-robin over the scheduler
// threads.
func (rt *Runtime) shardFor() *shard {
	if len(rt.shards) == 1 {
		return rt.shards[0]
	}
	return rt.shards[rt.nextShard.Add(1)%uint32(len(rt.shards))]
}

// Spawn starts a process (name "" is anonymous) and returns its PID. A
// behaviour implementing Initializer has run Init by the time Spawn
// returns.
func (rt *Runtime) Spawn(name string, b Behaviour, opts SpawnOptions) (PID, error) {
	s := rt.shardFor()
	rt.runMu.Lock()
	if !rt.running {
		defer rt.runMu.Unlock()
		return s.spawn(name, b, opts, PID{})
	}
	rt.runMu.Unlock()
	req := &spawnRequest{name: name, behaviour: b, options: opts, done: make(chan spawnResult, 1)}
	rt.work.Add(1)
	s.pushOutside(envelope{spawn: req})
	res := <-req.done
	return res.pid, res.err
}

// Send queues message for to from outside the runtime (Sender is zero).
func (rt *Runtime) Send(to PID, message any) error {
	if to.IsZero() {
		return ErrNoProcess
	}
	s := rt.shards[to.Index%uint32(len(rt.shards))]
	for {
		rt.runMu.Lock()
		if !rt.running {
			err := s.deliver(to, PID{}, kindMessage, message, 0)
			rt.runMu.Unlock()
			return err
		}
		rt.runMu.Unlock()
		if !rt.waitForRoom(to) {
			break
		}
	}
	rt.work.Add(1)
	s.pushOutside(envelope{to: to, kind: kindMessage, message: message, external: true})
	return nil
}

// SendName sends message to the process registered under name.
func (rt *Runtime) SendName(name string, message any) error {
	to, ok := rt.Lookup(name)
	if !ok {
		return ErrNoProcess
	}
	return rt.Send(to, message)
}

// Kill ends pid with reason (nil: ErrKilled) from outside the runtime.
func (rt *Runtime) Kill(pid PID, reason error) {
	if reason == nil {
		reason = ErrKilled
	}
	s := rt.shards[pid.Index%uint32(len(rt.shards))]
	rt.runMu.Lock()
	if !rt.running {
		defer rt.runMu.Unlock()
		s.kill(pid, PID{}, reason)
		return
	}
	rt.runMu.Unlock()
	rt.work.Add(1)
	s.pushOutside(envelope{to: pid, kind: kindExit, message: killSignal{reason}})
}

// Alive reports whether pid names a live process. While the runtime runs
// the answer may be stale by the time it is returned.
func (rt *Runtime) Alive(pid PID) bool {
	if pid.IsZero() {
		return false
	}
	s := rt.shards[pid.Index%uint32(len(rt.shards))]
	rt.runMu.Lock()
	defer rt.runMu.Unlock()
	if rt.running {
		return false
	}
	return s.lookup(pid) != nil
}

// Stats are the runtime's counters, summed over scheduler threads.
type Stats struct {
	Live      int64  // live processes
	Turns     uint64 // times a process was given the scheduler
	Delivered uint64 // messages handed to Receive
	Dropped   uint64 // messages dropped by MailboxDrop or refused across threads
	UsedBytes int64  // accounted memory (see Options.MemoryBudgetBytes)
	// SenderWaits counts the times a sender outside the runtime waited for
	// room (a full MailboxBlock mailbox, or a full outside queue).
	SenderWaits uint64
}

// Stats returns the counters; while the runtime runs, they are a racy
// snapshot and must not be used, so Stats returns only Live then.
func (rt *Runtime) Stats() Stats {
	st := Stats{Live: rt.live.Load(), SenderWaits: rt.senderWaits.Load()}
	rt.runMu.Lock()
	defer rt.runMu.Unlock()
	if rt.running {
		return st
	}
	for _, s := range rt.shards {
		st.Turns += s.turns
		st.Delivered += s.delivered
		st.Dropped += s.dropped
		st.UsedBytes += s.usedBytes
	}
	return st
}

// Now is the runtime's time (virtual in deterministic mode; only read it
// while the runtime is not running there).
func (rt *Runtime) Now() time.Time { return rt.shards[0].now() }

func (rt *Runtime) begin() error {
	rt.runMu.Lock()
	defer rt.runMu.Unlock()
	if rt.running {
		return ErrRunning
	}
	rt.running = true
	return nil
}

func (rt *Runtime) end() {
	rt.runMu.Lock()
	rt.running = false
	rt.runMu.Unlock()
	// Envelopes that arrived after the threads stopped are applied now, so
	// nothing sent is lost between runs.
	for _, s := range rt.shards {
		s.drainInbox()
	}
	// Outside senders waiting for room are let go: with no scheduler
	// running they get ErrMailboxFull from the direct path instead.
	rt.fullMu.Lock()
	for pid, ch := range rt.full {
		close(ch)
		delete(rt.full, pid)
	}
	rt.fullCount.Store(0)
	rt.fullMu.Unlock()
}

// Run runs the scheduler threads until ctx is done, waiting for messages
// and timers when idle. It returns ctx's error.
func (rt *Runtime) Run(ctx context.Context) error {
	if err := rt.begin(); err != nil {
		return err
	}
	defer rt.end()
	if err := rt.runShards(ctx.Done(), false); err != nil {
		return err
	}
	return ctx.Err()
}

// RunUntilIdle runs until no process is ready, no message is in flight and
// no timer is pending (in deterministic mode virtual time jumps to each next
// timer). It returns ErrTurnLimit past Options.MaxTurns.
func (rt *Runtime) RunUntilIdle() error {
	if err := rt.begin(); err != nil {
		return err
	}
	defer rt.end()
	return rt.runShards(nil, true)
}

func (rt *Runtime) runShards(done <-chan struct{}, untilIdle bool) error {
	if len(rt.shards) == 1 {
		return rt.shards[0].loop(done, untilIdle)
	}
	for _, s := range rt.shards {
		s.refillReserve() // before the threads start: no one owns the shards yet
	}
	rt.work.Store(int64(len(rt.shards)))
	rt.idleDone = make(chan struct{})
	rt.idleOnce = new(sync.Once)
	stop := make(chan struct{})
	var once sync.Once
	stopAll := func() { once.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	errs := make([]error, len(rt.shards))
	for i, s := range rt.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.loopShared(done, stop, untilIdle)
			if errs[i] != nil {
				stopAll()
			}
		}()
	}
	if untilIdle {
		go func() {
			select {
			case <-rt.idleDone:
			case <-stop:
			}
			stopAll()
		}()
	} else {
		go func() {
			select {
			case <-done:
			case <-stop:
			}
			stopAll()
		}()
	}
	wg.Wait()
	stopAll()
	return errors.Join(errs...)
}

// turnsBetweenChecks is how many turns a busy real-time shard runs between
// looks at its clock and timers (reading a clock costs about as much as a
// delivery).
const turnsBetweenChecks = 64

// loop is the single-thread scheduler loop.
func (s *shard) loop(done <-chan struct{}, untilIdle bool) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	maxTurns := s.rt.opts.MaxTurns
	startTurns := s.turns
	for {
		if done != nil {
			select {
			case <-done:
				return nil
			default:
			}
		}
		s.drainInbox()
		if s.ready.count > 0 {
			s.runTurns(turnsBetweenChecks)
			if maxTurns > 0 && int64(s.turns-startTurns) >= maxTurns {
				return ErrTurnLimit
			}
			if !s.virtual && len(s.timers) > 0 {
				s.fireTimers(s.nowNanos())
			}
			continue
		}
		if len(s.timers) > 0 {
			if s.virtual {
				if d := s.timers[0].deadlineNanos; d > s.virtualNanos {
					s.virtualNanos = d
				}
				s.fireTimers(s.virtualNanos)
				continue
			}
			fired, timerC := s.fireOrArm(&timer)
			if !fired && s.sleep(done, timerC) {
				return nil
			}
			continue
		}
		s.trimFreeNodes()
		if untilIdle {
			return nil
		}
		if s.sleep(done, nil) {
			return nil
		}
	}
}

// fireOrArm fires the timers that are due and reports true, or, if none
// is, arms *timer (created on first use) for the next deadline and returns
// its channel.
func (s *shard) fireOrArm(timer **time.Timer) (bool, <-chan time.Time) {
	now := s.nowNanos()
	if s.fireTimers(now) > 0 {
		return true, nil
	}
	wait := time.Duration(s.timers[0].deadlineNanos - now)
	if *timer == nil {
		*timer = time.NewTimer(wait)
	} else {
		(*timer).Reset(wait)
	}
	return false, (*timer).C
}

// sleep waits for an envelope, the timer or done; it reports whether done
// fired. The sleeping flag is set before the last look at the inbox, and
// push reads it after adding, so a wake-up cannot be lost.
func (s *shard) sleep(done <-chan struct{}, timer <-chan time.Time) bool {
	s.sleeping.Store(true)
	defer s.sleeping.Store(false)
	if s.inboxPending.Load() {
		return false
	}
	select {
	case <-done:
		return true
	case <-s.wake:
	case <-timer:
	}
	return false
}

// loopShared is a scheduler thread's loop in multi-core mode. The thread
// holds one unit of Runtime.work while it may produce work; it gives it
// back when it has nothing ready, nothing in its inbox and no timers, and
// takes it again when woken.
func (s *shard) loopShared(done, stop <-chan struct{}, untilIdle bool) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	rt := s.rt
	active := true
	for {
		select {
		case <-stop:
			if active {
				rt.work.Add(-1)
			}
			return nil
		default:
		}
		if !active {
			rt.work.Add(1)
			active = true
		}
		if s.reservedCount.Load() < reservePoolLow {
			s.refillReserve()
		}
		if n := s.drainInbox(); n > 0 {
			rt.work.Add(-int64(n))
		}
		if s.ready.count > 0 {
			s.runTurns(turnsBetweenChecks)
			if len(s.timers) > 0 {
				s.fireTimers(s.nowNanos())
			}
			continue
		}
		var timerC <-chan time.Time
		if len(s.timers) > 0 {
			var fired bool
			if fired, timerC = s.fireOrArm(&timer); fired {
				continue
			}
		} else {
			// Idle: give back this thread's unit of work. Whoever brings
			// the count to zero saw every thread idle and no envelope in
			// flight (senders count an envelope before pushing it).
			s.trimFreeNodes()
			active = false
			if rt.work.Add(-1) == 0 && untilIdle {
				rt.idleOnce.Do(func() { close(rt.idleDone) })
			}
		}
		s.sleeping.Store(true)
		if !s.inboxPending.Load() {
			select {
			case <-stop:
			case <-done:
			case <-s.wake:
			case <-timerC:
			}
		}
		s.sleeping.Store(false)
	}
}

// Journal lines: "<nanoseconds on the runtime's time line> <event> ...".

func (s *shard) writeJournal(line []byte) {
	if s.count > 1 {
		s.rt.journalMu.Lock()
		defer s.rt.journalMu.Unlock()
	}
	_, _ = s.rt.journal.Write(line)
}

func (s *shard) journalPrefix(event string) []byte {
	b := s.journalLine[:0]
	b = appendInt(b, s.nowNanos())
	b = append(b, ' ')
	return append(b, event...)
}

func (s *shard) journalSpawn(pid PID, name string, parent PID) {
	b := s.journalPrefix("spawn ")
	b = pid.AppendTo(b)
	b = append(b, " name="...)
	if name == "" {
		name = "-"
	}
	b = append(b, name...)
	b = append(b, " parent="...)
	b = parent.AppendTo(b)
	s.finishJournal(b)
}

func (s *shard) journalDeliver(from, to PID, message any) {
	b := s.journalPrefix("deliver ")
	b = from.AppendTo(b)
	b = append(b, " -> "...)
	b = to.AppendTo(b)
	b = append(b, ' ')
	b = fmt.Appendf(b, "%v", message)
	s.finishJournal(b)
}

func (s *shard) journalExit(pid PID, reason error) {
	b := s.journalPrefix("exit ")
	b = pid.AppendTo(b)
	b = append(b, " reason="...)
	b = append(b, reasonText(reason)...)
	s.finishJournal(b)
}

// journalf writes a free-form line (supervisor failures and decisions).
func (s *shard) journalf(format string, args ...any) {
	if s.rt.journal == nil {
		return
	}
	b := s.journalPrefix("")
	b = fmt.Appendf(b, format, args...)
	s.finishJournal(b)
}

func (s *shard) finishJournal(b []byte) {
	b = append(b, '\n')
	s.writeJournal(b)
	s.journalLine = b[:0]
}

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }
