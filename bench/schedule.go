package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Op issues request number seq (due at due: the schedule's time in an
// open loop, the send time in a closed loop) and returns without waiting for its answer;
// it calls done exactly once when the answer (or an error) arrives, from
// any goroutine. Op may block (a full client buffer): in an open loop that
// delay is the generator falling behind its schedule, and it is counted.
type Op func(seq int64, due time.Time, done func(error))

// BatchOp is an Op whose request carries several records (the raw engine's
// produce requests): done reports how many of them failed (0 when err is
// nil) and the first error. Latency is recorded once per request.
type BatchOp func(seq int64, due time.Time, done func(failed int64, err error))

// single adapts an Op to a BatchOp of one record per request.
func single(op Op) BatchOp {
	return func(seq int64, due time.Time, done func(int64, error)) {
		op(seq, due, func(err error) {
			if err != nil {
				done(1, err)
				return
			}
			done(0, nil)
		})
	}
}

// LoadResult is what one loop measured. Latency counts from the moment a
// request was due (open loop) or was sent (closed loop).
type LoadResult struct {
	// Mode is "open-loop" or "closed-loop".
	Mode string `json:"mode"`
	// Offered is the scheduled rate (open loop; 0 in a closed loop).
	Offered float64 `json:"offered_per_s"`
	// Window is the closed loop's bound on outstanding requests.
	Window int `json:"window,omitempty"`
	// Issued requests, of which Acked succeeded, Errors failed and
	// Unfinished had no answer when the drain timed out (their latency is
	// recorded as at least the time they waited).
	Issued     int64  `json:"issued"`
	Acked      int64  `json:"acked"`
	Errors     int64  `json:"errors"`
	Unfinished int64  `json:"unfinished"`
	FirstError string `json:"first_error,omitempty"`
	// Elapsed runs from the first due time to the last answer.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Latency of every request.
	Latency *Histogram `json:"-"`
	// SendLag is how late the generator issued each request after it was
	// due (open loop only): a large lag means the generator or the client
	// could not keep up, and the latency then includes the generator.
	SendLag *Histogram `json:"-"`
	// FinalLag is the send lag of the last request issued (open loop): a
	// lag that grew to the end of the window is a schedule that fell
	// behind (see Bound), whatever its percentiles say.
	FinalLag time.Duration `json:"final_lag_ns,omitempty"`
	// Backpressure is how long the loop waited, in all, for the broker's
	// in-flight bound before it could issue a request (set by engines that
	// can tell: the raw engine). Lag it explains is the broker's pace, not
	// the generator's.
	Backpressure time.Duration `json:"backpressure_ns,omitempty"`
}

// Achieved is the rate of acknowledged requests over Elapsed.
func (r LoadResult) Achieved() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Acked) / r.Elapsed.Seconds()
}

// tracker collects answers of a running loop.
type tracker struct {
	mu       sync.Mutex
	lat      Histogram
	acked    int64
	errors   int64
	firstErr string
	last     time.Time
	pending  sync.WaitGroup
	inflight atomic.Int64
	// records is how many records each request carries (1 unless the loop
	// runs BatchOps).
	records int64
}

func (t *tracker) done(start time.Time) func(int64, error) {
	var once atomic.Bool
	return func(failed int64, err error) {
		if !once.CompareAndSwap(false, true) {
			return
		}
		if err != nil && failed == 0 {
			failed = t.records
		}
		failed = min(failed, t.records)
		now := time.Now()
		t.mu.Lock()
		t.lat.Record(now.Sub(start))
		t.errors += failed
		t.acked += t.records - failed
		if err != nil && t.firstErr == "" {
			t.firstErr = err.Error()
		}
		if now.After(t.last) {
			t.last = now
		}
		t.mu.Unlock()
		t.inflight.Add(-1)
		t.pending.Done()
	}
}

// drain waits for the outstanding answers up to timeout and fills r.
func (t *tracker) drain(r *LoadResult, start time.Time, timeout time.Duration, dues func() []time.Time) {
	ch := make(chan struct{})
	go func() { t.pending.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(timeout):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Acked, r.Errors, r.FirstError = t.acked, t.errors, t.firstErr
	r.Unfinished = r.Issued - t.acked - t.errors
	end := t.last
	if r.Unfinished > 0 {
		end = time.Now()
		// The unanswered requests waited at least until now.
		for _, d := range dues() {
			t.lat.Record(end.Sub(d))
		}
	}
	if end.Before(start) {
		end = start
	}
	r.Elapsed = end.Sub(start)
	lat := t.lat
	r.Latency = &lat
}

// OpenLoop issues rate requests per second for duration: request i is due
// at start + i/rate whatever happened to the ones before it, and its
// latency counts from that due time (MEASURING.md rule 7), so a server
// that stalls shows its queue in the percentiles. The loop never waits for
// answers; after the last request it waits up to drain for them.
func OpenLoop(ctx context.Context, rate float64, duration, drain time.Duration, op Op) LoadResult {
	return OpenLoopBatches(ctx, rate, 1, duration, drain, single(op))
}

// OpenLoopBatches is OpenLoop for requests of perRequest records each: rate
// is in records per second, so request i is due at start + i·perRequest/rate.
func OpenLoopBatches(ctx context.Context, rate float64, perRequest int64, duration, drain time.Duration, op BatchOp) LoadResult {
	perRequest = max(perRequest, 1)
	r := LoadResult{Mode: "open-loop", Offered: rate, SendLag: &Histogram{}}
	t := &tracker{records: perRequest}
	n := int64(rate * duration.Seconds() / float64(perRequest))
	interval := float64(time.Second) * float64(perRequest) / rate
	start := time.Now()
	var dueTimes sync.Map // seq → due, only while outstanding
	for i := int64(0); i < n; i++ {
		due := start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		r.FinalLag = time.Since(due)
		r.SendLag.Record(r.FinalLag)
		r.Issued += perRequest
		t.pending.Add(1)
		t.inflight.Add(1)
		dueTimes.Store(i, due)
		inner := t.done(due)
		seq := i
		op(seq, due, func(failed int64, err error) { dueTimes.Delete(seq); inner(failed, err) })
	}
	t.drain(&r, start, drain, func() []time.Time {
		var out []time.Time
		dueTimes.Range(func(_, v any) bool { out = append(out, v.(time.Time)); return true })
		return out
	})
	return r
}

// ClosedLoop keeps window requests outstanding for duration: a new request
// is sent only when an earlier one was answered, and latency counts from
// the send. A closed loop slows down with the server and stops asking, so
// it hides queues (coordinated omission): its figures describe saturation
// throughput, and reports label them "closed-loop".
func ClosedLoop(ctx context.Context, window int, duration, drain time.Duration, op Op) LoadResult {
	return ClosedLoopBatches(ctx, window, 1, duration, drain, single(op))
}

// ClosedLoopBatches is ClosedLoop for requests of perRequest records each;
// window counts requests.
func ClosedLoopBatches(ctx context.Context, window int, perRequest int64, duration, drain time.Duration, op BatchOp) LoadResult {
	if window < 1 {
		window = 1
	}
	perRequest = max(perRequest, 1)
	r := LoadResult{Mode: "closed-loop", Window: window}
	t := &tracker{records: perRequest}
	sem := make(chan struct{}, window)
	start := time.Now()
	deadline := start.Add(duration)
	var sent sync.Map
	for i := int64(0); ; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
		now := time.Now()
		r.Issued += perRequest
		t.pending.Add(1)
		t.inflight.Add(1)
		sent.Store(i, now)
		inner := t.done(now)
		seq := i
		op(seq, now, func(failed int64, err error) { sent.Delete(seq); inner(failed, err); <-sem })
	}
	t.drain(&r, start, drain, func() []time.Time {
		var out []time.Time
		sent.Range(func(_, v any) bool { out = append(out, v.(time.Time)); return true })
		return out
	})
	return r
}
