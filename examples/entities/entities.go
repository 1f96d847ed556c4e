package main

import (
	"fmt"
	"time"

	"github.com/sushka-io/sushka/proc"
)

// Record is one input record: an amount for a customer. A negative amount
// is a poison record: the customer's entity fails on it and is restarted,
// on its next record, from its last handed-over state.
type Record struct {
	Customer string
	Amount   int
}

// counterState is what a customer's entity hands over when it passivates,
// and what its next incarnation starts from.
type counterState struct {
	Total   int
	Records int
}

// customer is the per-key entity: one process per active customer.
type customer struct {
	key   string
	state counterState
}

func (c *customer) Receive(ctx *proc.Context, m any) error {
	rec := m.(Record)
	if rec.Amount < 0 {
		return fmt.Errorf("customer %s: negative amount %d", c.key, rec.Amount)
	}
	c.state.Total += rec.Amount
	c.state.Records++
	return nil
}

func (c *customer) State() any { return c.state }

func newCustomer(key string, state any) proc.Entity {
	c := &customer{key: key}
	if s, ok := state.(counterState); ok {
		c.state = s
	}
	return c
}

// Entities is the supervision tree: a one_for_one supervisor whose child
// is the entity router (proc.NewEntities), registered as "router".
type Entities struct {
	rt *proc.Runtime
}

// NewEntities spawns the tree in rt. The router value is built once, so a
// restarted router keeps the states handed over to it.
func NewEntities(rt *proc.Runtime, idleTimeout time.Duration) (*Entities, error) {
	router := proc.NewEntities(proc.EntityOptions{New: newCustomer, IdleTimeout: idleTimeout, NamePrefix: "customer/"})
	_, err := rt.Spawn("entities", proc.NewSupervisor(proc.SupervisorSpec{
		Strategy: proc.OneForOne, Intensity: 3, Period: time.Minute,
		Children: []proc.ChildSpec{{
			ID: "router", Name: "router", Restart: proc.Permanent,
			Start: func(any) proc.Behaviour { return router },
		}},
	}), proc.SpawnOptions{})
	if err != nil {
		return nil, err
	}
	return &Entities{rt: rt}, nil
}

// Feed routes one record to its customer's entity.
func (e *Entities) Feed(rec Record) error {
	return e.rt.SendName("router", proc.Routed{Key: rec.Customer, Message: rec})
}

// Flush passivates every entity; report receives the totals of every
// customer once none is live.
func (e *Entities) Flush(report chan<- map[string]counterState) error {
	return e.rt.SendName("router", proc.PassivateAll{Done: func(states map[string]any) {
		totals := make(map[string]counterState, len(states))
		for k, v := range states {
			totals[k], _ = v.(counterState)
		}
		report <- totals // buffered by the caller: Done must not block
	}})
}
