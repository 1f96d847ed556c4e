// Package quota enforces client quotas as Kafka does (KIP-13, KIP-55,
// KIP-124, KIP-219): producer and consumer byte rates and the request
// percentage, per user, client id, or (user, client id), each also in a
// default (<default>) form. The quotas themselves are records of the
// metadata log (internal/meta/quotas.go); a Manager holds a copy made by
// SetQuotas and measures the clients against it.
//
// # Measuring
//
// Each quota type keeps one sensor per quota metric entity (Kafka's metric
// tags: the user and/or client id a matching quota applies to; see
// resolve), a Kafka Rate over Windows samples of WindowSize (Kafka's
// quota.window.num 11 and quota.window.size.seconds 1). A request is
// recorded, then its sensor's rate checked against the bound: over it, the
// throttle time is Kafka's, the time until the rate falls back to the
// quota with nothing more recorded, (rate − quota) / quota × window, at
// most the whole window (Windows × WindowSize). Sensors exist only for
// clients a quota applies to and are dropped once idle for the whole
// window (their rate is zero then), so their number is bounded by the
// clients active in the last Windows × WindowSize.
//
// What is measured:
//   - producer_byte_rate: the bytes of each Produce request (its frame,
//     Kafka's request.sizeInBytes), recorded after the append;
//   - consumer_byte_rate: the bytes of each Fetch response, recorded before
//     it is sent; a fetch over the quota is answered empty instead (and not
//     counted), as Kafka's getThrottledResponse;
//   - request_percentage: the time each request spent in its handler, as a
//     percentage of one handler over the window (100 = one handler busy
//     all the time; Kafka's request handler thread time). Sushka runs each
//     request in its own goroutine, so the time is the handler's wall-clock
//     time minus the time it waited on others (a fetch's long poll, a
//     produce's wait for the log writer and fsync, a coordinator's round
//     trip): what Kafka counts as thread time and what it leaves in
//     purgatory. It is wall time, not CPU time (Go has no per-goroutine CPU
//     clock): a handler preempted on a busy machine is charged for it.
//
// The principal's name is the user entity: User:ANONYMOUS (no SASL, or
// SSL without a client certificate) is the user "ANONYMOUS", as in Kafka,
// so a <default> user quota applies to anonymous clients too.
package quota

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/meta"
)

// Type is a quota type: what a quota key measures.
type Type int

const (
	Produce Type = iota // producer_byte_rate, bytes per second
	Fetch               // consumer_byte_rate, bytes per second
	Request             // request_percentage, percent of one handler's time
	numTypes
)

// Key is the quota key of the type (Kafka's name).
func (t Type) Key() string { return typeKeys[t] }

// String is the type's name in metrics and logs (Kafka's quota types).
func (t Type) String() string { return typeNames[t] }

var (
	typeKeys  = [numTypes]string{meta.ProducerByteRate, meta.ConsumerByteRate, meta.RequestPercentage}
	typeNames = [numTypes]string{"produce", "fetch", "request"}
)

// Kafka's defaults of the window a rate is measured over.
const (
	DefaultWindows    = 11          // quota.window.num
	DefaultWindowSize = time.Second // quota.window.size.seconds
)

// Config configures a Manager; zero values mean the defaults.
type Config struct {
	Clock      clock.Clock   // default clock.Real
	Windows    int           // default DefaultWindows
	WindowSize time.Duration // default DefaultWindowSize; whole milliseconds
	// OnThrottle, if set, is called with every throttle imposed.
	OnThrottle func(t Type, d time.Duration)
}

// Manager measures clients against their quotas. It is safe for
// concurrent use. A Manager without quotas costs one atomic load per
// request (Enabled).
type Manager struct {
	cfg     Config
	w       window
	enabled atomic.Bool
	types   [numTypes]typeState
}

// typeState is one quota type's quotas and sensors.
type typeState struct {
	// quotas are this type's quotas, replaced whole by SetQuotas (read
	// without locks).
	quotas atomic.Pointer[quotaTable]

	mu        sync.Mutex
	sensors   map[sensorKey]*sensor
	lastSweep int64 // ms
}

// quotaTable is one type's quotas: the bound of every entity with one, and
// which of the eight levels of precedence (resolve) have any, so that a
// lookup tries only those.
type quotaTable struct {
	bounds map[entity]float64
	levels [len(levels)]bool
}

// levels are the shapes of entity in Kafka's order of precedence (resolve).
var levels = [...]struct{ user, client kind }{
	{named, named}, {named, byDefault}, {named, absent},
	{byDefault, named}, {byDefault, byDefault}, {byDefault, absent},
	{absent, named}, {absent, byDefault},
}

func levelOf(e entity) int {
	for i, l := range levels {
		if l.user == e.userKind && l.client == e.clientKind {
			return i
		}
	}
	return -1 // no component: entityOf refuses it
}

// kind tells how an entity names one of its components.
type kind uint8

const (
	absent kind = iota
	named
	byDefault
)

// entity is a quota entity: a user and a client id component, each absent,
// named or the default.
type entity struct {
	userKind, clientKind kind
	user, clientID       string
}

// sensorKey is a sensor's metric tags: the user and client id a quota is
// measured for ("" when the quota does not depend on it).
type sensorKey struct{ user, clientID string }

// sensor is one rate and the bound it is checked against.
type sensor struct {
	mu    sync.Mutex
	rate  rate
	bound float64 // refreshed at every record: quotas change at run time
}

// New returns a Manager without quotas.
func New(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Windows <= 0 {
		cfg.Windows = DefaultWindows
	}
	if cfg.WindowSize < time.Millisecond {
		cfg.WindowSize = DefaultWindowSize
	}
	m := &Manager{cfg: cfg, w: window{windows: cfg.Windows, windowMs: cfg.WindowSize.Milliseconds()}}
	for i := range m.types {
		m.types[i].quotas.Store(&quotaTable{bounds: map[entity]float64{}})
		m.types[i].sensors = map[sensorKey]*sensor{}
	}
	return m
}

// MaxThrottle is the longest throttle imposed: the whole window, as Kafka
// bounds it (quota.window.num × quota.window.size.seconds).
func (m *Manager) MaxThrottle() time.Duration {
	return time.Duration(m.w.windows) * time.Duration(m.w.windowMs) * time.Millisecond
}

// SetQuotas replaces every quota by those of the catalogue.
func (m *Manager) SetQuotas(quotas []meta.ClientQuota) {
	var tables [numTypes]*quotaTable
	for i := range tables {
		tables[i] = &quotaTable{bounds: map[entity]float64{}}
	}
	any := false
	for _, q := range quotas {
		e, ok := entityOf(q.Entity)
		if !ok {
			continue
		}
		for t := Type(0); t < numTypes; t++ {
			if v, ok := q.Values[t.Key()]; ok {
				tables[t].bounds[e] = v
				tables[t].levels[levelOf(e)] = true
				any = true
			}
		}
	}
	for t := range tables {
		m.types[t].quotas.Store(tables[t])
	}
	m.enabled.Store(any)
}

// entityOf converts the catalogue's form of an entity; ok is false for
// entity types the manager does not enforce.
func entityOf(parts []meta.QuotaEntityPart) (entity, bool) {
	var e entity
	for _, p := range parts {
		k, name := byDefault, ""
		if p.Name != nil {
			k, name = named, *p.Name
		}
		switch p.Type {
		case meta.QuotaEntityUser:
			e.userKind, e.user = k, name
		case meta.QuotaEntityClientID:
			e.clientKind, e.clientID = k, name
		default:
			return entity{}, false
		}
	}
	return e, e.userKind != absent || e.clientKind != absent
}

// Enabled reports whether any quota is set: without one, callers skip all
// accounting.
func (m *Manager) Enabled() bool { return m.enabled.Load() }

// resolve finds the quota of type t that applies to (user, clientID), in
// Kafka's order of precedence, and the metric tags of the sensor that
// measures it (DefaultQuotaCallback.quotaMetricTags): a quota of a named
// user is shared by all the user's clients, a <default> one is each user's
// own, and so on.
//
//  1. /config/users/<user>/clients/<client-id>
//  2. /config/users/<user>/clients/<default>
//  3. /config/users/<user>
//  4. /config/users/<default>/clients/<client-id>
//  5. /config/users/<default>/clients/<default>
//  6. /config/users/<default>
//  7. /config/clients/<client-id>
//  8. /config/clients/<default>
func (m *Manager) resolve(t Type, user, clientID string) (sensorKey, float64, bool) {
	table := m.types[t].quotas.Load()
	if len(table.bounds) == 0 {
		return sensorKey{}, 0, false
	}
	for i, l := range levels {
		if !table.levels[i] {
			continue
		}
		e := entity{userKind: l.user, clientKind: l.client}
		if l.user == named {
			e.user = user
		}
		if l.client == named {
			e.clientID = clientID
		}
		bound, ok := table.bounds[e]
		if !ok {
			continue
		}
		// The metric tags: a named or <default> user's quota is measured
		// per user, a client-id level per client id, as Kafka's
		// quotaMetricTags.
		key := sensorKey{user: user, clientID: clientID}
		switch {
		case l.client == absent:
			key.clientID = ""
		case l.user == absent:
			key.user = ""
		}
		return key, bound, true
	}
	return sensorKey{}, 0, false
}

// sensor returns the sensor of key, created if needed, and drops idle
// sensors once per window.
func (m *Manager) sensor(t Type, key sensorKey, nowMs int64) *sensor {
	ts := &m.types[t]
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if nowMs-ts.lastSweep >= m.w.windowMs {
		ts.lastSweep = nowMs
		for k, s := range ts.sensors {
			s.mu.Lock()
			idle := s.rate.idle(m.w, nowMs)
			s.mu.Unlock()
			if idle {
				delete(ts.sensors, k)
			}
		}
	}
	s := ts.sensors[key]
	if s == nil {
		s = &sensor{}
		ts.sensors[key] = s
	}
	return s
}

// record records value for (user, clientID) under type t and returns the
// throttle it earns (0 within the quota, or without one). With unrecordIfThrottled,
// a value that earns a throttle is taken back (a fetch answered empty).
func (m *Manager) record(t Type, user, clientID string, value float64, unrecordIfThrottled bool) time.Duration {
	key, bound, ok := m.resolve(t, user, clientID)
	if !ok {
		return 0
	}
	nowMs := m.cfg.Clock.Now().UnixMilli()
	s := m.sensor(t, key, nowMs)
	s.mu.Lock()
	s.bound = bound
	s.rate.record(m.w, value, nowMs)
	ms := s.rate.throttleMs(m.w, bound, nowMs)
	if ms > 0 && unrecordIfThrottled {
		s.rate.record(m.w, -value, nowMs)
	}
	s.mu.Unlock()
	if ms <= 0 {
		return 0
	}
	d := min(time.Duration(ms)*time.Millisecond, m.MaxThrottle())
	if m.cfg.OnThrottle != nil {
		m.cfg.OnThrottle(t, d)
	}
	return d
}

// RecordProduce records a produce request of size bytes and returns the
// throttle it earns under producer_byte_rate.
func (m *Manager) RecordProduce(user, clientID string, bytes int64) time.Duration {
	return m.record(Produce, user, clientID, float64(bytes), false)
}

// RecordFetch records a fetch response of size bytes and returns the
// throttle it earns under consumer_byte_rate; a throttled fetch is answered
// empty, so its bytes are not counted (Kafka's unrecordQuotaSensor).
func (m *Manager) RecordFetch(user, clientID string, bytes int64) time.Duration {
	return m.record(Fetch, user, clientID, float64(bytes), true)
}

// RecordRequestTime records a request's handler time and returns the
// throttle it earns under request_percentage.
func (m *Manager) RecordRequestTime(user, clientID string, d time.Duration) time.Duration {
	// As Kafka's nanosToPercentage: a rate of 100 per second is one
	// handler busy the whole time.
	return m.record(Request, user, clientID, float64(d.Nanoseconds())*100/1e9, false)
}

// UnrecordFetch takes back bytes recorded by RecordFetch that were not
// sent after all (the request quota threw the response away).
func (m *Manager) UnrecordFetch(user, clientID string, bytes int64) {
	key, _, ok := m.resolve(Fetch, user, clientID)
	if !ok {
		return
	}
	nowMs := m.cfg.Clock.Now().UnixMilli()
	s := m.sensor(Fetch, key, nowMs)
	s.mu.Lock()
	s.rate.record(m.w, -float64(bytes), nowMs)
	s.mu.Unlock()
}

// FetchMaxBytes bounds one fetch response of (user, clientID): the most
// that could be recorded without a certain throttle, the quota times
// Windows−1 windows (Kafka's getMaxValueInQuotaWindow), or -1 without a
// quota.
func (m *Manager) FetchMaxBytes(user, clientID string) int64 {
	_, bound, ok := m.resolve(Fetch, user, clientID)
	if !ok {
		return -1
	}
	return int64(bound * float64(m.w.windows-1) * float64(m.w.windowMs) / 1000)
}

// SensorRate is one live sensor's measure, for metrics.
type SensorRate struct {
	Type           Type
	User, ClientID string // the sensor's metric tags
	Rate, Quota    float64
}

// Rates returns every live sensor's current rate and quota.
func (m *Manager) Rates() []SensorRate {
	nowMs := m.cfg.Clock.Now().UnixMilli()
	var out []SensorRate
	for t := Type(0); t < numTypes; t++ {
		ts := &m.types[t]
		ts.mu.Lock()
		for k, s := range ts.sensors {
			s.mu.Lock()
			perSecond, _ := s.rate.measure(m.w, nowMs)
			out = append(out, SensorRate{Type: t, User: k.user, ClientID: k.clientID, Rate: perSecond, Quota: s.bound})
			s.mu.Unlock()
		}
		ts.mu.Unlock()
	}
	return out
}
