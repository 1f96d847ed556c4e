package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// quotaWindowSize is the quota window of these tests: Kafka's 11 windows,
// of 100 ms instead of 1 s, so that a 5 s measurement spans many windows
// (Kafka's rate lets a client burst about a window's worth every window).
const quotaWindowSize = 100 * time.Millisecond

func strp(s string) *string { return &s }

// setQuota sets key of the entity (client-id or user name; nil: default)
// and fails the test on any error.
func setQuota(t *testing.T, adm *kadm.Client, entityType string, name *string, key string, value float64) {
	t.Helper()
	res, err := adm.AlterClientQuotas(ctxT(t, 10*time.Second), []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: entityType, Name: name}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: key, Value: value}},
	}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		t.Fatalf("AlterClientQuotas %s=%v: %v", key, value, err)
	}
}

// throttles counts the throttles a client was told of.
type throttles struct {
	n     atomic.Int64
	after atomic.Bool // any applied after the response (KIP-219)
}

func (h *throttles) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, after bool) {
	if d > 0 {
		h.n.Add(1)
		if after {
			h.after.Store(true)
		}
	}
}

// pacedProducer produces 4 KiB records at offered bytes per second (open
// loop, blocking while kgo's small buffer is full) until ctx ends, and
// counts the bytes acknowledged.
func pacedProducer(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, offered float64, acked *atomic.Int64) {
	value := incompressible(4 << 10)
	start := time.Now()
	var sent float64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		due := offered * time.Since(start).Seconds()
		for sent < due && ctx.Err() == nil {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(r *kgo.Record, err error) {
				if err == nil {
					acked.Add(int64(len(r.Value)))
				} else if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
					// (Records still buffered when the test closes the
					// client fail with ErrClientClosed: not acknowledged,
					// not counted.)
					t.Errorf("produce: %v", err)
				}
			})
			sent += float64(len(value))
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// incompressible returns n random bytes: quotas count the bytes on the
// wire, which compression would make a fraction of the records'.
func incompressible(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// rateBetween runs measure until end and returns the counter's rate per
// second between from and end (both after the start).
func rateBetween(counter *atomic.Int64, from, end time.Duration) float64 {
	start := time.Now()
	time.Sleep(from)
	atFrom := counter.Load()
	time.Sleep(end - time.Since(start))
	return float64(counter.Load()-atFrom) / (end - from).Seconds()
}

func producerClient(tb *testBroker, clientID string, h *throttles) *kgo.Client {
	return tb.client(kgo.ClientID(clientID), kgo.WithHooks(h), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.ProducerBatchMaxBytes(64<<10), kgo.MaxBufferedRecords(64), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
}

// TestProduceQuota is the quota test for producers: a producer
// offering 4 MiB/s with producer_byte_rate 1 MiB/s is held to 1 MiB/s
// (±20 %, over 5 s) and told to back off (KIP-219), while another client id
// on the same broker, offering 4 MiB/s too, gets all of it and is never
// throttled. Interleaved with the same run without the quota, where both
// get what they offer.
func TestProduceQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 13 s")
	}
	const offered, limit = 4 << 20, 1 << 20
	tb := startBroker(t, Config{QuotaWindowSize: quotaWindowSize})
	adm := tb.admin()
	if _, err := adm.CreateTopic(ctxT(t, 10*time.Second), 2, 1, nil, "quota-produce"); err != nil {
		t.Fatal(err)
	}
	for _, withQuota := range []bool{false, true} {
		if withQuota {
			setQuota(t, adm, "client-id", strp("limited"), "producer_byte_rate", limit)
		}
		var limitedHooks, freeHooks throttles
		limited, free := producerClient(tb, "limited", &limitedHooks), producerClient(tb, "free", &freeHooks)
		var limitedAcked, freeAcked atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); pacedProducer(ctx, t, limited, "quota-produce", offered, &limitedAcked) }()
		go func() { defer wg.Done(); pacedProducer(ctx, t, free, "quota-produce", offered, &freeAcked) }()
		freeRateCh := make(chan float64, 1)
		go func() { freeRateCh <- rateBetween(&freeAcked, 1500*time.Millisecond, 6500*time.Millisecond) }()
		limitedRate := rateBetween(&limitedAcked, 1500*time.Millisecond, 6500*time.Millisecond)
		freeRate := <-freeRateCh
		cancel()
		wg.Wait()
		limited.Close()
		free.Close()
		t.Logf("quota %v: limited %.2f MiB/s (%d throttles), free %.2f MiB/s (%d throttles)",
			withQuota, limitedRate/(1<<20), limitedHooks.n.Load(), freeRate/(1<<20), freeHooks.n.Load())
		if freeHooks.n.Load() != 0 {
			t.Errorf("the client without a quota was throttled %d times", freeHooks.n.Load())
		}
		if freeRate < 0.8*offered {
			t.Errorf("quota %v: the client without a quota got %.2f MiB/s of the %.0f offered", withQuota, freeRate/(1<<20), float64(offered)/(1<<20))
		}
		if !withQuota {
			if limitedRate < 0.8*offered || limitedHooks.n.Load() != 0 {
				t.Errorf("without a quota: limited got %.2f MiB/s, %d throttles", limitedRate/(1<<20), limitedHooks.n.Load())
			}
			continue
		}
		if math.Abs(limitedRate-limit)/limit > 0.2 {
			t.Errorf("with producer_byte_rate %d: %.3f MiB/s, outside ±20 %%", limit, limitedRate/(1<<20))
		}
		if limitedHooks.n.Load() == 0 || !limitedHooks.after.Load() {
			t.Errorf("the limited producer was not told to back off after the response (throttles %d)", limitedHooks.n.Load())
		}
	}
	if _, n, _ := gatherMetric(t, tb.Registry(), "sushka_quota_throttle_time_seconds", "produce"); n == 0 {
		t.Error("no produce throttle in sushka_quota_throttle_time_seconds")
	}
}

// TestFetchQuota: a consumer with consumer_byte_rate 2 MiB/s reads a
// backlog at 2 MiB/s (±20 %, over 5 s), a throttled fetch being answered
// empty with the throttle; another client id reads the same backlog
// unthrottled meanwhile. Without the quota the same consumer reads it at
// several times the rate.
func TestFetchQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 10 s")
	}
	const limit = 2 << 20
	const backlog = 24 << 20
	tb := startBroker(t, Config{QuotaWindowSize: quotaWindowSize})
	adm := tb.admin()
	if _, err := adm.CreateTopic(ctxT(t, 10*time.Second), 1, 1, nil, "quota-fetch"); err != nil {
		t.Fatal(err)
	}
	p := tb.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(32<<10))
	value := incompressible(16 << 10)
	for i := 0; i < backlog/len(value); i++ {
		p.Produce(context.Background(), &kgo.Record{Topic: "quota-fetch", Value: value}, nil)
	}
	if err := p.Flush(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	consume := func(clientID string, h *throttles, read *atomic.Int64, stop context.Context) {
		cl := tb.client(kgo.ClientID(clientID), kgo.WithHooks(h), kgo.ConsumeTopics("quota-fetch"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(32<<10), kgo.FetchMaxPartitionBytes(32<<10),
			kgo.FetchMaxWait(100*time.Millisecond))
		defer cl.Close()
		for read.Load() < backlog && stop.Err() == nil {
			fs := cl.PollFetches(stop)
			fs.EachRecord(func(r *kgo.Record) { read.Add(int64(len(r.Value))) })
		}
	}

	// Without a quota: how fast this consumer reads here.
	var baseHooks throttles
	var baseRead atomic.Int64
	start := time.Now()
	consume("limited", &baseHooks, &baseRead, ctxT(t, 30*time.Second))
	baseRate := float64(baseRead.Load()) / time.Since(start).Seconds()

	setQuota(t, adm, "client-id", strp("limited"), "consumer_byte_rate", limit)
	var limitedHooks, freeHooks throttles
	var limitedRead, freeRead atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); consume("limited", &limitedHooks, &limitedRead, ctx) }()
	freeStart := time.Now()
	var freeTook time.Duration
	go func() { defer wg.Done(); consume("free", &freeHooks, &freeRead, ctx); freeTook = time.Since(freeStart) }()
	limitedRate := rateBetween(&limitedRead, 1500*time.Millisecond, 6500*time.Millisecond)
	cancel()
	wg.Wait()
	t.Logf("without quota %.1f MiB/s; with consumer_byte_rate 2 MiB/s %.2f MiB/s (%d throttles); free read %d MiB in %v (%d throttles)",
		baseRate/(1<<20), limitedRate/(1<<20), limitedHooks.n.Load(), freeRead.Load()>>20, freeTook, freeHooks.n.Load())
	if baseHooks.n.Load() != 0 || baseRate < 2*limit {
		t.Errorf("without a quota: %.2f MiB/s, %d throttles", baseRate/(1<<20), baseHooks.n.Load())
	}
	if math.Abs(limitedRate-limit)/limit > 0.2 {
		t.Errorf("with consumer_byte_rate %d: %.3f MiB/s, outside ±20 %%", limit, limitedRate/(1<<20))
	}
	if limitedHooks.n.Load() == 0 {
		t.Error("the limited consumer was never told of a throttle")
	}
	if freeHooks.n.Load() != 0 || freeRead.Load() < backlog {
		t.Errorf("the consumer without a quota read %d of %d bytes, %d throttles", freeRead.Load(), backlog, freeHooks.n.Load())
	}
}

// TestRequestQuota: a client with request_percentage 1 (10 ms of handler
// time per second) issuing Metadata requests back to back is throttled and
// its measured handler time held near 1 %; another client id doing the
// same is not throttled and gets many times the requests through.
func TestRequestQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 4 s")
	}
	tb := startBroker(t, Config{QuotaWindowSize: quotaWindowSize})
	setQuota(t, tb.admin(), "client-id", strp("chatty"), "request_percentage", 1)
	run := func(clientID string, h *throttles, done *atomic.Int64, ctx context.Context) {
		cl := tb.client(kgo.ClientID(clientID), kgo.WithHooks(h))
		for ctx.Err() == nil {
			req := kmsg.NewPtrMetadataRequest()
			if _, err := req.RequestWith(ctx, cl); err == nil {
				done.Add(1)
			}
		}
	}
	var chattyHooks, quietHooks throttles
	var chattyDone, quietDone atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); run("chatty", &chattyHooks, &chattyDone, ctx) }()
	go func() { defer wg.Done(); run("other", &quietHooks, &quietDone, ctx) }()
	time.Sleep(3 * time.Second)
	measured, _, _ := gatherMetric(t, tb.Registry(), "sushka_quota_rate", "request", "chatty")
	wg.Wait()
	t.Logf("chatty: %d requests, %d throttles, handler time %.2f %%; other: %d requests, %d throttles",
		chattyDone.Load(), chattyHooks.n.Load(), measured, quietDone.Load(), quietHooks.n.Load())
	if chattyHooks.n.Load() == 0 {
		t.Error("the client over its request_percentage was never throttled")
	}
	if quietHooks.n.Load() != 0 {
		t.Errorf("the client without a quota was throttled %d times", quietHooks.n.Load())
	}
	// The gauge is the rate over the last window (1.1 s here), which a
	// single request preempted on a loaded machine can fill (wall time, not
	// CPU time: internal/quota's doc): only a bound of the order of the
	// quota is asserted; the throughput ratio below is the real check.
	if measured <= 0 || measured > 10 {
		t.Errorf("measured handler time of the throttled client %.2f %%, want of the order of its 1 %%", measured)
	}
	if chattyDone.Load()*3 > quietDone.Load() {
		t.Errorf("throttled client got %d requests through, the other only %d", chattyDone.Load(), quietDone.Load())
	}
}

// TestQuotaAdmin: quotas set, validated, described with Kafka's filters,
// refused as Kafka refuses them, and durable across a restart.
func TestQuotaAdmin(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, Config{DataDir: dir})
	adm := tb.admin()
	ctx := ctxT(t, 20*time.Second)
	alice, app := strp("alice"), strp("app")
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: alice}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1024}, {Key: "consumer_byte_rate", Value: 2048}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: alice}, {Type: "client-id", Name: app}}, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 50}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 4096}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: strp("bad")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: -1}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "group", Name: strp("g")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: strp("bob")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "no_such_key", Value: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		wantErr := i >= 3
		if (r.Err != nil) != wantErr || (wantErr && !errors.Is(r.Err, kerr.InvalidRequest)) {
			t.Errorf("entry %d (%v): %v %s", i, r.Entity, r.Err, r.ErrMessage)
		}
	}
	// Validate only: answered, not applied.
	if res, err := adm.ValidateAlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: strp("carol")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
	}); err != nil || res[0].Err != nil {
		t.Fatalf("validate only: %v %v", err, res)
	}

	describe := func(strict bool, comps ...kadm.DescribeClientQuotaComponent) string {
		t.Helper()
		d, err := adm.DescribeClientQuotas(ctx, strict, comps)
		if err != nil {
			t.Fatalf("describe %v: %v", comps, err)
		}
		var out []string
		for _, q := range d {
			var vals []string
			for _, v := range q.Values {
				vals = append(vals, v.Key+"="+strconv.FormatFloat(v.Value, 'f', -1, 64))
			}
			out = append(out, q.Entity.String()+":"+strings.Join(vals, ","))
		}
		return strings.Join(out, " ")
	}
	check := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	userAny := kadm.DescribeClientQuotaComponent{Type: "user", MatchType: kmsg.QuotasMatchTypeAny}
	all := describe(false)
	check(all, "{client-id=<default>}:producer_byte_rate=4096 {client-id=app, user=alice}:request_percentage=50 {user=alice}:consumer_byte_rate=2048,producer_byte_rate=1024")
	check(describe(false, userAny), "{client-id=app, user=alice}:request_percentage=50 {user=alice}:consumer_byte_rate=2048,producer_byte_rate=1024")
	check(describe(true, userAny), "{user=alice}:consumer_byte_rate=2048,producer_byte_rate=1024")
	check(describe(false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchType: kmsg.QuotasMatchTypeDefault}), "{client-id=<default>}:producer_byte_rate=4096")
	check(describe(false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchName: app, MatchType: kmsg.QuotasMatchTypeExact}), "{client-id=app, user=alice}:request_percentage=50")
	check(describe(false, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("carol"), MatchType: kmsg.QuotasMatchTypeExact}), "")
	if _, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "group", MatchType: kmsg.QuotasMatchTypeAny}}); !errors.Is(err, kerr.UnsupportedVersion) {
		t.Errorf("describe of an unknown entity type: %v, want UNSUPPORTED_VERSION", err)
	}
	if _, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: kmsg.QuotasMatchTypeExact}}); !errors.Is(err, kerr.InvalidRequest) {
		t.Errorf("exact match without a name: %v, want INVALID_REQUEST", err)
	}

	// Remove one key, then restart: what was acknowledged is back.
	if res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: alice}}, Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Remove: true}}},
	}); err != nil || res[0].Err != nil {
		t.Fatalf("remove: %v %v", err, res)
	}
	tb.stop()
	tb = startBroker(t, Config{DataDir: dir})
	adm = tb.admin()
	check(describe(false), "{client-id=<default>}:producer_byte_rate=4096 {client-id=app, user=alice}:request_percentage=50 {user=alice}:producer_byte_rate=1024")
}

// gatherMetric returns the gauge value and histogram count of the first
// sample of the metric name whose labels include every value of labels.
func gatherMetric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (gauge float64, count uint64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, want := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetValue() == want
				}
				if !found {
					continue metric
				}
			}
			return m.GetGauge().GetValue(), m.GetHistogram().GetSampleCount(), true
		}
	}
	return 0, 0, false
}
