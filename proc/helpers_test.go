package proc

import (
	"context"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// startRun runs rt.Run in a goroutine and returns once the scheduler owns
// the runtime; stop cancels it and waits for Run to return.
func startRun(rt *Runtime) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Run(ctx) }()
	for {
		rt.runMu.Lock()
		running := rt.running
		rt.runMu.Unlock()
		if running {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	return func() { cancel(); <-done }
}
