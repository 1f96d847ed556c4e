package api

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp/errresptest"
)

// coordinatedKeys are the keys whose handlers hand the request to the group
// or the transaction coordinator (InitProducerID with a transactional id,
// FindCoordinator of either key type; TxnOffsetCommit to both).
var coordinatedKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 28, 42, 47, 65, 66, 68, 69}

// coordinatedRequests are one request naming one of everything per
// coordinated key at version v (FindCoordinator twice: both key types).
func coordinatedRequests(key, v int16) []kmsg.Request {
	req := kmsg.RequestForKey(key)
	errresptest.FillOne(req) // InitProducerID: a transactional id
	req.SetVersion(v)
	reqs := []kmsg.Request{req}
	if fc, ok := req.(*kmsg.FindCoordinatorRequest); ok {
		txnKey := *fc
		txnKey.CoordinatorType = coordinatorTypeTransaction
		reqs = append(reqs, &txnKey)
	}
	return reqs
}

// TestEveryCoordinatedKeyAfterCloseIsCoordinatorNotAvailable closes both
// coordinators (as a shutdown whose deadline passed does while requests are
// still in flight) and sends every key routed to them at every version
// served: each must be answered, with COORDINATOR_NOT_AVAILABLE on the wire
// in the request's shape and in every item it names. Before, a
// TxnOffsetCommit divided by zero placing its group (the closed store had
// no partitions) and lost its connection, and an OffsetFetch v0-1 was
// answered with no error at all.
func TestEveryCoordinatedKeyAfterCloseIsCoordinatorNotAvailable(t *testing.T) {
	b := startTestBroker(t, Config{})
	if err := b.Txns().Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Groups().Close(); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, b.addr)
	want := kerr.CoordinatorNotAvailable.Code
	for _, key := range coordinatedKeys {
		k := servedKey(key)
		for v := k.minVersion; v <= k.maxVersion; v++ {
			for _, req := range coordinatedRequests(key, v) {
				resp, err := c.roundTrip(req, 10*time.Second)
				if err != nil {
					t.Fatalf("%s v%d after the coordinators closed: %v", kmsg.NameForKey(key), v, err)
				}
				codes, items, err := errresptest.WireCodes(resp)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(codes, want) {
					t.Errorf("%s v%d after the coordinators closed: error codes %v, want COORDINATOR_NOT_AVAILABLE", kmsg.NameForKey(key), v, codes)
				}
				for _, code := range items {
					if code != want {
						t.Errorf("%s v%d after the coordinators closed: an item answered %d", kmsg.NameForKey(key), v, code)
					}
				}
			}
		}
	}
}

// TestCoordinatedRequestsDuringClose sends coordinated requests (and
// Metadata, which lists the coordinators' topics) from several connections
// while the Handler closes: every request is answered (none panics and
// closes its connection), and each sent after Close returned with an error
// code. Run with -race: the coordinators were read unlocked while Close
// cleared them and closed their stores.
func TestCoordinatedRequestsDuringClose(t *testing.T) {
	b := startTestBroker(t, Config{})
	const conns, perConn = 4, 40
	var closed sync.WaitGroup
	closed.Add(1)
	var closedAt time.Time
	var mu sync.Mutex
	go func() {
		defer closed.Done()
		time.Sleep(20 * time.Millisecond)
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		mu.Lock()
		closedAt = time.Now()
		mu.Unlock()
	}()
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, b.addr)
			for n := range perConn {
				var req kmsg.Request
				switch (i + n) % 3 {
				case 0:
					req = coordinatedRequests(28, 3)[0] // TxnOffsetCommit
				case 1:
					req = coordinatedRequests(8, 9)[0] // OffsetCommit
				default:
					m := kmsg.NewPtrMetadataRequest()
					m.Version = 12
					req = m
				}
				sent := time.Now()
				resp, err := c.roundTrip(req, 10*time.Second)
				if err != nil {
					t.Errorf("%s during Close: %v", kmsg.NameForKey(req.Key()), err)
					return
				}
				mu.Lock()
				after := !closedAt.IsZero() && sent.After(closedAt)
				mu.Unlock()
				if _, ok := resp.(*kmsg.MetadataResponse); ok || !after {
					continue
				}
				codes, _, err := errresptest.WireCodes(resp)
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.ContainsFunc(codes, func(c int16) bool { return c != 0 }) {
					t.Errorf("%s after Close: error codes %v, want an error", kmsg.NameForKey(req.Key()), codes)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	closed.Wait()
}

// TestErrorReplyWithoutAShapeCloses: a request type without an error
// response (internal/errresp) is answered by closing the connection, never
// by a bare response (error code 0, success to the client).
func TestErrorReplyWithoutAShapeCloses(t *testing.T) {
	if r := errorReply(kmsg.NewPtrProduceRequest(), kerr.CoordinatorNotAvailable.Code); !r.Close || !r.None || r.Body != nil {
		t.Errorf("Produce: %+v, want the connection closed with no answer", r)
	}
	r := errorReply(kmsg.NewPtrHeartbeatRequest(), kerr.CoordinatorNotAvailable.Code)
	if hb, ok := r.Body.(*kmsg.HeartbeatResponse); !ok || hb.ErrorCode != kerr.CoordinatorNotAvailable.Code || r.Close {
		t.Errorf("Heartbeat: %+v, want COORDINATOR_NOT_AVAILABLE", r)
	}
}
