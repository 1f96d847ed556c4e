package main

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sushka-io/sushka/proc"
)

// Record is one input record: an amount for a customer. A negative amount
// is a poison record: the customer's entity fails on it (and is restarted
// from its last handed-over state).
type Record struct {
	Customer string
	Amount   int
}

// entityState is what an entity hands back when it passivates, and what it
// is handed when it is spawned again.
type entityState struct {
	Total   int
	Records int
}

// passivated is an entity's last message to the router: its key and state.
type passivated struct {
	key   string
	state entityState
}

// passivate asks an entity to hand its state back and stop now (flush).
type passivate struct{}

// flush asks the router to passivate every live entity and then report the
// totals to report.
type flush struct{ report chan<- map[string]entityState }

// entity is the per-key process: one per customer, spawned on the first
// record of its key, passivated after idleTimeout without records.
type entity struct {
	key         string
	state       entityState
	idleTimeout time.Duration
}

func (e *entity) Init(ctx *proc.Context) error {
	ctx.SetReceiveTimeout(e.idleTimeout)
	return nil
}

func (e *entity) Receive(ctx *proc.Context, m any) error {
	switch m := m.(type) {
	case Record:
		if m.Amount < 0 {
			return fmt.Errorf("customer %s: negative amount %d", e.key, m.Amount)
		}
		e.state.Total += m.Amount
		e.state.Records++
	case proc.Timeout, passivate:
		ctx.Stop()
		return ctx.Send(ctx.Parent(), passivated{key: e.key, state: e.state})
	}
	return nil
}

// router routes each record to the entity named by its key, spawning it on
// the first record with the state last handed over for that key. It traps
// exits: an entity that fails is forgotten (its state since the last
// hand-over is lost, as with any crash) and respawned on its next record.
type router struct {
	idleTimeout time.Duration
	live        map[string]proc.PID
	stored      map[string]entityState // state of passivated (or never seen) entities
	// pending holds records for keys whose entity passivated while the
	// records were on their way: its state is still in the router's own
	// mailbox, so the records wait for it.
	pending  map[string][]Record
	failures int
	spawns   int
	flushing *flush
}

func newRouter(idleTimeout time.Duration) *router {
	return &router{idleTimeout: idleTimeout, stored: map[string]entityState{}}
}

// Init runs at every (re)start of the router: entities of a previous
// incarnation died with it (they are linked), so only the handed-over
// states are kept.
func (r *router) Init(ctx *proc.Context) error {
	r.live = map[string]proc.PID{}
	r.pending = map[string][]Record{}
	return nil
}

// spawnEntity starts the entity for key with its last handed-over state.
func (r *router) spawnEntity(ctx *proc.Context, key string) (proc.PID, error) {
	e := &entity{key: key, state: r.stored[key], idleTimeout: r.idleTimeout}
	pid, err := ctx.Spawn("customer/"+key, e, proc.SpawnOptions{Link: true})
	if err != nil {
		return proc.PID{}, err
	}
	r.live[key] = pid
	r.spawns++
	return pid, nil
}

// resume respawns key's entity if records wait for it.
func (r *router) resume(ctx *proc.Context, key string) error {
	recs := r.pending[key]
	if len(recs) == 0 {
		return nil
	}
	delete(r.pending, key)
	pid, err := r.spawnEntity(ctx, key)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := ctx.Send(pid, rec); err != nil {
			return err
		}
	}
	return nil
}

func (r *router) Receive(ctx *proc.Context, m any) error {
	switch m := m.(type) {
	case Record:
		if waiting, ok := r.pending[m.Customer]; ok {
			r.pending[m.Customer] = append(waiting, m)
			return nil
		}
		pid, ok := r.live[m.Customer]
		if !ok {
			var err error
			if pid, err = r.spawnEntity(ctx, m.Customer); err != nil {
				return err
			}
		}
		if err := ctx.Send(pid, m); errors.Is(err, proc.ErrNoProcess) {
			// The entity passivated (or failed) meanwhile: wait for its
			// state, or its exit, before respawning it.
			r.pending[m.Customer] = []Record{m}
			return nil
		} else if err != nil {
			return err
		}
	case passivated:
		r.stored[m.key] = m.state
		delete(r.live, m.key)
		if err := r.resume(ctx, m.key); err != nil {
			return err
		}
		r.maybeReport()
	case proc.Exit:
		if m.Reason == nil {
			return nil // a passivated entity's normal exit; its state came before it
		}
		for key, pid := range r.live {
			if pid == m.From {
				delete(r.live, key)
				r.failures++
				if err := r.resume(ctx, key); err != nil {
					return err
				}
			}
		}
		r.maybeReport()
	case flush:
		r.flushing = &m
		keys := make([]string, 0, len(r.live))
		for key := range r.live {
			keys = append(keys, key)
		}
		sort.Strings(keys) // a deterministic order for deterministic mode
		for _, key := range keys {
			_ = ctx.Send(r.live[key], passivate{})
		}
		r.maybeReport()
	}
	return nil
}

func (r *router) maybeReport() {
	if r.flushing == nil || len(r.live) > 0 || len(r.pending) > 0 {
		return
	}
	totals := make(map[string]entityState, len(r.stored))
	for k, v := range r.stored {
		totals[k] = v
	}
	r.flushing.report <- totals
	r.flushing = nil
}

// Entities is the per-key counter: a supervisor whose one child is the
// router.
type Entities struct {
	rt     *proc.Runtime
	router *router
}

// NewEntities spawns the supervision tree in rt.
func NewEntities(rt *proc.Runtime, idleTimeout time.Duration) (*Entities, error) {
	r := newRouter(idleTimeout)
	_, err := rt.Spawn("entities", proc.NewSupervisor(proc.SupervisorSpec{
		Strategy: proc.OneForOne, Intensity: 3, Period: time.Minute,
		Children: []proc.ChildSpec{{
			ID: "router", Name: "router", Restart: proc.Permanent,
			Options: proc.SpawnOptions{TrapExit: true},
			Start:   func(any) proc.Behaviour { return r },
		}},
	}), proc.SpawnOptions{})
	if err != nil {
		return nil, err
	}
	return &Entities{rt: rt, router: r}, nil
}

// Feed sends one record to the router.
func (e *Entities) Feed(rec Record) error { return e.rt.SendName("router", rec) }

var errNoRouter = errors.New("entities: router not running")

// Flush passivates every entity and returns the totals (the runtime must
// be running, or be run until idle before reading the channel).
func (e *Entities) Flush(report chan<- map[string]entityState) error {
	if err := e.rt.SendName("router", flush{report: report}); err != nil {
		return errNoRouter
	}
	return nil
}
