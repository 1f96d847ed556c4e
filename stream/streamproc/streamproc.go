// Package streamproc routes a stream handler's messages to per-key
// entities of the process runtime (proc.NewEntities): each key gets its own
// process, with its own state, that handles the key's messages one at a
// time, is spawned on the key's first message and passivated when idle.
//
//	rt, _ := proc.New(proc.Options{})
//	router, _ := rt.Spawn("", proc.NewEntities(streamproc.Options(proc.EntityOptions{
//		IdleTimeout: time.Minute,
//		New: func(key string, state any) proc.Entity { return newAccount(key, state) },
//	})), proc.SpawnOptions{})
//	go rt.Run(ctx)
//	stream.Consume(app, "payments", streamproc.Route[Payment](rt, router), stream.KeyConcurrency(8))
//
// The entity receives a Message[T] in its Receive. The stream handler
// Route returns waits until the entity's Receive has returned, and returns
// its error: the message is acknowledged only after its entity handled it,
// and a failure goes to the ack policy (a nack redelivers it, to the key's
// next incarnation if the entity crashed), exactly as with an ordinary
// handler. Since each message waits for its entity, the stream's order per
// key is the entity's order; KeyConcurrency sets how many keys of a
// partition are handled at once.
//
// Dependencies: stream and proc do not know each other; this package
// imports both.
package streamproc

import (
	"context"
	"errors"
	"fmt"

	"github.com/sushka-io/sushka/proc"
	"github.com/sushka-io/sushka/stream"
)

// Message is what the entity of a key receives for each of its records.
// Value is decoded by the stream handler's codec; Record is the record
// itself (Key, Headers, Partition, Offset, Timestamp), valid until the
// entity's Receive returns.
type Message[T any] struct {
	Key    string
	Value  T
	Record *stream.Record
	done   chan error
}

// complete is how Options' wrapper ends a Message without knowing T.
func (m Message[T]) complete(err error) { m.done <- err }

type completer interface{ complete(error) }

// ErrNoKey is returned for a record without a key: it has no entity.
var ErrNoKey = errors.New("streamproc: the record has no key")

// Route returns a stream handler that sends each message to the entity of
// its key through router (a proc.NewEntities router of rt, built with
// Options) and waits until the entity has handled it, or ctx ends. A
// router that is gone answers proc's error (proc.ErrNoProcess). Each
// message allocates its Message and a channel: this adapter is for
// stateful work per key, not the framework's allocation-free path.
func Route[T any](rt *proc.Runtime, router proc.PID) func(context.Context, T) error {
	return func(ctx context.Context, v T) error {
		rec := stream.Current(ctx)
		if rec == nil || len(rec.Key) == 0 {
			return stream.Permanent(ErrNoKey)
		}
		m := Message[T]{Key: string(rec.Key), Value: v, Record: rec, done: make(chan error, 1)}
		if err := rt.Send(router, proc.Routed{Key: m.Key, Message: m}); err != nil {
			return err
		}
		select {
		case err := <-m.done:
			return err
		case <-ctx.Done():
			// The entity may still handle it: the buffered channel takes
			// its answer, nobody reads it. The nack redelivers it.
			return ctx.Err()
		}
	}
}

// Options wraps opts.New so that every entity it returns completes each
// Message it receives with the error its Receive returned (a Message must
// be completed, or its stream handler waits until its context ends). Init
// and Terminate of the entity are kept.
func Options(opts proc.EntityOptions) proc.EntityOptions {
	newEntity := opts.New
	if newEntity == nil {
		return opts // NewEntities reports the missing New
	}
	opts.New = func(key string, state any) proc.Entity {
		return &completing{Entity: newEntity(key, state)}
	}
	return opts
}

// completing completes the Messages its entity receives.
type completing struct{ proc.Entity }

func (c *completing) Receive(ctx *proc.Context, message any) error {
	m, ok := message.(completer)
	if !ok {
		return c.Entity.Receive(ctx, message)
	}
	defer func() {
		// A panic crashes the entity as proc does with any process; the
		// message fails with it rather than waiting for its deadline.
		if r := recover(); r != nil {
			m.complete(fmt.Errorf("streamproc: entity panicked: %v", r))
			panic(r)
		}
	}()
	err := c.Entity.Receive(ctx, message)
	m.complete(err)
	return err
}

func (c *completing) Init(ctx *proc.Context) error {
	if i, ok := c.Entity.(proc.Initializer); ok {
		return i.Init(ctx)
	}
	return nil
}

func (c *completing) Terminate(ctx *proc.Context, reason error) {
	if t, ok := c.Entity.(proc.Terminator); ok {
		t.Terminate(ctx, reason)
	}
}
