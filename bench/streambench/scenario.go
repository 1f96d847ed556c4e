// Package streambench measures what the handler framework (package stream)
// costs against the raw broker client, by the method of the RustStream
// benchmark page (seeds/004): three loops that differ only in what the
// messages pass through.
//
//   - raw: the broker's own client, directly (for Kafka: a franz-go kgo
//     poll loop that decodes into the same type and commits after the
//     handler, the way the Kafka transport commits);
//   - adapter: the transport's own Consumer and Producer (Poll, Mark,
//     Publish), driven by a loop inside the benchmark, without the
//     framework's runtime;
//   - framework: the service as a user writes it (stream.New, Consume or
//     HandleBatch, Run).
//
// Everything else is the same in all three: the client configuration
// (one function, ClientOpts, builds the kgo options), the commit position
// (after the handler, committed every CommitInterval and on close), the
// decoding (encoding/json into Order, the result kept alive in a checksum
// that the run verifies), the payloads (one generator, Payloads), the
// consumer subscribed before the first publish, a fresh topic and group
// per run, and the window: from the return of the poll that delivered the
// first record to the return of the consumer's close, which commits the
// last offset.
//
// A Target supplies the three loops for one broker; Measure runs every
// scenario on every target: a discarded calibration round, then the loops
// interleaved R A F R A F R A F, each run publishing until its window has
// lasted the configured duration.
package streambench

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Scenario is one workload of the three loops.
type Scenario struct {
	Name string
	// ValueBytes is the exact size of every payload.
	ValueBytes int
	// BatchMaxCount > 0 makes the handler a batch handler: per partition,
	// the records fetched so far, up to this many (the framework's
	// HandleBatch with BatchMaxWait 0: it waits for nothing, like a raw
	// loop handing over what one poll returned).
	BatchMaxCount int
	// KeyLanes > 1 handles each partition's records in that many lanes by
	// the hash of their key, sequential per key (KeyConcurrency), with at
	// most MaxInFlight records of a partition in flight.
	KeyLanes int
	// Publish makes the scenario a publish-only one: no consumer, each
	// loop's own publisher (Run.Publishers goroutines, one message at a
	// time each) for Run.Duration.
	Publish bool
}

// Slug is the scenario's name as a topic name part.
func (s Scenario) Slug() string {
	var b strings.Builder
	for _, r := range strings.ToLower(s.Name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// Scenarios are the three, ack each, batch handler and ordered
// concurrency by key, each consuming a backlog, and a publish scenario:
// the loops' publishers alone.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "512 B JSON, ack each", ValueBytes: 512},
		{Name: "1 KiB JSON, batch handler (up to 100)", ValueBytes: 1024, BatchMaxCount: 100},
		{Name: "512 B JSON, ordered by key, 8 lanes", ValueBytes: 512, KeyLanes: 8},
		{Name: "512 B publish, one at a time per publisher", ValueBytes: 512, Publish: true},
	}
}

// The loops' shared settings, one home for each (the framework's and the
// transport's defaults, passed to them explicitly so that the raw loop
// cannot drift from them).
const (
	// CommitInterval is how often every loop commits what it marked: the
	// Kafka transport's default, given to it explicitly.
	CommitInterval = time.Second
	// PollRecords is the most records one poll returns: the App's buffer.
	PollRecords = 512
	// MaxInFlight bounds a partition's records in flight in the lanes
	// scenario: the framework's default, given to it explicitly.
	MaxInFlight = 256
	// HoldBytes bounds the value bytes the raw and adapter loops' handler
	// side holds fetched and not yet handled before the polling goroutine
	// waits: stream/kafka's holdBytes, what the framework's consumer holds
	// while kgo keeps fetching.
	HoldBytes = 32 << 20
	// Keys is the number of distinct keys the generator cycles through.
	Keys = 1024
	// payloadPool is the number of distinct payloads; message i carries
	// payload i mod payloadPool.
	payloadPool = 4096
)

// Order is what every loop decodes each payload into.
type Order struct {
	ID       int64  `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount_cents"`
	Currency string `json:"currency"`
	Note     string `json:"note"`
}

// Payloads are the byte-identical messages every loop publishes: message
// i is Values[i mod len] with key Keys[i mod len].
type Payloads struct {
	Values [][]byte
	Keys   [][]byte
	// cycleSum is the sum of the IDs of one cycle of Values (1..len), for
	// the expected checksum.
	cycleSum int64
}

// NewPayloads builds the pool for values of exactly valueBytes (at least
// 128) bytes: JSON orders padded in their note.
func NewPayloads(valueBytes int) (*Payloads, error) {
	p := &Payloads{}
	for i := range payloadPool {
		o := Order{ID: int64(i + 1), Customer: fmt.Sprintf("customer-%04d", i%977), Amount: int64(100 + i*37%100000), Currency: "EUR"}
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		pad := valueBytes - len(b)
		if pad < 0 {
			return nil, fmt.Errorf("streambench: a value of %d bytes is too small for an order (%d)", valueBytes, len(b))
		}
		o.Note = strings.Repeat(string(rune('a'+i%26)), pad)
		if b, err = json.Marshal(o); err != nil {
			return nil, err
		}
		if len(b) != valueBytes {
			return nil, fmt.Errorf("streambench: payload %d is %d bytes, want %d", i, len(b), valueBytes)
		}
		p.Values = append(p.Values, b)
		p.cycleSum += o.ID
	}
	for i := range Keys {
		p.Keys = append(p.Keys, fmt.Appendf(nil, "key-%04d", i))
	}
	return p, nil
}

// Message returns message i's key and value (shared, read-only).
func (p *Payloads) Message(i int) (key, value []byte) {
	return p.Keys[i%len(p.Keys)], p.Values[i%len(p.Values)]
}

// Checksum is the sum of the order IDs of messages 0..n-1: what a loop
// that decoded every message once reports.
func (p *Payloads) Checksum(n int) int64 {
	cycles, rest := n/len(p.Values), n%len(p.Values)
	sum := int64(cycles) * p.cycleSum
	// IDs are 1..len, so the first rest of them sum to rest(rest+1)/2.
	return sum + int64(rest)*int64(rest+1)/2
}
