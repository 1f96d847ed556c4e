package proc

import (
	"errors"
	"fmt"
)

// The named errors of the runtime. Every one is a package-level value built at
// start-up, so returning it allocates nothing and its message exists even when
// memory has run out (the seed's scheduler could not build its out-of-memory
// message at the moment it needed it). Callers compare with errors.Is.
var (
	// ErrNoProcess: the PID is stale (its process exited, its slot may have
	// been reused under a new generation) or the name is not registered.
	ErrNoProcess = errors.New("proc: no such process (it exited, or the name is not registered)")
	// ErrNameTaken: Spawn with a name another live process holds.
	ErrNameTaken = errors.New("proc: name already registered to a live process")
	// ErrTooManyProcesses: Spawn would exceed Options.MaxProcesses.
	ErrTooManyProcesses = errors.New("proc: process limit reached (Options.MaxProcesses); spawn refused")
	// ErrMemoryBudget: Spawn or Send would exceed Options.MemoryBudgetBytes.
	ErrMemoryBudget = errors.New("proc: memory budget exhausted (Options.MemoryBudgetBytes); spawn or send refused")
	// ErrMailboxFull: Send to a bounded mailbox (SpawnOptions.MailboxLimit)
	// that is full, under MailboxError (or MailboxBlock where the sender
	// cannot wait: a timer, a process sending to itself).
	ErrMailboxFull = errors.New("proc: mailbox full (SpawnOptions.MailboxLimit)")
	// ErrShutdown is the exit reason of a process its supervisor stopped; a
	// transient child exiting with it is not restarted (OTP's shutdown).
	ErrShutdown = errors.New("proc: shutdown")
	// ErrKilled is the exit reason of a process stopped by Kill with a nil
	// reason.
	ErrKilled = errors.New("proc: killed")
	// ErrRestartIntensity is the exit reason of a supervisor that saw more
	// restarts than SupervisorSpec.Intensity within SupervisorSpec.Period: it
	// stopped its children and fails upwards.
	ErrRestartIntensity = errors.New("proc: supervisor reached its restart intensity; children stopped, failing upwards")
	// ErrTurnLimit: RunUntilIdle ran Options.MaxTurns turns without going
	// idle.
	ErrTurnLimit = errors.New("proc: turn limit reached (Options.MaxTurns) before the runtime went idle")
	// ErrRunning: Run or RunUntilIdle while the runtime is already running.
	ErrRunning = errors.New("proc: runtime is already running")
	// ErrBadOptions wraps every configuration error of New and Spawn.
	ErrBadOptions = errors.New("proc: invalid options")
)

// PanicError is the exit reason of a process whose handler panicked.
type PanicError struct {
	Value any // what the handler panicked with
}

func (e *PanicError) Error() string { return fmt.Sprintf("proc: handler panicked: %v", e.Value) }

// reasonText is the journal's spelling of an exit reason: "normal" for nil.
func reasonText(reason error) string {
	if reason == nil {
		return "normal"
	}
	return reason.Error()
}
