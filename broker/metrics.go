package broker

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog"
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

	// The breakdown of a request's time (issue 12), so that a tail can be
	// attributed to a step: see stepBuckets and docs/architecture.md.
	requestQueue, responseWrite *prometheus.HistogramVec // by api
	// byKeyQueue and byKeyWrite hold their children by key, made at a
	// key's first response: a response pays no label lookup.
	byKeyQueue, byKeyWrite                          [128]atomic.Pointer[prometheus.Histogram]
	appendQueue, appendWrite, syncWait, syncLatency prometheus.Histogram
	fetchWake                                       prometheus.Histogram
}

// stepBuckets are the buckets of the request-step histograms: 10 µs to
// 5.2 s, doubling (a step of a loopback request is tens of microseconds,
// an fdatasync a fraction of a millisecond to tens of them).
var stepBuckets = prometheus.ExponentialBuckets(10e-6, 2, 20)

func stepHistogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: stepBuckets})
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
		requestQueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sushka_request_queue_seconds",
			Help:    "Time from a request's frame read to its handler's start (the connection's previous ordered request, a throttle, the scheduler), by API.",
			Buckets: stepBuckets,
		}, []string{"api"}),
		responseWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sushka_response_write_seconds",
			Help:    "Time from a handler's answer to its response written to the socket (the responses before it in request order, then the write), by API.",
			Buckets: stepBuckets,
		}, []string{"api"}),
		appendQueue: stepHistogram("sushka_append_queue_seconds",
			"Time an append waited in its partition's queue for the writer (the groups written before it)."),
		appendWrite: stepHistogram("sushka_append_write_seconds",
			"acks=all: time of the partition writer's group that wrote an append: offsets, idempotence checks and the write system call."),
		syncWait: stepHistogram("sushka_append_sync_wait_seconds",
			"acks=all: time from an append written to the start of the fdatasync covering it (the fdatasync before it: group commit)."),
		syncLatency: stepHistogram("sushka_append_fdatasync_seconds",
			"acks=all: the fdatasync covering an append (one per group commit, counted once per append it acknowledged)."),
		fetchWake: stepHistogram("sushka_fetch_wake_seconds",
			"Long-poll fetch: time from the high watermark advance that woke it to its answer being ready (its write is sushka_response_write_seconds{api=\"Fetch\"})."),
	}
	reg.MustRegister(m.requests, m.producedBytes, m.fetchedBytes, m.appendLatency, m.connections, m.connsTotal, m.connsRejected, m.saslAuths,
		m.requestQueue, m.responseWrite, m.appendQueue, m.appendWrite, m.syncWait, m.syncLatency, m.fetchWake)
	return m
}

// response observes a written response's queue and write steps
// (server.Config.OnResponse).
func (m *metrics) response(key int16, queued, written time.Duration) {
	if key < 0 || int(key) >= len(m.byKeyQueue) {
		return
	}
	m.keyHistogram(&m.byKeyQueue[key], m.requestQueue, key).Observe(queued.Seconds())
	m.keyHistogram(&m.byKeyWrite[key], m.responseWrite, key).Observe(written.Seconds())
}

// keyHistogram is vec's child for key, made once and kept in slot.
func (m *metrics) keyHistogram(slot *atomic.Pointer[prometheus.Histogram], vec *prometheus.HistogramVec, key int16) prometheus.Histogram {
	if h := slot.Load(); h != nil {
		return *h
	}
	h := vec.WithLabelValues(kmsg.NameForKey(key)).(prometheus.Histogram)
	slot.CompareAndSwap(nil, &h)
	return h
}

func (m *metrics) AppendTiming(enqueued time.Time, t plog.AppendTiming) {
	queue, write, syncWait, sync := t.Steps(enqueued)
	m.appendQueue.Observe(queue.Seconds())
	if t.SyncStarted.IsZero() {
		return // not acks=all: its write is its whole append latency
	}
	m.appendWrite.Observe(write.Seconds())
	m.syncWait.Observe(syncWait.Seconds())
	m.syncLatency.Observe(sync.Seconds())
}

func (m *metrics) FetchWake(d time.Duration) { m.fetchWake.Observe(d.Seconds()) }

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
