package raftnode

import "testing"

// TestCaughtUpRule drives the leader's caught-up rule (voterSync) by hand,
// one acknowledgement per tick: a follower at the log end is caught up now;
// a pipelined follower whose every acknowledgement trails the leader's log
// end by a few entries (raft's appends in flight) stays caught up within a
// few ticks; a follower acknowledging at half the leader's rate falls ever
// further behind in time, though it acknowledges every tick; a silent one
// keeps its last tick. Fails when any acknowledgement counts as caught up
// now (the slow follower would stay in the ISR), or with Kafka's rule
// verbatim (caught up as of the previous acknowledgement's log end: the
// pipelined follower never is, its every Match below it).
func TestCaughtUpRule(t *testing.T) {
	var atEnd, pipelined, slow, silent voterSync
	var last uint64
	for now := int64(1); now <= 200; now++ {
		last += 4 // the leader appends 4 entries a tick
		atEnd.acknowledged(last, last, now)
		pipelined.acknowledged(last-6, last, now) // a tick and a half behind
		slow.acknowledged(last/2, last, now)
		if now <= 10 {
			silent.acknowledged(last, last, now)
		}
		if !atEnd.CaughtUp || atEnd.CaughtUpTick != now {
			t.Fatalf("tick %d: a follower at the log end caught up at %v/%d, want now", now, atEnd.CaughtUp, atEnd.CaughtUpTick)
		}
		if now > 5 && (!pipelined.CaughtUp || now-pipelined.CaughtUpTick > 3) {
			t.Fatalf("tick %d: a pipelined follower two ticks behind caught up at %v/%d", now, pipelined.CaughtUp, pipelined.CaughtUpTick)
		}
	}
	if lag := 200 - slow.CaughtUpTick; lag < 90 {
		t.Fatalf("a follower at half the leader's rate caught up %d ticks ago at tick 200, want it falling behind (≥ 90)", lag)
	}
	if silent.CaughtUpTick != 10 {
		t.Fatalf("a follower silent since tick 10 caught up at %d", silent.CaughtUpTick)
	}
}
