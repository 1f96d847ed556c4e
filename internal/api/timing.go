package api

import (
	"time"

	"github.com/sushka-io/sushka/internal/plog"
)

// fetchWoken reports a long-poll fetch's wake-up to the metrics: from the
// first high-watermark advance that signalled w (plog.Waker.SignalTime)
// to now, when its answer is ready; the connection's writer times the rest
// (server.Config.OnResponse). Nothing when no signal came (a timeout).
func (h *Handler) fetchWoken(w *plog.Waker) {
	if at := w.SignalTime(); !at.IsZero() {
		h.fetchWokenAt(at.UnixNano())
	}
}

// fetchWokenAt is fetchWoken for a fetch session's long poll, woken by the
// session's watches: at is the unix ns of the first change (0: none).
func (h *Handler) fetchWokenAt(at int64) {
	if m := h.cfg.Metrics; m != nil && at != 0 {
		m.FetchWake(time.Duration(time.Now().UnixNano() - at))
	}
}
