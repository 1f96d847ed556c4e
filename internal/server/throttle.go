package server

import "time"

// Throttling (client quotas, KIP-219): a handler whose response carries
// ThrottleFor mutes its connection. The response itself is written at once
// (clients of the KIP-219 versions back off by its throttle_time_ms); the
// reader then starts no further request of the connection until the
// throttle has passed, as Kafka mutes the channel, so a client that does
// not back off is slowed all the same. A request already read waits
// unstarted (holding its frame's budget, within MaxInFlight); nothing is
// dropped.

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

// waitMuted waits until the connection's throttle has passed; false if the
// reader must stop first.
func (c *conn) waitMuted() bool {
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
		case <-c.readCtx.Done():
			t.Stop()
			return false
		}
	}
}

// Accounting is what the request quotas measure of one request: when its
// handling began and how long it waited on others (a long poll, the log
// writer, a coordinator), which is not its own work. A zero Start means
// nothing is measured (no quota is set): WaitStart and WaitEnd then cost
// nothing.
type Accounting struct {
	Start  time.Time
	Waited time.Duration
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
