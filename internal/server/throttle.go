package server

import (
	"context"
	"time"
)

// Throttling (client quotas, KIP-219): a handler whose response carries
// ThrottleFor mutes its connection (or, earlier, one that calls
// Request.MuteFor). The response itself is written at once (clients of the
// KIP-219 versions back off by its throttle_time_ms); no further request of
// the connection is started until the throttle has passed, as Kafka mutes
// the channel (Kafka handles one request of a connection at a time, so its
// mute holds the next one): the reader reads no more, and a request already
// read (pipelined) waits before its handler starts, holding its frame's
// budget within MaxInFlight. A client that does not back off is slowed all
// the same; nothing is dropped. A throttle is bounded by the quota window
// (11 s by default), so a graceful shutdown waits at most that much longer
// for a muted connection's pipelined requests.

// mute extends the connection's throttle to d from now.
func (c *conn) mute(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.mutedUntilNanos.Load()
		if cur >= until || c.mutedUntilNanos.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitMuted waits until the connection's throttle has passed; false if ctx
// ended first.
func (c *conn) waitMuted(ctx context.Context) bool {
	for {
		until := c.mutedUntilNanos.Load()
		if until == 0 {
			return true
		}
		wait := time.Until(time.Unix(0, until))
		if wait <= 0 {
			c.mutedUntilNanos.CompareAndSwap(until, 0)
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// MuteFor starts the connection's throttle now, before the handler
// returns: a handler that knows its throttle early (Produce, once its
// batches are queued) holds the connection's next requests, which may
// start before it returns. A request without a connection (built in
// process) is not muted.
func (r *Request) MuteFor(d time.Duration) {
	if r.mute != nil {
		r.mute(d)
	}
}

// Accounting is what the request quotas measure of one request: when its
// handling began and how long it waited on others (a long poll, the log
// writer, a coordinator), which is not its own work, and a throttle already
// decided while handling (Throttle). A zero Start means nothing is
// measured (no quota is set): WaitStart and WaitEnd then cost nothing.
type Accounting struct {
	Start    time.Time
	Waited   time.Duration
	Throttle time.Duration
}

// WaitStart marks the start of a wait: pass its result to WaitEnd.
func (a *Accounting) WaitStart() time.Time {
	if a.Start.IsZero() {
		return time.Time{}
	}
	return time.Now()
}

// WaitEnd adds the wait that began at start (WaitStart's result).
func (a *Accounting) WaitEnd(start time.Time) {
	if !start.IsZero() {
		a.Waited += time.Since(start)
	}
}

// Busy is the handler's own time so far: since Start, less its waits.
func (a *Accounting) Busy() time.Duration {
	if a.Start.IsZero() {
		return 0
	}
	return max(time.Since(a.Start)-a.Waited, 0)
}
