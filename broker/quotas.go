package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/internal/quota"
)

// quotaMetrics exports the client quotas' measurements: the throttles
// imposed (a histogram per quota type) and, per live sensor, its rate and
// quota. Sensors exist only for clients a quota applies to, and are dropped
// once idle for the quota window, so the series stay bounded by the
// clients with a quota active in the last quota.window.num ×
// quota.window.size (11 s by default).
type quotaMetrics struct {
	quotas   *quota.Manager
	throttle *prometheus.HistogramVec
	rate     *prometheus.Desc
	limit    *prometheus.Desc
}

func newQuotaMetrics(reg *prometheus.Registry, cfg Config) (*quota.Manager, *quotaMetrics) {
	m := &quotaMetrics{
		throttle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sushka_quota_throttle_time_seconds",
			Help:    "Throttles imposed on clients over a quota (throttle_time_ms, and the connection muted as long), by quota type (produce, fetch, request).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"quota_type"}),
		rate: prometheus.NewDesc("sushka_quota_rate",
			"Rate measured for a client with a quota over the quota window: bytes per second (produce, fetch) or percent of one handler (request); user and client_id are the quota's metric tags (empty when the quota does not depend on it).",
			[]string{"quota_type", "user", "client_id"}, nil),
		limit: prometheus.NewDesc("sushka_quota_limit",
			"The quota the client's rate is held to (same labels as sushka_quota_rate).",
			[]string{"quota_type", "user", "client_id"}, nil),
	}
	m.quotas = quota.New(quota.Config{
		Windows:    cfg.QuotaWindows,
		WindowSize: cfg.QuotaWindowSize,
		OnThrottle: func(t quota.Type, d time.Duration) { m.throttle.WithLabelValues(t.String()).Observe(d.Seconds()) },
	})
	reg.MustRegister(m.throttle, m)
	return m.quotas, m
}

// Describe implements prometheus.Collector.
func (m *quotaMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.rate
	ch <- m.limit
}

// Collect implements prometheus.Collector.
func (m *quotaMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, r := range m.quotas.Rates() {
		labels := []string{r.Type.String(), r.User, r.ClientID}
		ch <- prometheus.MustNewConstMetric(m.rate, prometheus.GaugeValue, r.Rate, labels...)
		ch <- prometheus.MustNewConstMetric(m.limit, prometheus.GaugeValue, r.Quota, labels...)
	}
}
