package api

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// sessionReq is a Fetch of session id at epoch naming partitions of one
// topic (by name below v13, by ID from v13) from the offsets given, and
// forgetting the partitions in forget.
type sessionReq struct {
	version     int16
	id, epoch   int32
	topic       *topic
	offsets     map[int32]int64
	forget      []int32
	maxWait     time.Duration
	isolation   int8
	replicaID   int32
	anotherName string // name the request's topic this instead (a topic that does not exist)
}

func (r sessionReq) build() *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = r.version
	if req.Version == 0 {
		req.Version = 12
	}
	req.ReplicaID = -1
	if r.replicaID != 0 {
		req.ReplicaID = r.replicaID
	}
	req.SessionID, req.SessionEpoch = r.id, r.epoch
	req.MaxWaitMillis = int32(r.maxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = 50 << 20
	req.IsolationLevel = r.isolation
	name, id := r.topic.meta.Name, r.topic.meta.ID
	if r.anotherName != "" {
		name, id = r.anotherName, [16]byte{0xee}
	}
	if len(r.offsets) > 0 {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = name, id
		var ps []int32
		for p := range r.offsets {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		for _, p := range ps {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, r.offsets[p], 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	if len(r.forget) > 0 {
		ft := kmsg.NewFetchRequestForgottenTopic()
		ft.Topic, ft.TopicID, ft.Partitions = name, id, r.forget
		req.ForgottenTopics = append(req.ForgottenTopics, ft)
	}
	return req
}

// fetchRaw sends r on c and returns its answer.
func fetchRaw(t *testing.T, c *rawConn, r sessionReq) *kmsg.FetchResponse {
	t.Helper()
	resp, err := c.roundTrip(r.build(), 10*time.Second)
	if err != nil {
		t.Fatalf("fetch %+v: %v", r, err)
	}
	return resp.(*kmsg.FetchResponse)
}

// answered is what a Fetch answered: per partition its error code, high
// watermark and the count of record bytes ("p0 err=0 hwm=1 bytes=70").
func answered(resp *kmsg.FetchResponse) []string {
	var out []string
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out = append(out, fmt.Sprintf("p%d err=%d hwm=%d records=%t", rp.Partition, rp.ErrorCode, rp.HighWatermark, len(rp.RecordBatches) > 0))
		}
	}
	return out
}

func expectAnswer(t *testing.T, what string, resp *kmsg.FetchResponse, errorCode int16, want ...string) {
	t.Helper()
	if resp.ErrorCode != errorCode {
		t.Fatalf("%s: error code %d (%v), want %d", what, resp.ErrorCode, kerr.ErrorForCode(resp.ErrorCode), errorCode)
	}
	if got := answered(resp); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: answered %v, want %v", what, got, want)
	}
}

// appendVisible appends one record to l and waits until a fetch can see
// it (visible once fsynced: the sync is paced, and slow on a loaded disk).
func appendVisible(t testing.TB, l *plog.Log) {
	t.Helper()
	hwm := l.HighWatermark()
	appendOne(t, l)
	for deadline := time.Now().Add(10 * time.Second); l.HighWatermark() == hwm; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an appended record is not visible after 10s")
		}
	}
}

// TestFetchSessionProtocol walks KIP-227 on one connection: a full fetch
// at epoch 0 creates a session; incremental fetches answer only what
// changed (nothing: no partition, after the long poll; new records; a
// partition added; a topic deleted); a wrong epoch or unknown id are
// answered with their error and no topics; forgotten partitions leave;
// forgetting everything closes the session; epoch -1 is a full fetch that
// closes the session it names.
func TestFetchSessionProtocol(t *testing.T) {
	for _, version := range []int16{7, 12, 13, 16} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			tb := startTestBroker(t, Config{})
			tp := tb.createTopic(t, "t", 4)
			appendVisible(t, tp.parts[2])
			c := dialRaw(t, tb.addr)
			r := sessionReq{version: version, topic: tp, maxWait: 50 * time.Millisecond}

			r.offsets = map[int32]int64{0: 0, 1: 0, 2: 0}
			resp := fetchRaw(t, c, r)
			expectAnswer(t, "full fetch at epoch 0", resp, 0, "p0 err=0 hwm=0 records=false", "p1 err=0 hwm=0 records=false", "p2 err=0 hwm=1 records=true")
			id := resp.SessionID
			if id <= 0 {
				t.Fatalf("full fetch at epoch 0: session id %d, want a new session", id)
			}
			r.id, r.offsets = id, nil
			next := func(what string, errorCode int16, want ...string) *kmsg.FetchResponse {
				t.Helper()
				r.epoch++
				resp := fetchRaw(t, c, r)
				expectAnswer(t, what, resp, errorCode, want...)
				if errorCode == 0 && resp.SessionID != id {
					t.Fatalf("%s: session id %d, want %d", what, resp.SessionID, id)
				}
				return resp
			}

			// The client moves partition 2 on; nothing else changed.
			r.offsets = map[int32]int64{2: 1}
			start := time.Now()
			next("nothing changed", 0)
			if waited := time.Since(start); waited < 40*time.Millisecond {
				t.Fatalf("an incremental fetch with nothing changed answered after %v, want the 50ms long poll", waited)
			}
			r.offsets = nil
			next("nothing changed, nothing named", 0)

			appendVisible(t, tp.parts[1])
			next("records in partition 1", 0, "p1 err=0 hwm=1 records=true")
			// The session still fetches partition 1 from 0: its records
			// are answered again.
			next("partition 1 fetched from 0 again", 0, "p1 err=0 hwm=1 records=true")
			r.offsets = map[int32]int64{1: 1}
			next("partition 1 moved on", 0)

			// A long poll with nothing changed is woken by an append.
			r.offsets, r.maxWait = nil, 5*time.Second
			go func() {
				time.Sleep(100 * time.Millisecond)
				appendOne(t, tp.parts[0])
			}()
			start = time.Now()
			next("woken by an append to partition 0", 0, "p0 err=0 hwm=1 records=true")
			if waited := time.Since(start); waited > 3*time.Second {
				t.Fatalf("long poll woken after %v", waited)
			}
			r.maxWait = 50 * time.Millisecond

			// A partition added is answered, records or not.
			r.offsets = map[int32]int64{0: 1, 3: 0}
			next("partition 3 added", 0, "p3 err=0 hwm=0 records=false")

			// Forgotten partitions leave the session: records appended
			// there are not answered.
			r.offsets, r.forget = nil, []int32{0}
			next("partition 0 forgotten", 0)
			r.forget = nil
			appendVisible(t, tp.parts[0])
			next("records in the forgotten partition 0", 0)

			// Wrong epochs and unknown ids: an error and no topics; the
			// session is still there at its epoch.
			last := r.epoch
			r.epoch += 5
			next("epoch ahead", kerr.InvalidFetchSessionEpoch.Code)
			r.epoch = last - 1
			next("epoch repeated", kerr.InvalidFetchSessionEpoch.Code)
			r.id, r.epoch = id+1, last
			next("unknown session id", kerr.FetchSessionIDNotFound.Code)
			r.id, r.epoch = id, last
			appendVisible(t, tp.parts[3])
			next("the session goes on", 0, "p3 err=0 hwm=1 records=true")

			// A session of topic IDs is not fetched by name, nor the reverse.
			other := r
			other.version, other.epoch = 12, r.epoch+1
			if version < 13 {
				other.version = 13
			}
			expectAnswer(t, "the session by the other naming", fetchRaw(t, c, other), kerr.FetchSessionTopicIDError.Code)

			// Epoch -1 is a sessionless full fetch, and closes the session.
			full := sessionReq{version: version, topic: tp, id: id, epoch: -1, offsets: map[int32]int64{3: 1}, maxWait: 50 * time.Millisecond}
			resp = fetchRaw(t, c, full)
			expectAnswer(t, "epoch -1 naming the session", resp, 0, "p3 err=0 hwm=1 records=false")
			if resp.SessionID != 0 {
				t.Fatalf("epoch -1: session id %d, want 0", resp.SessionID)
			}
			next("the session closed by epoch -1", kerr.FetchSessionIDNotFound.Code)
			if n := tb.fetchSessions.len(); n != 0 {
				t.Fatalf("%d sessions left in the cache", n)
			}
		})
	}
}

// TestFetchSessionForgetAll: forgetting every partition closes the session
// and is answered sessionless, as Kafka does.
func TestFetchSessionForgetAll(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 1: 0}}
	id := fetchRaw(t, c, r).SessionID
	r = sessionReq{topic: tp, id: id, epoch: 1, forget: []int32{0, 1}}
	resp := fetchRaw(t, c, r)
	expectAnswer(t, "everything forgotten", resp, 0)
	if resp.SessionID != 0 || tb.fetchSessions.len() != 0 {
		t.Fatalf("session id %d, %d sessions in the cache: want none", resp.SessionID, tb.fetchSessions.len())
	}
}

// TestFetchSessionErrorsAnsweredUntilGone: a session's partition in error
// (its topic deleted) is answered every time, and at once, as Kafka
// answers any partition in error; a partition that does not exist when
// named is kept in the session with its error.
func TestFetchSessionErrorsAnsweredUntilGone(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 1)
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 5: 0}, maxWait: 2 * time.Second}
	resp := fetchRaw(t, c, r)
	expectAnswer(t, "full fetch of partitions 0 and 5 of a 1-partition topic", resp, 0, "p0 err=0 hwm=0 records=false", fmt.Sprintf("p5 err=%d hwm=-1 records=false", kerr.UnknownTopicOrPartition.Code))
	r.id, r.offsets = resp.SessionID, nil
	for epoch := int32(1); epoch <= 2; epoch++ {
		r.epoch = epoch
		start := time.Now()
		expectAnswer(t, "incremental", fetchRaw(t, c, r), 0, fmt.Sprintf("p5 err=%d hwm=-1 records=false", kerr.UnknownTopicOrPartition.Code))
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("a partition in error was answered after %v, want at once", waited)
		}
	}
}

// TestFetchSessionLogStartAnswered: a change of log start alone (records
// deleted) puts the partition into the incremental answer.
func TestFetchSessionLogStartAnswered(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	appendVisible(t, tp.parts[0])
	appendVisible(t, tp.parts[0])
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 2, 1: 0}, maxWait: 20 * time.Millisecond}
	r.id = fetchRaw(t, c, r).SessionID
	r.offsets, r.epoch = nil, 1
	expectAnswer(t, "nothing changed", fetchRaw(t, c, r), 0)
	if _, err := tp.parts[0].DeleteRecordsBefore(1); err != nil {
		t.Fatal(err)
	}
	r.epoch++
	resp := fetchRaw(t, c, r)
	expectAnswer(t, "log start moved", resp, 0, "p0 err=0 hwm=2 records=false")
	if ls := resp.Topics[0].Partitions[0].LogStartOffset; ls != 1 {
		t.Fatalf("log start %d, want 1", ls)
	}
}

// TestFetchSessionCacheFull: with every slot taken by a session younger
// than the eviction time, a full fetch at epoch 0 is answered in full
// with session id 0 (no session); a session unused longer than the
// eviction time is evicted for a new one; among sessions older than it,
// the one of fewest partitions is evicted for a larger one, never for a
// smaller one; a follower's (privileged) session evicts a consumer's
// however young.
func TestFetchSessionCacheFull(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tb := startTestBroker(t, Config{FetchSessionSlots: 2, Clock: clk})
	tp := tb.createTopic(t, "t", 4)
	c := dialRaw(t, tb.addr)
	open := func(partitions int32, replicaID int32) int32 {
		t.Helper()
		r := sessionReq{topic: tp, offsets: map[int32]int64{}, replicaID: replicaID}
		for p := range partitions {
			r.offsets[p] = 0
		}
		resp := fetchRaw(t, c, r)
		if len(answered(resp)) != int(partitions) || resp.ErrorCode != 0 {
			t.Fatalf("full fetch of %d partitions: %v", partitions, answered(resp))
		}
		return resp.SessionID
	}
	epochs := map[int32]int32{}
	use := func(id int32) int16 {
		t.Helper()
		epochs[id]++
		return fetchRaw(t, c, sessionReq{topic: tp, id: id, epoch: epochs[id]}).ErrorCode
	}
	a, b := open(1, -1), open(2, -1)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("sessions %d, %d: want two", a, b)
	}
	if id := open(3, -1); id != 0 {
		t.Fatalf("cache full of young sessions: got session %d, want 0", id)
	}
	if n := tb.fetchSessions.len(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}

	// a unused for longer than the eviction time (b used meanwhile): the
	// next session takes its slot.
	clk.Advance(100 * time.Second)
	if code := use(b); code != 0 {
		t.Fatalf("using b: %v", kerr.ErrorForCode(code))
	}
	clk.Advance(21 * time.Second)
	cID := open(1, -1)
	if cID == 0 {
		t.Fatal("no session though a was unused for 121s")
	}
	if code := use(a); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("the evicted session answered %v, want FETCH_SESSION_ID_NOT_FOUND", kerr.ErrorForCode(code))
	}

	// b (2 partitions) and c (1) both used recently; b is older than the
	// eviction time, c is not. A session of 1 partition evicts neither
	// (b is larger, c young); one of 3 evicts b.
	if code := use(cID); code != 0 {
		t.Fatalf("using c: %v", kerr.ErrorForCode(code))
	}
	if code := use(b); code != 0 {
		t.Fatalf("using b: %v", kerr.ErrorForCode(code))
	}
	if id := open(1, -1); id != 0 {
		t.Fatalf("a 1-partition session evicted one: got %d", id)
	}
	d := open(3, -1)
	if d == 0 {
		t.Fatal("a 3-partition session evicted nothing")
	}
	if code := use(b); code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("b, 2 partitions and old, should have been evicted for 3: %v", kerr.ErrorForCode(code))
	}
	// A follower's session evicts a consumer's, even a young one.
	if id := open(1, 1); id == 0 {
		t.Fatal("a follower's session evicted nothing")
	}
	if n := tb.fetchSessions.evicted(); n != 3 {
		t.Fatalf("%d evictions, want 3", n)
	}
}

// TestFetchSessionsDisabled: FetchSessionSlots < 0 keeps no session: an
// epoch 0 fetch is answered in full with session id 0.
func TestFetchSessionsDisabled(t *testing.T) {
	tb := startTestBroker(t, Config{FetchSessionSlots: -1})
	tp := tb.createTopic(t, "t", 1)
	resp := fetchRaw(t, dialRaw(t, tb.addr), sessionReq{topic: tp, offsets: map[int32]int64{0: 0}})
	expectAnswer(t, "epoch 0 without sessions", resp, 0, "p0 err=0 hwm=0 records=false")
	if resp.SessionID != 0 {
		t.Fatalf("session id %d, want 0", resp.SessionID)
	}
}

// TestFetchSessionPipelined: two fetches of one session sent back to back
// on a connection: the first is answered, the second (same epoch, a
// client's duplicate) is INVALID_FETCH_SESSION_EPOCH, whichever the broker
// starts first; the race detector watches the session's state.
func TestFetchSessionPipelined(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 2)
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 1: 0}, maxWait: 30 * time.Millisecond}
	r.id, r.offsets = fetchRaw(t, c, r).SessionID, nil
	for epoch := int32(1); epoch < 40; epoch += 2 {
		r.epoch = epoch
		c.send(r.build())
		r.epoch = epoch + 1
		c.send(r.build())
		codes := map[int16]int{}
		for range 2 {
			_, body, err := c.readFrame(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			resp := kmsg.FetchResponse{Version: 12}
			if err := resp.ReadFrom(body[1:]); err != nil {
				t.Fatal(err)
			}
			codes[resp.ErrorCode]++
		}
		// Both at their epochs in order: both served (the second waits
		// for the first to let the session go), or the second was
		// started first and refused, and then the first served.
		if codes[0] == 0 || codes[0]+codes[kerr.InvalidFetchSessionEpoch.Code] != 2 {
			t.Fatalf("epochs %d and %d pipelined: codes %v", epoch, epoch+1, codes)
		}
		if codes[0] == 1 {
			// The session is at epoch+1 still: resynchronise.
			r.epoch = epoch + 1
			if resp := fetchRaw(t, c, r); resp.ErrorCode != 0 {
				t.Fatalf("after the refused duplicate: %v", kerr.ErrorForCode(resp.ErrorCode))
			}
		}
	}
}

// incrementalRequest is a v12 incremental fetch of session id with no
// partitions, answering at once.
func incrementalRequest(id int32) (*server.Request, *kmsg.FetchRequest) {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.SessionID, req.MaxBytes = 12, -1, id, 50<<20
	return &server.Request{Key: 1, Version: 12, Body: req}, req
}

// openSession creates a session of every partition of tp from offset 0
// through the Handler and returns its id.
func openSession(t testing.TB, tb *testBroker, tp *topic) int32 {
	s := tb.fetchSessions
	had := map[int32]bool{}
	s.mu.Lock()
	for id := range s.byID {
		had[id] = true
	}
	s.mu.Unlock()
	creq := fetchAll(tp, make([]int64, len(tp.parts)), 0, 0)
	creq.Body.(*kmsg.FetchRequest).SessionEpoch = 0
	resp := tb.Handle(context.Background(), creq)
	resp.Frame.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.byID {
		if !had[id] {
			return id
		}
	}
	t.Fatal("no session created")
	return 0
}

// TestIncrementalFetchAllocs pins the allocations of an incremental fetch:
// they do not grow with the session's partitions (100 or 1,000), whether
// nothing changed or one partition has records (MEASURING.md rule 15).
func TestIncrementalFetchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under -race")
	}
	ctx := context.Background()
	measure := func(partitions int, oneChanged bool) float64 {
		tb := startTestBroker(t, Config{})
		tp := tb.createTopic(t, fmt.Sprintf("t%d", partitions), int32(partitions))
		if oneChanged {
			// The session fetches it from 0: its record is answered
			// every time.
			appendVisible(t, tp.parts[partitions/2])
		}
		id := openSession(t, tb, tp)
		creq, req := incrementalRequest(id)
		epoch := int32(0)
		return testing.AllocsPerRun(200, func() {
			epoch++
			req.SessionEpoch = epoch
			resp := tb.Handle(ctx, creq)
			if resp.Frame == nil {
				t.Fatalf("incremental fetch answered %+v", resp.Body)
			}
			resp.Frame.Release()
		})
	}
	// Nothing changed: nothing (the answer's state is pooled, back at the
	// frame's Release). One changed: its read's chunk (plog's ReadResult),
	// as a sessionless fetch's (TestFetchAllocations).
	floors := map[bool]float64{false: 0, true: 1}
	for _, oneChanged := range []bool{false, true} {
		small, large := measure(100, oneChanged), measure(1000, oneChanged)
		t.Logf("one changed %t: %.0f allocations per incremental fetch of 100 partitions, %.0f of 1,000", oneChanged, small, large)
		if floor := floors[oneChanged]; large > small || large > floor {
			t.Fatalf("one changed %t: %.0f allocations with 1,000 partitions, %.0f with 100: floor %.0f, and no growth with the session", oneChanged, large, small, floor)
		}
	}
}

// BenchmarkIncrementalFetch: an incremental fetch of a session of n
// partitions with nothing changed, against the full fetch of the same
// partitions (both answered at once): CPU and allocations per request.
func BenchmarkIncrementalFetch(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000} {
		tb := startTestBroker(b, Config{})
		tp := tb.createTopic(b, fmt.Sprintf("t%d", n), int32(n))
		b.Run(fmt.Sprintf("partitions=%d/full", n), func(b *testing.B) {
			creq := fetchAll(tp, make([]int64, n), 0, 0)
			creq.Body.(*kmsg.FetchRequest).SessionEpoch = -1
			b.ReportAllocs()
			for b.Loop() {
				tb.Handle(ctx, creq).Frame.Release()
			}
		})
		b.Run(fmt.Sprintf("partitions=%d/incremental", n), func(b *testing.B) {
			creq, req := incrementalRequest(openSession(b, tb, tp))
			req.SessionEpoch = 0
			b.ReportAllocs()
			for b.Loop() {
				nextIncremental(b, tb, creq, req)
			}
		})
		// The same with a long poll of 1 ms that nothing wakes: the
		// request's cost above its millisecond of waiting is what a
		// caught-up consumer of the session pays per poll.
		b.Run(fmt.Sprintf("partitions=%d/incremental-long-poll", n), func(b *testing.B) {
			creq, req := incrementalRequest(openSession(b, tb, tp))
			req.SessionEpoch, req.MaxWaitMillis, req.MinBytes = 0, 1, 1
			b.ReportAllocs()
			for b.Loop() {
				nextIncremental(b, tb, creq, req)
			}
		})
	}
}

// nextIncremental sends the session's next incremental fetch (req, in
// creq) through the Handler and releases its answer.
func nextIncremental(t testing.TB, tb *testBroker, creq *server.Request, req *kmsg.FetchRequest) {
	t.Helper()
	req.SessionEpoch++
	resp := tb.Handle(context.Background(), creq)
	if resp.Frame == nil {
		t.Fatalf("epoch %d answered %+v", req.SessionEpoch, resp.Body)
	}
	resp.Frame.Release()
}

// TestNextFetchEpoch: Kafka's FetchMetadata.nextEpoch.
func TestNextFetchEpoch(t *testing.T) {
	for _, tt := range []struct{ epoch, next int32 }{{-1, -1}, {-5, -1}, {0, 1}, {1, 2}, {math.MaxInt32, 1}} {
		if got := nextFetchEpoch(tt.epoch); got != tt.next {
			t.Errorf("nextFetchEpoch(%d) = %d, want %d", tt.epoch, got, tt.next)
		}
	}
}

// TestFetchSessionGrowsPastLimit: incremental fetches adding partitions
// cannot grow a session past MaxPartitionsPerRequest: the request that
// would closes its connection, as a full fetch naming too many does, and
// the session is gone.
func TestFetchSessionGrowsPastLimit(t *testing.T) {
	tb := startTestBroker(t, Config{MaxPartitionsPerRequest: 3})
	tp := tb.createTopic(t, "t", 4)
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 1: 0}}
	r.id = fetchRaw(t, c, r).SessionID
	r.epoch, r.offsets = 1, map[int32]int64{2: 0}
	expectAnswer(t, "a third partition", fetchRaw(t, c, r), 0, "p2 err=0 hwm=0 records=false")
	r.epoch, r.offsets = 2, map[int32]int64{3: 0}
	c.send(r.build())
	c.expectClosed("a fourth partition")
	if n := tb.fetchSessions.len(); n != 0 {
		t.Fatalf("%d sessions left", n)
	}
}

// TestIncrementalFetchStaysZeroCopy: an incremental answer's records are
// file ranges of the segment (sent with sendfile), as a full one's, and
// their pins are released with the frame.
func TestIncrementalFetchStaysZeroCopy(t *testing.T) {
	tb := startTestBroker(t, Config{})
	tp := tb.createTopic(t, "t", 3)
	appendVisible(t, tp.parts[1])
	creq, req := incrementalRequest(openSession(t, tb, tp))
	req.SessionEpoch = 1
	resp := tb.Handle(context.Background(), creq)
	if resp.Frame == nil {
		t.Fatalf("answered %+v", resp.Body)
	}
	var files int
	var fileBytes int64
	for _, p := range resp.Frame.Pieces {
		if p.File != nil {
			files++
			fileBytes += p.Len
		}
	}
	got := kmsg.FetchResponse{Version: 12}
	if err := got.ReadFrom(materialize(t, resp.Frame)); err != nil {
		t.Fatal(err)
	}
	resp.Frame.Release()
	if files != 1 || len(got.Topics) != 1 || len(got.Topics[0].Partitions) != 1 || int64(len(got.Topics[0].Partitions[0].RecordBatches)) != fileBytes {
		t.Fatalf("%d file pieces of %d bytes; answer %+v", files, fileBytes, got.Topics)
	}
}
