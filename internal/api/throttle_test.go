package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// alterQuota sets key of client id c through AlterClientQuotas (49).
func alterQuota(t testing.TB, tb *testBroker, clientID, key string, value float64) {
	t.Helper()
	req := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "client-id", Name: &clientID}}
	e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: key, Value: value}}
	req.Entries = append(req.Entries, e)
	resp := tb.Handle(context.Background(), &server.Request{Key: 49, Version: 1, Body: req}).Body.(*kmsg.AlterClientQuotasResponse)
	if code := resp.Entries[0].ErrorCode; code != 0 {
		t.Fatalf("AlterClientQuotas %s=%v: code %d %v", key, value, code, resp.Entries[0].ErrorMessage)
	}
}

// TestThrottleInEveryResponse: over its request_percentage, every served
// key whose response has a ThrottleMillis field answers it filled, with the
// connection muted as long (ThrottleFor); SASL's keys and clients without a
// quota are not throttled. Generated from the registry, so a new key is
// covered without a change here.
func TestThrottleInEveryResponse(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tb.createTopic(t, "t", 1)
	alterQuota(t, tb, "c", "request_percentage", 1e-9)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for key := range apiKeys {
		k := servedKey(int16(key))
		if k == nil || key == 1 || k.clusterOnly { // Fetch: TestFetchThrottledAnswersEmpty; cluster keys: not served on one node
			continue
		}
		t.Run(kmsg.NameForKey(int16(key)), func(t *testing.T) {
			call := func(clientID string) server.Response {
				body := kmsg.RequestForKey(int16(key))
				body.SetVersion(k.maxVersion)
				if p, ok := body.(*kmsg.ProduceRequest); ok {
					p.Acks = 1
				}
				return tb.Handle(ctx, &server.Request{Key: int16(key), Version: k.maxVersion, ClientID: clientID, Body: body})
			}
			call("c") // the first one may fit
			resp := call("c")
			_, hasThrottle := kmsg.ResponseForKey(int16(key)).(kmsg.ThrottleResponse)
			if key == 17 || key == 36 {
				if resp.ThrottleFor != 0 {
					t.Fatalf("SASL key throttled %v", resp.ThrottleFor)
				}
				return
			}
			if resp.ThrottleFor <= 0 {
				t.Fatalf("over request_percentage: not throttled")
			}
			if hasThrottle {
				ms, _ := resp.Body.(kmsg.ThrottleResponse).Throttle()
				if ms <= 0 || time.Duration(ms)*time.Millisecond > resp.ThrottleFor {
					t.Fatalf("throttle_time_ms %d, connection muted %v", ms, resp.ThrottleFor)
				}
			}
			if other := call("free"); other.ThrottleFor != 0 {
				t.Fatalf("a client without a quota throttled %v", other.ThrottleFor)
			}
		})
	}
}

// TestFetchThrottledAnswersEmpty: a fetch over consumer_byte_rate is
// answered at once with no partitions and the throttle (not counted, as
// Kafka's getThrottledResponse); the records come after the throttle.
func TestFetchThrottledAnswersEmpty(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 1)
	for range 20 {
		appendOne(t, tp.parts[0])
	}
	// acks=1 appends are answered before they are visible (fsynced).
	for deadline := time.Now().Add(10 * time.Second); tp.parts[0].HighWatermark() < 20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("high watermark %d after 10 s", tp.parts[0].HighWatermark())
		}
	}
	alterQuota(t, tb, "c", "consumer_byte_rate", 10)
	fetch := func() server.Response {
		req := fetchAll(tp, []int64{0}, 1, 0)
		req.ClientID = "c"
		return tb.Handle(context.Background(), req)
	}
	first := fetch() // more than 10 × 10 bytes: throttled
	resp, ok := first.Body.(*kmsg.FetchResponse)
	if !ok || first.ThrottleFor <= 0 || resp.ThrottleMillis <= 0 || len(resp.Topics) != 0 {
		t.Fatalf("over the quota: %+v (ThrottleFor %v), want an empty response with the throttle", first.Body, first.ThrottleFor)
	}
	// A fetch within the quota (its bytes are bounded by quota × 10 windows)
	// gets records.
	alterQuota(t, tb, "c", "consumer_byte_rate", 1<<20)
	second := fetch()
	if second.Frame == nil || second.ThrottleFor != 0 {
		t.Fatalf("within the quota: %+v", second)
	}
	second.Frame.Release()
}

// BenchmarkProduceQuota is BenchmarkProduce (one partition) with no quota,
// with a quota on another client only (accounting on, nothing to record),
// and with this client's own producer_byte_rate far above its rate (every
// request measured and recorded, never throttled).
func BenchmarkProduceQuota(b *testing.B) {
	for _, mode := range []string{"none", "other-client", "own-unbound"} {
		b.Run(mode, func(b *testing.B) {
			tb := startTestBroker(b, Config{})
			tb.createTopic(b, "t", 1)
			switch mode {
			case "other-client":
				alterQuota(b, tb, "someone-else", "producer_byte_rate", 1024)
			case "own-unbound":
				alterQuota(b, tb, "bench", "producer_byte_rate", 1e15)
				alterQuota(b, tb, "bench", "request_percentage", 1e9)
			}
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks = 9, 1
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "t"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = batch.Build(batch.BuildOptions{Records: 1, ValueSize: 100, ProducerID: -1})
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			creq := &server.Request{Key: 0, Version: 9, Body: req, ClientID: "bench", Size: 200}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				creq.Accounting = server.Accounting{}
				if resp := tb.Handle(ctx, creq); resp.ThrottleFor != 0 {
					b.Fatal(fmt.Sprint("throttled ", resp.ThrottleFor))
				}
			}
		})
	}
}

// TestUserQuotaFollowsPrincipal: a user quota applies to the request's
// authenticated principal (the session's, as SASL sets it), a <default>
// user quota to ANONYMOUS too, and not to another user.
func TestUserQuotaFollowsPrincipal(t *testing.T) {
	tb := startTestBroker(t, Config{})
	alice := "alice"
	for _, name := range []*string{&alice, nil} {
		req := kmsg.NewPtrAlterClientQuotasRequest()
		e := kmsg.NewAlterClientQuotasRequestEntry()
		e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "user", Name: name}}
		value := 1e-9
		if name == nil {
			value = 1e9 // the <default>: everyone else, unthrottled
		}
		e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: "request_percentage", Value: value}}
		req.Entries = append(req.Entries, e)
		tb.Handle(context.Background(), &server.Request{Key: 49, Version: 1, Body: req})
	}
	call := func(user string) time.Duration {
		s := server.NewSession("SASL_PLAINTEXT", server.SASLPlaintext, nil)
		if user != "" {
			s.SetPrincipal(server.User(user))
		}
		var d time.Duration
		for range 2 {
			body := kmsg.NewPtrMetadataRequest()
			body.Version = 12
			d = tb.Handle(context.Background(), &server.Request{Key: 3, Version: 12, ClientID: "same-client", Session: s, Body: body}).ThrottleFor
		}
		return d
	}
	if d := call("alice"); d <= 0 {
		t.Fatal("alice over her request_percentage not throttled")
	}
	if d := call("bob"); d != 0 {
		t.Fatalf("bob throttled %v under the <default> user quota", d)
	}
	if d := call(""); d != 0 {
		t.Fatalf("ANONYMOUS throttled %v under the <default> user quota", d)
	}
	// The default user quota is the one ANONYMOUS gets: lower it.
	req := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "user"}}
	e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: "request_percentage", Value: 1e-9}}
	req.Entries = append(req.Entries, e)
	tb.Handle(context.Background(), &server.Request{Key: 49, Version: 1, Body: req})
	if d := call(""); d <= 0 {
		t.Fatal("ANONYMOUS not held to the <default> user quota")
	}
}
