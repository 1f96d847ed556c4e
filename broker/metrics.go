package broker

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// metrics are the broker's Prometheus metrics, registered on its own
// registry so several brokers can live in one process (tests).
type metrics struct {
	requests      *prometheus.CounterVec
	producedBytes *prometheus.CounterVec
	fetchedBytes  *prometheus.CounterVec
	appendLatency prometheus.Histogram
	connections   prometheus.Gauge
	connsTotal    prometheus.Counter
	connsRejected *prometheus.CounterVec
	saslAuths     *prometheus.CounterVec
	byKey         [128]atomic.Int64 // requests by key, for RequestCount
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sushka_requests_total", Help: "Requests received, by API key.",
		}, []string{"api_key", "api"}),
		producedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sushka_produced_bytes_total", Help: "Record batch bytes appended, by topic.",
		}, []string{"topic"}),
		fetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sushka_fetched_bytes_total", Help: "Record batch bytes sent to consumers, by topic.",
		}, []string{"topic"}),
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sushka_append_latency_seconds",
			Help:    "Time from handing a partition's batch to the log until it is acknowledged (includes fdatasync for acks=all).",
			Buckets: prometheus.ExponentialBuckets(20e-6, 2, 18),
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sushka_connections", Help: "Open client connections.",
		}),
		connsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sushka_connections_total", Help: "Client connections accepted.",
		}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sushka_connections_rejected_total", Help: "Client connections closed at once because a limit was reached, by limit.",
		}, []string{"limit"}),
		saslAuths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sushka_sasl_authentications_total",
			Help: "SASL authentications by mechanism, kind (authentication, reauthentication) and result (success, failure), as Kafka's successful-/failed-authentication-total.",
		}, []string{"mechanism", "kind", "result"}),
	}
	reg.MustRegister(m.requests, m.producedBytes, m.fetchedBytes, m.appendLatency, m.connections, m.connsTotal, m.connsRejected, m.saslAuths)
	return m
}

// watchServer registers the gauges read from the server itself.
func (m *metrics) watchServer(reg *prometheus.Registry, srv *server.Server) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sushka_request_memory_bytes", Help: "Bytes of the request memory budget reserved by frames being read or handled.",
		}, func() float64 { return float64(srv.RequestMemoryInUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sushka_request_memory_limit_bytes", Help: "The request memory budget (max request memory).",
		}, func() float64 { return float64(srv.RequestMemoryLimit()) }),
	)
}

func (m *metrics) connectionRejected(limit string) { m.connsRejected.WithLabelValues(limit).Inc() }

func (m *metrics) request(key int16) {
	if key >= 0 && int(key) < len(m.byKey) {
		m.byKey[key].Add(1)
	}
	m.requests.WithLabelValues(strconv.Itoa(int(key)), kmsg.NameForKey(key)).Inc()
}

func (m *metrics) connection(delta int) {
	m.connections.Add(float64(delta))
	if delta > 0 {
		m.connsTotal.Inc()
	}
}

func (m *metrics) ProducedBytes(topic string, n int) {
	m.producedBytes.WithLabelValues(topic).Add(float64(n))
}
func (m *metrics) FetchedBytes(topic string, n int64) {
	m.fetchedBytes.WithLabelValues(topic).Add(float64(n))
}
func (m *metrics) AppendLatency(d time.Duration) { m.appendLatency.Observe(d.Seconds()) }

func (m *metrics) SASLAuthentication(mechanism string, reauthentication, ok bool) {
	kind, result := "authentication", "success"
	if reauthentication {
		kind = "reauthentication"
	}
	if !ok {
		result = "failure"
	}
	m.saslAuths.WithLabelValues(mechanism, kind, result).Inc()
}

// RequestCount returns how many requests with key the broker has received
// (tests use it to check that idle consumers stay quiet).
func (b *Broker) RequestCount(key int16) int64 {
	if key < 0 || int(key) >= len(b.metrics.byKey) {
		return 0
	}
	return b.metrics.byKey[key].Load()
}
