package proc

import (
	"errors"
	"sort"
	"time"
)

// Per-key entities: a router process sends each Routed message to the
// process of its key, spawning it on the key's first message with the state
// the key last handed over, and passivating it (state handed back, process
// stopped) after an idle timeout, so only active keys cost a process. This
// is what a stream handler will use to give each key its own process.

// Routed is a message for the entity of Key; send it to the router.
type Routed struct {
	Key     string
	Message any
}

// Entity is the behaviour of a per-key process. State is called when the
// entity passivates; what it returns is handed to the key's next
// incarnation (EntityOptions.New). An Entity may implement Initializer and
// Terminator.
type Entity interface {
	Behaviour
	State() any
}

// EntityOptions configure a router (NewEntities).
type EntityOptions struct {
	// New returns the entity of key, given the state it last handed over
	// (nil the first time, and after a failure before any hand-over).
	New func(key string, state any) Entity
	// IdleTimeout passivates an entity that received nothing for so long
	// (0: never; only PassivateAll does).
	IdleTimeout time.Duration
	// NamePrefix registers each entity as NamePrefix+key ("": anonymous).
	NamePrefix string
	// Spread starts entities on every scheduler thread in multi-core mode
	// (SpawnOptions.Spread), not only on the router's.
	Spread bool
}

// PassivateAll asks the router to passivate every live entity; once none
// is live, the router calls Done with the handed-over state of every key
// (on its own scheduler thread: Done must not block).
type PassivateAll struct {
	Done func(states map[string]any)
}

// Passivation is a three-step hand-shake, so that no message is lost: an
// idle entity asks (passivateRequest); the router stops routing to it,
// keeping the key's new messages aside, and tells it to stop (stopEntity);
// the entity, having handled everything routed to it before that, hands
// over its state and stops (passivated).
type passivateRequest struct{ key string }

type stopEntity struct{}

type passivated struct {
	key   string
	state any
}

var errNoNew = errors.New("proc: EntityOptions.New is nil")

// NewEntities returns the behaviour of a router; spawn it (for instance as
// a supervisor's child). It traps exits itself. The handed-over states live
// in the returned value: a supervisor that restarts the router with the
// same value keeps them (entities live at the crash are lost with it, from
// their last hand-over).
func NewEntities(opts EntityOptions) Behaviour {
	return &entityRouter{opts: opts, stored: map[string]any{}}
}

type entityRouter struct {
	opts     EntityOptions
	live     map[string]PID
	byPID    map[PID]string
	stopping map[string]bool // told to stop; its messages wait in pending
	stored   map[string]any
	// pending holds messages for keys whose entity stopped while they were
	// on their way (its state is still in the router's mailbox, or it
	// failed): they wait for the state, or the exit, then go to a new
	// incarnation.
	pending  map[string][]any
	flushing []PassivateAll
}

func (r *entityRouter) Init(ctx *Context) error {
	if r.opts.New == nil {
		return errNoNew
	}
	ctx.TrapExit(true)
	r.live, r.byPID, r.pending, r.stopping = map[string]PID{}, map[PID]string{}, map[string][]any{}, map[string]bool{}
	return nil
}

func (r *entityRouter) Receive(ctx *Context, m any) error {
	switch m := m.(type) {
	case Routed:
		return r.route(ctx, m.Key, m.Message)
	case passivateRequest:
		if pid, ok := r.live[m.key]; ok && pid == ctx.Sender() {
			r.stop(ctx, m.key)
		}
	case passivated:
		r.stored[m.key] = m.state
		r.forget(m.key)
		if err := r.resume(ctx, m.key); err != nil {
			return err
		}
	case Exit:
		key, ok := r.byPID[m.From]
		if !ok {
			if m.From == ctx.Parent() && m.Reason != nil {
				return m.Reason // the supervisor is going: so are we
			}
			return nil // a passivated entity's exit: its state came first
		}
		r.forget(key) // failed (or stopped without handing over): its last hand-over stands
		if err := r.resume(ctx, key); err != nil {
			return err
		}
	case PassivateAll:
		r.flushing = append(r.flushing, m)
		keys := make([]string, 0, len(r.live))
		for key := range r.live {
			keys = append(keys, key)
		}
		sort.Strings(keys) // deterministic mode needs a deterministic order
		for _, key := range keys {
			r.stop(ctx, key)
		}
	}
	r.reportIfIdle()
	return nil
}

// stop tells key's entity to hand over and stop; its new messages wait.
func (r *entityRouter) stop(ctx *Context, key string) {
	if r.stopping[key] {
		return
	}
	r.stopping[key] = true
	if _, ok := r.pending[key]; !ok {
		r.pending[key] = nil
	}
	_ = ctx.Send(r.live[key], stopEntity{})
}

func (r *entityRouter) route(ctx *Context, key string, message any) error {
	if waiting, ok := r.pending[key]; ok {
		r.pending[key] = append(waiting, message)
		return nil
	}
	pid, ok := r.live[key]
	if !ok {
		var err error
		if pid, err = r.spawn(ctx, key); err != nil {
			return err
		}
	}
	if err := ctx.Send(pid, message); errors.Is(err, ErrNoProcess) {
		r.pending[key] = []any{message} // it stopped meanwhile: wait for its state or its exit
	} else if err != nil {
		return err
	}
	if len(r.flushing) > 0 {
		r.stop(ctx, key) // a PassivateAll is under way: this one passivates too, after the message
	}
	return nil
}

func (r *entityRouter) spawn(ctx *Context, key string) (PID, error) {
	name := ""
	if r.opts.NamePrefix != "" {
		name = r.opts.NamePrefix + key
	}
	e := &entityProcess{key: key, entity: r.opts.New(key, r.stored[key]), idle: r.opts.IdleTimeout}
	pid, err := ctx.Spawn(name, e, SpawnOptions{Link: true, Spread: r.opts.Spread})
	if err != nil {
		return PID{}, err
	}
	r.live[key], r.byPID[pid] = pid, key
	return pid, nil
}

func (r *entityRouter) forget(key string) {
	if pid, ok := r.live[key]; ok {
		delete(r.byPID, pid)
		delete(r.live, key)
	}
	delete(r.stopping, key)
}

// resume starts a new incarnation of key if messages wait for it.
func (r *entityRouter) resume(ctx *Context, key string) error {
	waiting := r.pending[key]
	delete(r.pending, key)
	if len(waiting) == 0 {
		return nil
	}
	for _, m := range waiting {
		if err := r.route(ctx, key, m); err != nil {
			return err
		}
	}
	return nil
}

func (r *entityRouter) reportIfIdle() {
	if len(r.flushing) == 0 || len(r.live) > 0 || len(r.pending) > 0 {
		return
	}
	for _, f := range r.flushing {
		states := make(map[string]any, len(r.stored))
		for k, v := range r.stored {
			states[k] = v
		}
		if f.Done != nil {
			f.Done(states)
		}
	}
	r.flushing = nil
}

// entityProcess wraps an Entity: on the idle timeout it asks its router
// (its parent) to passivate it; told to stop, it hands over the entity's
// state and stops.
type entityProcess struct {
	key    string
	entity Entity
	idle   time.Duration
}

func (e *entityProcess) Init(ctx *Context) error {
	if e.idle > 0 {
		ctx.SetReceiveTimeout(e.idle)
	}
	if in, ok := e.entity.(Initializer); ok {
		return in.Init(ctx)
	}
	return nil
}

func (e *entityProcess) Receive(ctx *Context, m any) error {
	switch m.(type) {
	case Timeout:
		if e.idle <= 0 {
			return e.entity.Receive(ctx, m)
		}
		return ctx.Send(ctx.Parent(), passivateRequest{key: e.key})
	case stopEntity:
		ctx.Stop()
		return ctx.Send(ctx.Parent(), passivated{key: e.key, state: e.entity.State()})
	}
	return e.entity.Receive(ctx, m)
}

func (e *entityProcess) Terminate(ctx *Context, reason error) {
	if t, ok := e.entity.(Terminator); ok {
		t.Terminate(ctx, reason)
	}
}
