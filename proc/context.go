package proc

import "time"

// Context is a process's handle on the runtime during one callback
// (Receive, Init, Terminate). It is owned by the scheduler and reused: keep
// PIDs, never the Context. Its methods must be called only from the callback
// it was passed to.
type Context struct {
	shard      *shard
	proc       *process
	self       PID
	sender     PID
	message    any
	stop       bool
	stopReason error
}

// Self is the running process's PID.
func (c *Context) Self() PID { return c.self }

// Sender is the PID of the process that sent the current message (zero for
// messages from outside the runtime, timers and signals).
func (c *Context) Sender() PID { return c.sender }

// Now is the runtime's time: virtual in deterministic mode.
func (c *Context) Now() time.Time { return c.shard.now() }

// Send queues message in to's mailbox. It returns ErrNoProcess for a stale
// PID on this scheduler thread, ErrMailboxFull or ErrMemoryBudget when a
// limit refuses it, nil otherwise (a send to another scheduler thread is
// checked there, and its refusal only counted). A preallocated message (a
// pointer, or a value that fits an interface without boxing) is delivered
// with no allocation.
func (c *Context) Send(to PID, message any) error {
	return c.shard.send(to, c.self, kindMessage, message, 0)
}

// Reply sends message to the sender of the current message.
func (c *Context) Reply(message any) error { return c.Send(c.sender, message) }

// SendName sends message to the process registered under name (ErrNoProcess
// if none). The lookup is a hash index: its cost does not depend on the
// number of processes.
func (c *Context) SendName(name string, message any) error {
	to, ok := c.shard.rt.Lookup(name)
	if !ok {
		return ErrNoProcess
	}
	return c.Send(to, message)
}

// Spawn starts a process on this scheduler thread; name "" is anonymous.
// With opts.Link the new process is linked to the caller. With opts.Spread
// in multi-core mode it may start on another thread instead (see
// SpawnOptions.Spread).
func (c *Context) Spawn(name string, b Behaviour, opts SpawnOptions) (PID, error) {
	s := c.shard
	if opts.Spread && s.count > 1 {
		if err := validSpawn(b, opts); err != nil {
			return PID{}, err
		}
		target := s.rt.shards[s.rt.nextShard.Add(1)%s.count]
		if target != s {
			if !s.rt.reserveLive() {
				return PID{}, ErrTooManyProcesses
			}
			pid, ok := target.takeReserved()
			if ok {
				if opts.Link {
					addLink(c.proc, pid)
				}
				s.rt.work.Add(1)
				target.push(envelope{spawn: &spawnRequest{name: name, behaviour: b, options: opts, reserved: pid, parent: c.self}})
				return pid, nil
			}
			s.rt.live.Add(-1) // its pool is empty: start here
		}
	}
	return s.spawn(name, b, opts, c.self)
}

// Stop ends the running process normally when the current callback
// returns.
func (c *Context) Stop() { c.stop, c.stopReason = true, nil }

// TrapExit sets whether exit signals become Exit messages (see
// SpawnOptions.TrapExit).
func (c *Context) TrapExit(on bool) {
	if on {
		c.proc.flags |= flagTrapExit
	} else {
		c.proc.flags &^= flagTrapExit
	}
}

// Parent is the process that spawned this one with SpawnOptions.Link (zero
// otherwise).
func (c *Context) Parent() PID {
	if c.proc.extra == nil {
		return PID{}
	}
	return c.proc.extra.parent
}

// Link links the running process and pid (Erlang's link/1): when either
// exits abnormally, the other exits with the same reason unless it traps
// exits, in which case it receives Exit. Linking to a process that does not
// exist delivers an exit signal with ErrNoProcess.
func (c *Context) Link(pid PID) {
	if pid == c.self {
		return
	}
	addLink(c.proc, pid)
	if p := c.shard.lookup(pid); p != nil {
		addLink(p, c.self)
		return
	}
	_ = c.shard.send(pid, c.self, kindLink, nil, 0)
}

// Unlink removes the link between the running process and pid.
func (c *Context) Unlink(pid PID) {
	removeLink(c.proc, pid)
	if p := c.shard.lookup(pid); p != nil {
		removeLink(p, c.self)
		return
	}
	_ = c.shard.send(pid, c.self, kindUnlink, nil, 0)
}

// Monitor makes the running process receive Down when pid exits (at once,
// with ErrNoProcess, if it does not exist).
func (c *Context) Monitor(pid PID) MonitorRef {
	s := c.shard
	s.nextRef++
	ref := MonitorRef(s.nextRef*uint64(s.count) + uint64(s.id))
	if p := s.lookup(pid); p != nil {
		ex := p.ensureExtra()
		ex.monitors = append(ex.monitors, monitorEntry{ref: ref, watcher: c.self})
		return ref
	}
	_ = s.send(pid, c.self, kindMonitor, nil, uint64(ref))
	return ref
}

// Demonitor removes monitor ref on pid. A Down already queued stays queued.
func (c *Context) Demonitor(pid PID, ref MonitorRef) {
	if p := c.shard.lookup(pid); p != nil {
		removeMonitor(p, ref)
		return
	}
	_ = c.shard.send(pid, c.self, kindDemonitor, nil, uint64(ref))
}

// Exit sends pid an exit signal with reason (Erlang's exit/2): a process
// that traps exits receives it as Exit; otherwise a non-nil reason ends it.
// The signal is queued behind pid's earlier messages.
func (c *Context) Exit(pid PID, reason error) {
	_ = c.shard.send(pid, c.self, kindExit, reason, 0)
}

// Kill ends pid at once with reason (nil: ErrKilled), whether or not it
// traps exits; on another scheduler thread, as soon as that thread takes the
// signal. Killing the running process ends it when its callback returns.
func (c *Context) Kill(pid PID, reason error) {
	if reason == nil {
		reason = ErrKilled
	}
	if pid == c.self {
		c.stop, c.stopReason = true, reason
		return
	}
	c.shard.kill(pid, c.self, reason)
}

// SendAfter sends message to to after d, from the running process.
func (c *Context) SendAfter(to PID, message any, d time.Duration) Timer {
	return c.shard.sendAfter(to, c.self, message, d)
}

// CancelTimer stops a timer set by SendAfter on this scheduler thread; it
// reports whether the timer had not fired yet.
func (c *Context) CancelTimer(t Timer) bool {
	e := t.entry
	if e == nil || e.seq != t.seq || e.index < 0 || e.index >= len(c.shard.timers) || c.shard.timers[e.index] != e {
		return false
	}
	c.shard.timers.remove(e.index)
	e.message = nil
	return true
}

// SetReceiveTimeout makes the running process receive Timeout whenever d
// passes with no message for it (repeatedly, while it stays idle); 0
// cancels. It costs one timer per process, not one per message.
func (c *Context) SetReceiveTimeout(d time.Duration) {
	ex := c.proc.ensureExtra()
	ex.receiveTimeout = d
	if d <= 0 {
		return
	}
	now := c.shard.nowNanos()
	ex.lastActivity = now
	if !ex.receiveArmed {
		c.shard.armReceiveTimer(c.self, ex, now+int64(d))
	}
}

func (s *shard) sendAfter(to, from PID, message any, d time.Duration) Timer {
	if d < 0 {
		d = 0
	}
	s.timerSeq++
	e := &timerEntry{deadlineNanos: s.nowNanos() + int64(d), seq: s.timerSeq, to: to, from: from, message: message}
	s.timers.push(e)
	return Timer{entry: e, seq: e.seq}
}
