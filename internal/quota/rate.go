package quota

// rate is Kafka's Rate over a SampledStat (WindowedSum), exactly: up to
// windows+1 samples of windowMs each (the extra one overlaps the start of
// the measured window), samples with no event in the last windows ×
// windowMs are reset, and the rate is their sum over the time since the
// oldest sample began, counted as at least windows-1 whole windows (so a
// burst at start-up is not a huge rate). Times are in milliseconds, as
// Kafka's; a rate is per second. Not safe for concurrent use: its sensor's
// lock guards it.
type rate struct {
	samples []sample // at most windows+1, used as a ring from current
	current int
}

type sample struct {
	value   float64
	events  int64
	startMs int64
	lastMs  int64
}

func (s *sample) reset(nowMs int64) { *s = sample{startMs: nowMs, lastMs: nowMs} }

// window is the configuration a rate is measured with (Kafka's
// quota.window.num and quota.window.size.seconds).
type window struct {
	windows  int
	windowMs int64
}

func (r *rate) currentSample(nowMs int64) *sample {
	if len(r.samples) == 0 {
		r.samples = append(r.samples, sample{startMs: nowMs, lastMs: nowMs})
	}
	return &r.samples[r.current]
}

// record adds value at nowMs (SampledStat.record).
func (r *rate) record(w window, value float64, nowMs int64) {
	s := r.currentSample(nowMs)
	if nowMs-s.startMs >= w.windowMs {
		s = r.advance(w, nowMs)
	}
	s.value += value
	s.events++
	s.lastMs = nowMs
}

func (r *rate) advance(w window, nowMs int64) *sample {
	r.current = (r.current + 1) % (w.windows + 1)
	if r.current >= len(r.samples) {
		r.samples = append(r.samples, sample{startMs: nowMs, lastMs: nowMs})
	} else {
		r.samples[r.current].reset(nowMs)
	}
	return &r.samples[r.current]
}

// purge resets the samples with no event in the monitored window
// (purgeObsoleteSamples).
func (r *rate) purge(w window, nowMs int64) {
	expireAge := int64(w.windows) * w.windowMs
	for i := range r.samples {
		if nowMs-r.samples[i].lastMs >= expireAge {
			r.samples[i].reset(nowMs)
		}
	}
}

// windowMs is the time the rate is measured over (Rate.windowSize).
func (r *rate) windowMs(w window, nowMs int64) int64 {
	r.purge(w, nowMs)
	oldest := r.currentSample(nowMs).startMs
	for _, s := range r.samples {
		oldest = min(oldest, s.startMs)
	}
	elapsed := nowMs - oldest
	if full, least := elapsed/w.windowMs, int64(w.windows-1); full < least {
		elapsed += (least - full) * w.windowMs
	}
	return max(elapsed, 1)
}

// measure is the rate per second at nowMs (Rate.measure), and the span it
// is measured over.
func (r *rate) measure(w window, nowMs int64) (perSecond float64, spanMs int64) {
	spanMs = r.windowMs(w, nowMs) // purges first, as Kafka
	total := 0.0
	for _, s := range r.samples {
		total += s.value
	}
	return total / (float64(spanMs) / 1000), spanMs
}

// throttleMs is Kafka's throttle time for a rate over bound
// (QuotaUtils.throttleTime): how long until the rate, with nothing more
// recorded, falls back to bound: (rate - bound) / bound × window.
func (r *rate) throttleMs(w window, bound float64, nowMs int64) int64 {
	value, spanMs := r.measure(w, nowMs)
	if value <= bound {
		return 0
	}
	return int64((value-bound)/bound*float64(spanMs) + 0.5)
}

// idle reports whether nothing was recorded in the monitored window: the
// rate is zero and its sensor may go.
func (r *rate) idle(w window, nowMs int64) bool {
	expireAge := int64(w.windows) * w.windowMs
	for _, s := range r.samples {
		if nowMs-s.lastMs < expireAge {
			return false
		}
	}
	return true
}
