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
	m := h.cfg.Metrics
	if m == nil {
		return
	}
	if at := w.SignalTime(); !at.IsZero() {
		m.FetchWake(time.Since(at))
	}
}
