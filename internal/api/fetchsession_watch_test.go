package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

// TestIncrementalFetchCostsWhatChanged: an incremental fetch with nothing
// changed costs the same for a session of 5,000 partitions as for one of
// 50 (each reads its candidates only, none here), where reading every
// partition of the session made it about 100 times dearer (issue 12: a
// caught-up consumer of 100,000 partitions). Best of 5 rounds each, so a
// loaded machine's pauses do not decide; the bound (10× and 100 µs) is far
// above the flat cost and far below the linear one.
func TestIncrementalFetchCostsWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 5,050 partitions")
	}
	tb := startTestBroker(t, Config{FS: vfs.NewMem()})
	cost := func(partitions int) time.Duration {
		tp := tb.createTopic(t, fmt.Sprintf("t%d", partitions), int32(partitions))
		creq, req := incrementalRequest(openSession(t, tb, tp))
		req.SessionEpoch = 0
		best := time.Duration(1 << 62)
		for round := range 6 {
			began := time.Now()
			for range 20 {
				nextIncremental(t, tb, creq, req)
			}
			if d := time.Since(began) / 20; round > 0 && d < best { // round 0 watches every partition
				best = d
			}
		}
		return best
	}
	small, large := cost(50), cost(5000)
	t.Logf("incremental fetch with nothing changed: %v with 50 partitions, %v with 5,000", small, large)
	if large > 10*small+100*time.Microsecond {
		t.Fatalf("an incremental fetch of 5,000 partitions costs %v, of 50 %v: it grows with the session", large, small)
	}
}

// TestSessionLongPollWokenByNamedPartition: a session's long poll naming a
// partition at its end (a candidate, read and found empty) is answered as
// soon as a record arrives there, not at MaxWait.
func TestSessionLongPollWokenByNamedPartition(t *testing.T) {
	tb := startTestBroker(t, Config{FS: vfs.NewMem()})
	tp := tb.createTopic(t, "t", 3)
	appendVisible(t, tp.parts[1])
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 1: 0, 2: 0}}
	r.id = fetchRaw(t, c, r).SessionID
	r.epoch, r.offsets = 1, map[int32]int64{1: 1}
	expectAnswer(t, "partition 1 caught up", fetchRaw(t, c, r), 0)
	r.epoch, r.offsets, r.maxWait = 2, map[int32]int64{1: 1}, 8*time.Second
	go func() {
		time.Sleep(100 * time.Millisecond)
		appendVisible(t, tp.parts[1])
	}()
	began := time.Now()
	expectAnswer(t, "a record in partition 1", fetchRaw(t, c, r), 0, "p1 err=0 hwm=2 records=true")
	if waited := time.Since(began); waited > 4*time.Second {
		t.Fatalf("answered after %v, not when the record arrived", waited)
	}
	// A partition not named, caught up and watched, wakes it too.
	r.epoch, r.offsets, r.maxWait = 3, map[int32]int64{1: 2}, 0
	expectAnswer(t, "nothing changed", fetchRaw(t, c, r), 0)
	r.epoch, r.offsets, r.maxWait = 4, nil, 8*time.Second
	go func() {
		time.Sleep(100 * time.Millisecond)
		appendVisible(t, tp.parts[2])
	}()
	began = time.Now()
	expectAnswer(t, "a record in partition 2", fetchRaw(t, c, r), 0, "p2 err=0 hwm=1 records=true")
	if waited := time.Since(began); waited > 4*time.Second {
		t.Fatalf("answered after %v, not when the record arrived", waited)
	}
}

// TestSessionWatchesEndWithTheSession: a session's partitions are
// registered with their logs while it lives, and no longer once a full
// fetch closed it or a forget took them out.
func TestSessionWatchesEndWithTheSession(t *testing.T) {
	tb := startTestBroker(t, Config{FS: vfs.NewMem()})
	tp := tb.createTopic(t, "t", 3)
	c := dialRaw(t, tb.addr)
	r := sessionReq{topic: tp, offsets: map[int32]int64{0: 0, 1: 0, 2: 0}}
	r.id = fetchRaw(t, c, r).SessionID
	r.epoch, r.offsets = 1, nil
	expectAnswer(t, "nothing changed", fetchRaw(t, c, r), 0)
	watchers := func() (n []int) {
		for _, l := range tp.parts {
			n = append(n, l.Watchers())
		}
		return n
	}
	if got := fmt.Sprint(watchers()); got != "[1 1 1]" {
		t.Fatalf("watchers per partition %s in the session, want [1 1 1]", got)
	}
	r.epoch, r.forget = 2, []int32{2}
	expectAnswer(t, "partition 2 forgotten", fetchRaw(t, c, r), 0)
	if got := fmt.Sprint(watchers()); got != "[1 1 0]" {
		t.Fatalf("watchers per partition %s after forgetting 2, want [1 1 0]", got)
	}
	r.epoch, r.forget, r.offsets = -1, nil, map[int32]int64{0: 0} // sessionless: closes the session
	fetchRaw(t, c, r)
	deadline := time.Now().Add(10 * time.Second)
	for fmt.Sprint(watchers()) != "[0 0 0]" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := fmt.Sprint(watchers()); got != "[0 0 0]" {
		t.Fatalf("watchers per partition %s after the session closed, want none", got)
	}
}
