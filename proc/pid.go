package proc

import "strconv"

// PID identifies one process for its whole life. Index is the slot in the
// runtime's process table; Generation counts the slot's uses, so a PID kept
// after its process exited never reaches the process that reuses the slot.
// The zero PID is never issued (generations start at 1): it means "none".
type PID struct {
	Index      uint32
	Generation uint32
}

// IsZero reports whether p is the zero PID ("no process").
func (p PID) IsZero() bool { return p.Generation == 0 }

// String formats the PID as <index.generation>, Erlang's habit.
func (p PID) String() string { return string(p.AppendTo(nil)) }

// AppendTo appends the PID's text form to b.
func (p PID) AppendTo(b []byte) []byte {
	if p.IsZero() {
		return append(b, '-')
	}
	b = append(b, '<')
	b = strconv.AppendUint(b, uint64(p.Index), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(p.Generation), 10)
	return append(b, '>')
}

// MonitorRef identifies one monitor (Context.Monitor); it is unique in its
// runtime.
type MonitorRef uint64

// Exit is the message a process that traps exits (SpawnOptions.TrapExit)
// receives when a linked process exits, or when Kill targets it. Reason nil
// is a normal exit.
type Exit struct {
	From   PID
	Reason error
}

// Down is the message a monitoring process receives when the monitored
// process exits (Reason nil: normal) or did not exist (ErrNoProcess).
type Down struct {
	Ref    MonitorRef
	PID    PID
	Reason error
}

// Timeout is the message a process receives when it set a receive timeout
// (Context.SetReceiveTimeout) and no message came within it.
type Timeout struct{}

// String makes Exit journal-readable and deterministic.
func (e Exit) String() string { return "Exit{" + e.From.String() + " " + reasonText(e.Reason) + "}" }

// String makes Down journal-readable and deterministic.
func (d Down) String() string {
	return "Down{" + strconv.FormatUint(uint64(d.Ref), 10) + " " + d.PID.String() + " " + reasonText(d.Reason) + "}"
}

// String makes Timeout journal-readable.
func (Timeout) String() string { return "Timeout{}" }
