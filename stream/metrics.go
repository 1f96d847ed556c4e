package stream

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics returns a middleware that counts deliveries and records their
// duration in reg:
//
//	stream_deliveries_total{topic, result="ok"|"error"}  deliveries handled
//	stream_records_total{topic, result}                  records in them (batches count each)
//	stream_handler_duration_seconds{topic}               handler time per delivery
//
// The metrics of a topic are looked up once per lane, so a delivery
// allocates nothing for them.
func Metrics(reg prometheus.Registerer) (Middleware, error) {
	deliveries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stream_deliveries_total", Help: "Deliveries handled, by topic and result.",
	}, []string{"topic", "result"})
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stream_records_total", Help: "Records in the deliveries handled, by topic and result.",
	}, []string{"topic", "result"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stream_handler_duration_seconds", Help: "Time in the handler per delivery.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"topic"})
	for _, c := range []prometheus.Collector{deliveries, records, duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return func(next HandlerFunc) HandlerFunc {
		// One lane's metrics: its handler has one topic.
		var topic string
		var ok, failed, okRecords, failedRecords prometheus.Counter
		var seconds prometheus.Observer
		return func(ctx context.Context, rs []*Record) error {
			if ok == nil || rs[0].Topic != topic {
				topic = rs[0].Topic
				ok, failed = deliveries.WithLabelValues(topic, "ok"), deliveries.WithLabelValues(topic, "error")
				okRecords, failedRecords = records.WithLabelValues(topic, "ok"), records.WithLabelValues(topic, "error")
				seconds = duration.WithLabelValues(topic)
			}
			start := time.Now()
			err := next(ctx, rs)
			seconds.Observe(time.Since(start).Seconds())
			if err != nil {
				failed.Inc()
				failedRecords.Add(float64(len(rs)))
			} else {
				ok.Inc()
				okRecords.Add(float64(len(rs)))
			}
			return err
		}
	}, nil
}
