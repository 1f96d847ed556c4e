// Package proc is a lightweight supervised process runtime: processes with
// mailboxes, spawned on the fly and addressed by PID or name, supervised
// with Erlang/OTP's semantics, for per-key stateful processing.
//
// # Processes are data, not goroutines
//
// A process is a 64-byte struct in a paged table: its Behaviour (the
// state), its mailbox (one pointer, nil when empty) and a generation. A
// scheduler thread runs a process only while its mailbox is not empty; an
// idle process costs its struct, its name entry and its behaviour, and no
// goroutine.
//
//   - Spawn returns a PID (slot index and generation): a PID kept after its
//     process exited is detected (ErrNoProcess) and never delivered to the
//     process that reuses the slot.
//   - Names live in a hash index: sending by name costs the same with two
//     processes or a million.
//   - Messages are queued in nodes from a per-thread free list: delivering a
//     preallocated message allocates nothing, and a drained mailbox holds
//     nothing.
//   - The ready queue is a ring: O(1) to add, to take in FIFO order, or to
//     take at a seeded random offset, however many processes are ready.
//
// # Modes
//
// The default mode runs one scheduler thread, FIFO. Deterministic mode
// (Options.Deterministic) also runs one thread, lets a PRNG seeded by
// Options.Seed choose every next process (among the Options.ChoiceWindow
// longest-waiting ready ones), and keeps virtual time that jumps
// to the next timer when nothing is ready: the same seed gives a
// byte-identical Options.Journal, so a failing run is replayed from its
// seed. Multi-core mode (Options.Schedulers > 1) runs several threads, each
// owning the processes spawned on it, with sends between threads through
// the target thread's inbox; order-insensitive programs give the same
// results as in deterministic mode.
//
// # Failures
//
// A process fails by returning an error from Receive (or panicking). Links,
// monitors, exit signals and supervisors (NewSupervisor) follow OTP:
// one-for-one, one-for-all, rest-for-one and simple-one-for-one strategies,
// permanent/transient/temporary children, restart intensity within a period
// and escalation to the supervisor's own supervisor. Supervisors write their
// failures and decisions to the journal.
//
// # Per-key entities
//
// NewEntities returns a router that sends each Routed message to the
// process of its key, spawned on the key's first message with the state the
// key last handed over, and passivated after an idle timeout through a
// hand-shake that loses no message: only active keys cost a process.
//
// # Limits
//
// Options.MaxProcesses, Options.MemoryBudgetBytes, bounded mailboxes
// (SpawnOptions.MailboxLimit with MailboxError, MailboxDrop or MailboxBlock)
// and Options.OutsideQueueLimit answer with named errors (ErrTooManyProcesses,
// ErrMemoryBudget, ErrMailboxFull) whose messages are built at start-up, so
// they can be returned when memory is short.
//
// # Ownership
//
// Each scheduler thread (a shard) owns its part of the process table, its
// mailboxes, nodes, ready ring and timers; no lock guards them. Other
// threads reach a shard only through its inbox (a mutex-guarded slice). The
// name index is shared under a read-write lock. Runtime methods called while
// nothing runs act directly under Runtime.runMu; while the runtime runs they
// go through the inbox. Callbacks get a Context that is valid only during the
// callback. The runtime never calls time.Now: time comes from Options.Clock
// or, in deterministic mode, from virtual time.
package proc
