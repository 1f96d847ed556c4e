package quota

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/meta"
)

func name(s string) *string { return &s }

func user(n string) meta.QuotaEntityPart {
	if n == "" {
		return meta.QuotaEntityPart{Type: meta.QuotaEntityUser}
	}
	return meta.QuotaEntityPart{Type: meta.QuotaEntityUser, Name: name(n)}
}

func client(n string) meta.QuotaEntityPart {
	if n == "" {
		return meta.QuotaEntityPart{Type: meta.QuotaEntityClientID}
	}
	return meta.QuotaEntityPart{Type: meta.QuotaEntityClientID, Name: name(n)}
}

func quota(key string, v float64, parts ...meta.QuotaEntityPart) meta.ClientQuota {
	return meta.ClientQuota{Entity: parts, Values: map[string]float64{key: v}}
}

func newManual() (*Manager, *clock.Manual) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	return New(Config{Clock: clk}), clk
}

// TestThrottleIsKafkas: the throttle of Kafka's formula on a fresh sensor,
// where the window counts as Windows−1 whole windows: 1000 bytes at
// 100 B/s is exactly the quota (no throttle); 1100 bytes is 10 % over,
// throttled for 10 % of the 10 s window.
func TestThrottleIsKafkas(t *testing.T) {
	m, clk := newManual()
	m.SetQuotas([]meta.ClientQuota{quota(meta.ProducerByteRate, 100, user("alice"))})
	if d := m.RecordProduce("alice", "app", 1000); d != 0 {
		t.Fatalf("at the quota: throttled %v", d)
	}
	if d := m.RecordProduce("alice", "app", 100); d != time.Second {
		t.Fatalf("10%% over: throttled %v, want 1s", d)
	}
	// Half a window later the sum is the same and the span is longer.
	clk.Advance(500 * time.Millisecond)
	if d := m.RecordProduce("alice", "app", 0); d != 500*time.Millisecond {
		t.Fatalf("after 500 ms: throttled %v, want 500ms", d)
	}
	// Far over: bounded by the whole window.
	if d := m.RecordProduce("alice", "app", 1e9); d != m.MaxThrottle() || d != 11*time.Second {
		t.Fatalf("far over: %v, want the window %v", d, m.MaxThrottle())
	}
	// Past the window everything is forgotten.
	clk.Advance(12 * time.Second)
	if d := m.RecordProduce("alice", "app", 1000); d != 0 {
		t.Fatalf("after the window: throttled %v", d)
	}
}

// TestPrecedence: Kafka's eight levels, each checked by removing the level
// above it; and which clients share a sensor.
func TestPrecedence(t *testing.T) {
	levels := []meta.ClientQuota{
		quota(meta.ProducerByteRate, 1, user("alice"), client("app")),
		quota(meta.ProducerByteRate, 2, user("alice"), client("")),
		quota(meta.ProducerByteRate, 3, user("alice")),
		quota(meta.ProducerByteRate, 4, user(""), client("app")),
		quota(meta.ProducerByteRate, 5, user(""), client("")),
		quota(meta.ProducerByteRate, 6, user("")),
		quota(meta.ProducerByteRate, 7, client("app")),
		quota(meta.ProducerByteRate, 8, client("")),
	}
	wantKeys := []sensorKey{{"alice", "app"}, {"alice", "app"}, {"alice", ""}, {"alice", "app"}, {"alice", "app"}, {"alice", ""}, {"", "app"}, {"", "app"}}
	m, _ := newManual()
	for i := range levels {
		m.SetQuotas(levels[i:])
		key, bound, ok := m.resolve(Produce, "alice", "app")
		if !ok || bound != float64(i+1) || key != wantKeys[i] {
			t.Errorf("level %d: got %v %v %v, want bound %d tags %v", i+1, key, bound, ok, i+1, wantKeys[i])
		}
	}
	m.SetQuotas(nil)
	if _, _, ok := m.resolve(Produce, "alice", "app"); ok || m.Enabled() {
		t.Fatal("a quota without any set")
	}
	// A consumer quota does not make a producer one.
	m.SetQuotas([]meta.ClientQuota{quota(meta.ConsumerByteRate, 10, user("alice"))})
	if _, _, ok := m.resolve(Produce, "alice", "app"); ok {
		t.Fatal("consumer_byte_rate applied to produce")
	}
	if !m.Enabled() {
		t.Fatal("not enabled with a quota")
	}
}

// TestSensorsShared: a named user's quota is shared by all its clients; a
// <default> user quota is each user's own; a client-id quota ignores the
// user.
func TestSensorsShared(t *testing.T) {
	m, _ := newManual()
	m.SetQuotas([]meta.ClientQuota{
		quota(meta.ProducerByteRate, 100, user("alice")),
		quota(meta.ProducerByteRate, 100, user("")),
		quota(meta.ConsumerByteRate, 100, client("app")),
	})
	m.RecordProduce("alice", "a", 1000)
	if d := m.RecordProduce("alice", "b", 100); d == 0 {
		t.Fatal("alice's second client did not share her quota")
	}
	m.RecordProduce("bob", "a", 1000)
	if d := m.RecordProduce("carol", "a", 1000); d != 0 {
		t.Fatalf("carol throttled for bob's bytes: %v", d)
	}
	if d := m.RecordProduce("ANONYMOUS", "a", 1100); d == 0 {
		t.Fatal("the <default> user quota did not apply to ANONYMOUS")
	}
	m.RecordFetch("alice", "app", 1000)
	if d := m.RecordFetch("bob", "app", 100); d == 0 {
		t.Fatal("client-id quota not shared across users")
	}
}

// TestFetchThrottledIsNotCounted: a fetch answered empty (throttled) does
// not count, so the next fetch within the quota after the throttle passes.
func TestFetchThrottledIsNotCounted(t *testing.T) {
	m, clk := newManual()
	m.SetQuotas([]meta.ClientQuota{quota(meta.ConsumerByteRate, 100, client("c"))})
	if got := m.FetchMaxBytes("u", "c"); got != 1000 {
		t.Fatalf("fetch max bytes %d, want quota × (windows−1) s = 1000", got)
	}
	if got := m.FetchMaxBytes("u", "other"); got != -1 {
		t.Fatalf("fetch max bytes without a quota: %d", got)
	}
	if d := m.RecordFetch("u", "c", 900); d != 0 {
		t.Fatal(d)
	}
	d := m.RecordFetch("u", "c", 5000)
	if d == 0 {
		t.Fatal("5000 bytes over a 100 B/s quota not throttled")
	}
	clk.Advance(d)
	// Had the 5000 counted, this would be throttled for seconds.
	if d := m.RecordFetch("u", "c", 100); d != 0 {
		t.Fatalf("the throttled fetch was counted: %v", d)
	}
	m.UnrecordFetch("u", "c", 1000)
	if d := m.RecordFetch("u", "c", 1000); d != 0 {
		t.Fatalf("unrecorded bytes still counted: %v", d)
	}
}

// TestRequestPercentage: 100 % is one handler busy all the time; 20 % is
// 200 ms of handler time per second.
func TestRequestPercentage(t *testing.T) {
	m, clk := newManual()
	m.SetQuotas([]meta.ClientQuota{quota(meta.RequestPercentage, 20, client("c"))})
	// 10 s window × 20 % = 2 s of handler time allowed at start.
	if d := m.RecordRequestTime("u", "c", 2*time.Second); d != 0 {
		t.Fatal(d)
	}
	if d := m.RecordRequestTime("u", "c", 200*time.Millisecond); d != time.Second {
		t.Fatalf("10%% over: %v, want 1s", d)
	}
	// Kafka's window counts as 10 s until 10 s have passed: a second
	// later the rate is still 2.2 s / 10 s, the throttle the same.
	clk.Advance(time.Second)
	if d := m.RecordRequestTime("u", "c", 0); d != time.Second {
		t.Fatalf("a second later: %v, want 1s", d)
	}
	// At 10.5 s the span is 10.5 s: 2.2 s is 20.95 %, 500 ms to go.
	clk.Advance(9500 * time.Millisecond)
	if d := m.RecordRequestTime("u", "c", 0); d != 500*time.Millisecond {
		t.Fatalf("at 10.5 s: %v, want 500ms", d)
	}
	// At 11 s the first sample has left the window.
	clk.Advance(500 * time.Millisecond)
	if d := m.RecordRequestTime("u", "c", 0); d != 0 {
		t.Fatalf("at 11 s: %v", d)
	}
}

// TestObeyingClientGetsItsRate: a client that sends as fast as the
// throttle lets it (it waits each throttle out, as KIP-219 clients do)
// gets its quota over ten minutes, within 2 %, whatever its request size.
// (Over shorter spans it does not: Kafka's rate lets a client send
// Windows−1 windows' worth at once, then, as those bytes leave the window
// together, again; bursts of about a window's worth every window.)
func TestObeyingClientGetsItsRate(t *testing.T) {
	for _, rate := range []float64{1 << 20, 4 << 20, 16 << 20} {
		for _, size := range []int64{16 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("%.0fMiB/s-%dKiB", rate/(1<<20), size>>10), func(t *testing.T) {
				m, clk := newManual()
				m.SetQuotas([]meta.ClientQuota{quota(meta.ProducerByteRate, rate, client("c"))})
				begin := clk.Now()
				var start time.Time
				var sent int64
				for clk.Now().Sub(begin) < 10*time.Minute {
					if start.IsZero() && clk.Now().Sub(begin) >= 15*time.Second {
						start, sent = clk.Now(), 0
					}
					sent += size
					d := m.RecordProduce("u", "c", size)
					clk.Advance(100*time.Microsecond + d) // 0.1 ms per request, then the throttle
				}
				got := float64(sent) / clk.Now().Sub(start).Seconds()
				if math.Abs(got-rate)/rate > 0.02 {
					t.Fatalf("achieved %.0f B/s, quota %.0f", got, rate)
				}
			})
		}
	}
}

// TestIdleSensorsDropped: sensors of clients gone for the whole window are
// dropped, so defaults over many client ids stay bounded.
func TestIdleSensorsDropped(t *testing.T) {
	m, clk := newManual()
	m.SetQuotas([]meta.ClientQuota{quota(meta.ProducerByteRate, 100, client(""))})
	for i := 0; i < 1000; i++ {
		m.RecordProduce("u", fmt.Sprint("client-", i), 1)
	}
	if n := len(m.Rates()); n != 1000 {
		t.Fatalf("%d sensors", n)
	}
	clk.Advance(12 * time.Second)
	m.RecordProduce("u", "last", 1)
	if n := len(m.Rates()); n != 1 {
		t.Fatalf("%d sensors after the window, want 1", n)
	}
}

// BenchmarkAccounting is what a request pays for quotas: nothing set (the
// Enabled check Handle makes), a quota set for another client (resolved,
// nothing recorded), and its own quota (resolved, recorded, checked).
func BenchmarkAccounting(b *testing.B) {
	m := New(Config{})
	b.Run("no-quota", func(b *testing.B) {
		n := 0
		for i := 0; i < b.N; i++ {
			if m.Enabled() {
				n++
			}
		}
		if n != 0 {
			b.Fatal(n)
		}
	})
	m.SetQuotas([]meta.ClientQuota{quota(meta.ProducerByteRate, 1e15, client("own")), quota(meta.RequestPercentage, 1e9, client("own"))})
	b.Run("other-client", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			m.RecordProduce("ANONYMOUS", "other", 1000)
			m.RecordRequestTime("ANONYMOUS", "other", time.Microsecond)
		}
	})
	b.Run("own-quota", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			m.RecordProduce("ANONYMOUS", "own", 1000)
			m.RecordRequestTime("ANONYMOUS", "own", time.Microsecond)
		}
	})
}
