package proc

import (
	"fmt"
	"io"
	"time"
)

// Clock is the runtime's time source outside deterministic mode. Sushka's
// internal/clock.Real and *clock.Manual satisfy it; the runtime never calls
// time.Now itself (DESIGN.md D8).
type Clock interface {
	Now() time.Time
}

// Options configure a Runtime. The zero value is a valid configuration: one
// scheduler thread, FIFO order, no limits, the real clock.
type Options struct {
	// Deterministic selects deterministic mode: one scheduler thread, a PRNG
	// seeded with Seed is the only source of choice (it picks the next ready
	// process), and time is virtual: it starts at VirtualStart and moves only
	// when no process is ready, straight to the next timer. The same seed
	// and the same program give a byte-identical Journal.
	Deterministic bool
	Seed          uint64
	VirtualStart  time.Time // zero: 2000-01-01T00:00:00Z
	// ChoiceWindow is how many of the longest-waiting ready processes the
	// PRNG chooses among (0: DefaultChoiceWindow). A window keeps the
	// choice O(1) in memory traffic too: a pick among a million ready
	// processes anywhere in memory costs a cache miss per turn, a pick near
	// the head of the ring mostly does not; and a process that has waited
	// longest is always among the candidates. Set it to math.MaxInt for a
	// choice among all ready processes.
	ChoiceWindow int

	// Schedulers is the number of scheduler threads (goroutines). 0 or 1:
	// one. More selects multi-core mode: each thread owns the processes
	// spawned on it and runs them from its own ready queue; sends between
	// threads go through the target thread's inbox. Not with Deterministic.
	Schedulers int

	// Clock is the time source outside deterministic mode (nil: the real
	// clock). Timers fire when Clock says their deadline has passed.
	Clock Clock

	// MessagesPerTurn bounds how many messages a process handles before the
	// scheduler moves to the next ready process. 0: 1 in deterministic mode
	// (every message is a choice point), 64 otherwise.
	MessagesPerTurn int

	// MaxProcesses bounds live processes (0: no bound). Spawn beyond it
	// returns ErrTooManyProcesses.
	MaxProcesses int
	// MemoryBudgetBytes bounds the runtime's own accounted memory: process
	// structs, name entries, queued messages (plus Sizer.SizeBytes of
	// messages that implement it). 0: no bound. Spawn or Send beyond it
	// returns ErrMemoryBudget. In multi-core mode each scheduler thread gets
	// an equal share.
	MemoryBudgetBytes int64

	// OutsideQueueLimit bounds the messages and requests from outside the
	// runtime (Runtime.Send, Spawn, Kill while it runs) waiting for a
	// scheduler thread to take them; past it, outside callers wait. 0:
	// DefaultOutsideQueueLimit.
	OutsideQueueLimit int

	// MaxTurns bounds RunUntilIdle (0: no bound): past it, ErrTurnLimit.
	MaxTurns int64

	// Journal, when set, receives one line per event: spawns, deliveries,
	// exits, supervisor failures and decisions. In deterministic mode the
	// bytes depend only on the seed and the program (messages are formatted
	// with %v, so they must not print pointers).
	Journal io.Writer
	// JournalDeliveries adds a line per delivered message to the Journal
	// (off: only spawns, exits and supervisor lines).
	JournalDeliveries bool
}

// DefaultChoiceWindow is Options.ChoiceWindow's default.
const DefaultChoiceWindow = 64

// DefaultOutsideQueueLimit is Options.OutsideQueueLimit's default.
const DefaultOutsideQueueLimit = 4096

// defaultVirtualStart is where virtual time begins when VirtualStart is zero.
var defaultVirtualStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// withDefaults fills the zero fields of o with their meaning and validates
// the result.
func (o Options) withDefaults() (Options, error) {
	if o.Schedulers < 0 || o.MessagesPerTurn < 0 || o.MaxProcesses < 0 || o.MemoryBudgetBytes < 0 || o.MaxTurns < 0 {
		return o, fmt.Errorf("%w: negative Schedulers, MessagesPerTurn, MaxProcesses, MemoryBudgetBytes or MaxTurns", ErrBadOptions)
	}
	if o.ChoiceWindow < 0 {
		return o, fmt.Errorf("%w: negative ChoiceWindow", ErrBadOptions)
	}
	if o.ChoiceWindow == 0 {
		o.ChoiceWindow = DefaultChoiceWindow
	}
	if o.OutsideQueueLimit < 0 {
		return o, fmt.Errorf("%w: negative OutsideQueueLimit", ErrBadOptions)
	}
	if o.OutsideQueueLimit == 0 {
		o.OutsideQueueLimit = DefaultOutsideQueueLimit
	}
	if o.Schedulers == 0 {
		o.Schedulers = 1
	}
	if o.Deterministic && o.Schedulers != 1 {
		return o, fmt.Errorf("%w: deterministic mode runs one scheduler thread, Schedulers=%d", ErrBadOptions, o.Schedulers)
	}
	if o.Deterministic && o.Clock != nil {
		return o, fmt.Errorf("%w: deterministic mode keeps virtual time; leave Clock nil", ErrBadOptions)
	}
	if o.MessagesPerTurn == 0 {
		o.MessagesPerTurn = 64
		if o.Deterministic {
			o.MessagesPerTurn = 1
		}
	}
	if o.VirtualStart.IsZero() {
		o.VirtualStart = defaultVirtualStart
	}
	return o, nil
}

// MailboxPolicy says what a Send to a full bounded mailbox does.
type MailboxPolicy uint8

const (
	// MailboxError refuses the message: Send returns ErrMailboxFull.
	MailboxError MailboxPolicy = iota
	// MailboxDrop drops the message silently (Send returns nil) and counts
	// it in Runtime.Stats().Dropped.
	MailboxDrop
	// MailboxBlock makes the sender wait until the mailbox has room. A
	// sender outside the runtime (Runtime.Send from another goroutine)
	// waits in Send. A process sending from its callback is not interrupted
	// (its scheduler thread is the one that must make room): the message
	// is kept, the callback finishes, and the sender gets no further turn
	// until the mailbox has room. A send from another scheduler thread, or
	// from a timer, is refused like MailboxError (counted in Dropped across
	// threads). As with any blocking queue, processes that fill each
	// other's Block mailboxes wait for each other forever.
	MailboxBlock
)

// SpawnOptions configure one process.
type SpawnOptions struct {
	// TrapExit turns exit signals from linked processes (and Kill) into Exit
	// messages instead of exiting with their reason.
	TrapExit bool
	// Link links the new process to its spawner (Context.Spawn only).
	Link bool
	// MailboxLimit bounds the mailbox (0: unbounded); MailboxFull says what
	// happens past it. System signals (exits, links, monitors) bypass the
	// bound.
	MailboxLimit int
	MailboxFull  MailboxPolicy
	// Spread lets Context.Spawn in multi-core mode start the process on
	// another scheduler thread (round-robin), so that processes spawned by
	// one process use every core. Spawn then returns the PID at once, and
	// the process starts (Init runs, the name is registered) on its thread
	// shortly after; a failure to start reaches the spawner only as the
	// exit signal of a Link. Ignored with one thread, and by Runtime.Spawn
	// (which places round-robin anyway).
	Spread bool
}

// Behaviour is what a process does with a message. Receive runs on a
// scheduler thread, never concurrently with itself, so the behaviour's
// fields are its state and need no lock. Returning an error makes the
// process exit with that reason (a panic too, as *PanicError); ctx must not
// be kept after Receive returns.
type Behaviour interface {
	Receive(ctx *Context, message any) error
}

// BehaviourFunc adapts a function to Behaviour.
type BehaviourFunc func(ctx *Context, message any) error

// Receive calls f.
func (f BehaviourFunc) Receive(ctx *Context, message any) error { return f(ctx, message) }

// Initializer is implemented by behaviours that set up when spawned. Init
// runs inside Spawn, before Spawn returns (OTP's init in start_link): an
// error makes Spawn fail with it and the process never exists.
type Initializer interface {
	Init(ctx *Context) error
}

// Terminator is implemented by behaviours that clean up when the process
// exits, for any reason (reason nil: normal). Terminate runs before links
// and monitors are told.
type Terminator interface {
	Terminate(ctx *Context, reason error)
}

// Sizer is implemented by messages that want their payload counted in the
// memory budget (only when Options.MemoryBudgetBytes is set).
type Sizer interface {
	SizeBytes() int
}
