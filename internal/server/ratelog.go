package server

import (
	"log/slog"
	"sync"
	"time"
)

// rateLimitedLog logs one kind of event at most once per logInterval, so a
// flood of hostile connections (or a descriptor shortage that fails every
// accept) cannot flood the log; the next message says how many were
// suppressed in between. The zero value is ready to use.
type rateLimitedLog struct {
	mu         sync.Mutex
	next       time.Time // no message before this
	suppressed int
}

const logInterval = time.Second

// warn logs msg with args unless a message of this kind was logged less
// than logInterval ago.
func (r *rateLimitedLog) warn(l *slog.Logger, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	if now.Before(r.next) {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.next = now.Add(logInterval)
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	l.Warn(msg, args...)
}
