package proc

import (
	"errors"
	"fmt"
	"time"
)

// Strategy is how a supervisor restarts children (OTP's strategies).
type Strategy uint8

const (
	// OneForOne restarts only the child that exited.
	OneForOne Strategy = iota
	// OneForAll stops every other child (in reverse start order) and
	// restarts them all (in start order).
	OneForAll
	// RestForOne stops the children started after the one that exited
	// (reverse order) and restarts it and them (start order).
	RestForOne
	// SimpleOneForOne supervises dynamic children of one spec, started with
	// StartChild; each is restarted alone.
	SimpleOneForOne
)

func (s Strategy) String() string {
	switch s {
	case OneForOne:
		return "one_for_one"
	case OneForAll:
		return "one_for_all"
	case RestForOne:
		return "rest_for_one"
	case SimpleOneForOne:
		return "simple_one_for_one"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// RestartType says when a child is restarted (OTP's restart types).
type RestartType uint8

const (
	// Permanent children are always restarted.
	Permanent RestartType = iota
	// Transient children are restarted only after an abnormal exit (a
	// reason other than nil or ErrShutdown).
	Transient
	// Temporary children are never restarted.
	Temporary
)

func (r RestartType) String() string {
	switch r {
	case Permanent:
		return "permanent"
	case Transient:
		return "transient"
	case Temporary:
		return "temporary"
	}
	return fmt.Sprintf("RestartType(%d)", uint8(r))
}

// ChildSpec describes one child of a supervisor.
type ChildSpec struct {
	ID      string // unique among the supervisor's children; the journal's name for it
	Name    string // registered name of the child process ("" anonymous); not with SimpleOneForOne
	Start   func(arg any) Behaviour
	Restart RestartType
	Options SpawnOptions // Link is always set: a child is linked to its supervisor
}

// SupervisorSpec describes a supervisor. Intensity and Period mean what they
// mean in OTP: more than Intensity restarts within Period and the supervisor
// stops all its children and exits with ErrRestartIntensity, so that its own
// supervisor decides (escalation). Intensity 0 allows no restart at all, as
// in OTP; Period 0 means DefaultPeriod.
type SupervisorSpec struct {
	Strategy  Strategy
	Intensity int
	Period    time.Duration
	Children  []ChildSpec // SimpleOneForOne: exactly one, the template
}

// OTP's defaults, for specs that want them.
const (
	DefaultIntensity = 1
	DefaultPeriod    = 5 * time.Second
)

// StartChild asks a SimpleOneForOne supervisor to start a child with Arg;
// the supervisor answers the sender with ChildStarted.
type StartChild struct{ Arg any }

// ChildStarted answers StartChild.
type ChildStarted struct {
	PID PID
	Err error
}

// TerminateChild asks a supervisor to stop one child (by PID) and not
// restart it.
type TerminateChild struct{ PID PID }

// WhichChildren asks a supervisor for its children (OTP's
// which_children); it answers the sender with Children.
type WhichChildren struct{}

// Children answers WhichChildren, in start order.
type Children []ChildInfo

// ChildInfo describes one child of a supervisor.
type ChildInfo struct {
	ID      string
	PID     PID // of the running child; zero when not running
	Restart RestartType
}

// NewSupervisor returns the behaviour of a supervisor; spawn it like any
// process (with SpawnOptions.Link under another supervisor, which
// ChildSpec does for you). Its Init starts the static children in order; a
// child that fails to start makes the Spawn fail, after the ones started
// are stopped.
func NewSupervisor(spec SupervisorSpec) Behaviour {
	if spec.Period == 0 {
		spec.Period = DefaultPeriod
	}
	return &supervisor{spec: spec}
}

type supervisor struct {
	spec     SupervisorSpec
	children []*supervisedChild // start order
	restarts []int64            // times of recent restarts (runtime time line, ns)
}

type supervisedChild struct {
	spec    *ChildSpec
	arg     any
	pid     PID
	running bool
}

var (
	errSimpleSpec    = fmt.Errorf("%w: a SimpleOneForOne supervisor takes exactly one anonymous child spec", ErrBadOptions)
	errDuplicateID   = fmt.Errorf("%w: duplicate child ID", ErrBadOptions)
	errNilStart      = fmt.Errorf("%w: child spec without Start", ErrBadOptions)
	errNotSimple     = errors.New("proc: StartChild needs a SimpleOneForOne supervisor")
	errNegIntensity  = fmt.Errorf("%w: negative Intensity or Period", ErrBadOptions)
	errStartedNilPID = errors.New("proc: child start returned no process")
)

func (s *supervisor) Init(ctx *Context) error {
	ctx.TrapExit(true)
	spec := s.spec
	if spec.Intensity < 0 || spec.Period < 0 {
		return errNegIntensity
	}
	if spec.Strategy == SimpleOneForOne && (len(spec.Children) != 1 || spec.Children[0].Name != "") {
		return errSimpleSpec
	}
	ids := map[string]bool{}
	for i := range spec.Children {
		c := &spec.Children[i]
		if c.Start == nil {
			return errNilStart
		}
		if ids[c.ID] {
			return errDuplicateID
		}
		ids[c.ID] = true
	}
	if spec.Strategy == SimpleOneForOne {
		return nil
	}
	for i := range spec.Children {
		c := &supervisedChild{spec: &spec.Children[i]}
		s.children = append(s.children, c)
		if err := s.start(ctx, c); err != nil {
			s.stopAll(ctx)
			return err
		}
	}
	return nil
}

func (s *supervisor) start(ctx *Context, c *supervisedChild) error {
	opts := c.spec.Options
	opts.Link = true
	pid, err := ctx.Spawn(c.spec.Name, c.spec.Start(c.arg), opts)
	if err != nil {
		ctx.shard.journalf("sup %v child=%s start failed: %v", ctx.Self(), c.spec.ID, err)
		return err
	}
	if pid.IsZero() {
		return errStartedNilPID
	}
	c.pid, c.running = pid, true
	ctx.shard.journalf("sup %v child=%s started %v", ctx.Self(), c.spec.ID, pid)
	return nil
}

// stop ends a running child with ErrShutdown, unlinked first so that its
// exit is not taken for a failure.
func (s *supervisor) stop(ctx *Context, c *supervisedChild) {
	if !c.running {
		return
	}
	ctx.Unlink(c.pid)
	ctx.Kill(c.pid, ErrShutdown)
	c.running = false
	ctx.shard.journalf("sup %v child=%s stopped %v", ctx.Self(), c.spec.ID, c.pid)
}

// stopAll stops the running children in reverse start order.
func (s *supervisor) stopAll(ctx *Context) {
	for i := len(s.children) - 1; i >= 0; i-- {
		s.stop(ctx, s.children[i])
	}
}

func (s *supervisor) Terminate(ctx *Context, reason error) { s.stopAll(ctx) }

func (s *supervisor) Receive(ctx *Context, m any) error {
	switch m := m.(type) {
	case Exit:
		return s.childExit(ctx, m)
	case StartChild:
		if s.spec.Strategy != SimpleOneForOne {
			_ = ctx.Reply(ChildStarted{Err: errNotSimple})
			return nil
		}
		c := &supervisedChild{spec: &s.spec.Children[0], arg: m.Arg}
		err := s.start(ctx, c)
		if err == nil {
			s.children = append(s.children, c)
		}
		if !ctx.Sender().IsZero() {
			_ = ctx.Reply(ChildStarted{PID: c.pid, Err: err})
		}
	case retryRestart:
		return s.retry(ctx, m.child)
	case WhichChildren:
		out := make(Children, 0, len(s.children))
		for _, c := range s.children {
			info := ChildInfo{ID: c.spec.ID, Restart: c.spec.Restart}
			if c.running {
				info.PID = c.pid
			}
			out = append(out, info)
		}
		_ = ctx.Reply(out)
	case TerminateChild:
		if i := s.find(m.PID); i >= 0 {
			c := s.children[i]
			s.stop(ctx, c)
			if s.spec.Strategy == SimpleOneForOne || c.spec.Restart == Temporary {
				s.remove(i)
			}
		}
	}
	return nil
}

func (s *supervisor) find(pid PID) int {
	for i, c := range s.children {
		if c.running && c.pid == pid {
			return i
		}
	}
	return -1
}

func (s *supervisor) remove(i int) { s.children = append(s.children[:i], s.children[i+1:]...) }

func (s *supervisor) childExit(ctx *Context, m Exit) error {
	self := ctx.Self()
	if m.From == ctx.Parent() && !m.From.IsZero() {
		ctx.shard.journalf("sup %v parent %v exited (%s): stopping children", self, m.From, reasonText(m.Reason))
		s.stopAll(ctx)
		if m.Reason == nil {
			ctx.Stop()
		}
		return m.Reason
	}
	i := s.find(m.From)
	if i < 0 {
		return nil // not a child (any more): OTP ignores it too
	}
	c := s.children[i]
	c.running = false
	ctx.shard.journalf("sup %v child=%s %v exited reason=%s", self, c.spec.ID, m.From, reasonText(m.Reason))
	normal := m.Reason == nil || errors.Is(m.Reason, ErrShutdown)
	switch {
	case c.spec.Restart == Temporary:
		ctx.shard.journalf("sup %v decision=forget child=%s (temporary)", self, c.spec.ID)
		s.remove(i)
		return nil
	case c.spec.Restart == Transient && normal:
		ctx.shard.journalf("sup %v decision=leave-stopped child=%s (transient, normal exit)", self, c.spec.ID)
		if s.spec.Strategy == SimpleOneForOne {
			s.remove(i)
		}
		return nil
	}
	if s.tooManyRestarts(ctx) {
		ctx.shard.journalf("sup %v decision=escalate (more than %d restarts in %v): stopping children", self, s.spec.Intensity, s.spec.Period)
		s.stopAll(ctx)
		return ErrRestartIntensity
	}
	var failed *supervisedChild
	switch s.spec.Strategy {
	case OneForOne, SimpleOneForOne:
		ctx.shard.journalf("sup %v decision=restart child=%s", self, c.spec.ID)
		if err := s.start(ctx, c); err != nil {
			failed = c
		}
	case OneForAll:
		ctx.shard.journalf("sup %v decision=restart-all after child=%s", self, c.spec.ID)
		failed = s.restartFrom(ctx, 0)
	case RestForOne:
		ctx.shard.journalf("sup %v decision=restart-rest from child=%s", self, c.spec.ID)
		failed = s.restartFrom(ctx, i)
	}
	s.retryLater(ctx, failed)
	return nil
}

// retryRestart is a supervisor's note to itself: the restart of child
// failed to start it and is tried again, as OTP does, counting against the
// restart intensity (so a child that never starts ends in escalation).
type retryRestart struct{ child *supervisedChild }

func (s *supervisor) retryLater(ctx *Context, failed *supervisedChild) {
	if failed == nil {
		return
	}
	ctx.shard.journalf("sup %v decision=retry child=%s (start failed)", ctx.Self(), failed.spec.ID)
	_ = ctx.Send(ctx.Self(), retryRestart{child: failed})
}

func (s *supervisor) retry(ctx *Context, c *supervisedChild) error {
	i := -1
	for j, other := range s.children {
		if other == c {
			i = j
		}
	}
	if i < 0 || c.running {
		return nil // removed or restarted meanwhile
	}
	if s.tooManyRestarts(ctx) {
		ctx.shard.journalf("sup %v decision=escalate (more than %d restarts in %v): stopping children", ctx.Self(), s.spec.Intensity, s.spec.Period)
		s.stopAll(ctx)
		return ErrRestartIntensity
	}
	ctx.shard.journalf("sup %v decision=restart child=%s (retry)", ctx.Self(), c.spec.ID)
	group := s.spec.Strategy == OneForAll || s.spec.Strategy == RestForOne
	for _, next := range s.children[i:] {
		if next.running || (next != c && !group) {
			continue
		}
		if err := s.start(ctx, next); err != nil {
			s.retryLater(ctx, next)
			return nil
		}
	}
	return nil
}

// restartFrom stops the children from index first on (reverse order), drops
// the temporary ones, and starts the rest again in order; it returns the
// child that failed to start (the later ones are not started), or nil.
func (s *supervisor) restartFrom(ctx *Context, first int) *supervisedChild {
	for i := len(s.children) - 1; i >= first; i-- {
		s.stop(ctx, s.children[i])
	}
	kept := s.children[:first]
	for _, c := range s.children[first:] {
		if c.spec.Restart == Temporary {
			ctx.shard.journalf("sup %v decision=forget child=%s (temporary)", ctx.Self(), c.spec.ID)
			continue
		}
		kept = append(kept, c)
	}
	s.children = kept
	for _, c := range s.children[first:] {
		if err := s.start(ctx, c); err != nil {
			return c
		}
	}
	return nil
}

// tooManyRestarts records a restart now and reports whether it makes more
// than Intensity within Period. restarts is a queue in time order: entries
// leave from the front once older than the period (each once, so the cost
// per restart is O(1) amortized), and it never holds more than
// Intensity+1 entries (one more escalates).
func (s *supervisor) tooManyRestarts(ctx *Context) bool {
	now := ctx.shard.nowNanos()
	horizon := now - int64(s.spec.Period)
	drop := 0
	for drop < len(s.restarts) && s.restarts[drop] <= horizon {
		drop++
	}
	if drop > 0 {
		s.restarts = append(s.restarts[:0], s.restarts[drop:]...)
	}
	s.restarts = append(s.restarts, now)
	return len(s.restarts) > s.spec.Intensity
}
