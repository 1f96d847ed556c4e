package streambench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sushka-io/sushka/stream/nats/natstest"
	"github.com/sushka-io/sushka/test/testbroker"
)

// TestLoopsDeliverEveryMessage runs every loop of every scenario once
// against an in-process Sushka broker and a nats-server with JetStream:
// each must receive every message exactly once (the count and the checksum
// of the decoded IDs), within a window that makes sense.
func TestLoopsDeliverEveryMessage(t *testing.T) {
	t.Run("sushka", func(t *testing.T) {
		k, err := NewKafka("sushka", []string{testbroker.StartInProcess(t)}, "in-process test broker", false)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		deliverEveryMessage(t, k, 3)
		t.Run("until-the-window-lasted", func(t *testing.T) { lastsItsDuration(t, k) })
	})
	t.Run("jetstream", func(t *testing.T) {
		j, err := NewJetStream(natstest.Start(t), "test nats-server")
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		deliverEveryMessage(t, j, 1)
	})
}

func deliverEveryMessage(t *testing.T, target Target, partitions int32) {
	for _, sc := range Scenarios() {
		payloads, err := NewPayloads(sc.ValueBytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, loop := range Loops {
			t.Run(sc.Slug()+"/"+loop.String(), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				run := &Run{Scenario: sc, Name: "t-" + sc.Slug() + "-" + loop.String(), Messages: 3000, Payloads: payloads,
					Partitions: partitions, Publishers: 16}
				res, err := target.RunLoop(ctx, loop, run)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d messages in %v, poll wait %v", res.Received, res.Window, res.PollWait)
			})
		}
	}
}

// TestPayloads: every value has exactly the scenario's size, decodes
// into Order, and Checksum sums the IDs of the first n messages.
func TestPayloads(t *testing.T) {
	p, err := NewPayloads(512)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 7, payloadPool, payloadPool + 5, 3*payloadPool + 11} {
		var sum int64
		for i := range n {
			_, v := p.Message(i)
			if len(v) != 512 {
				t.Fatalf("message %d is %d bytes", i, len(v))
			}
			var o Order
			if err := json.Unmarshal(v, &o); err != nil {
				t.Fatal(err)
			}
			sum += o.ID
		}
		if got := p.Checksum(n); got != sum {
			t.Errorf("Checksum(%d) = %d, the decoded IDs sum to %d", n, got, sum)
		}
	}
	if _, err := NewPayloads(16); err == nil {
		t.Error("a 16-byte order was built")
	}
}

// TestLanesMarkOnlyTheFinishedPrefix: lanes finish out of order; the mark
// moves only over offsets that are all finished, never past a gap.
func TestLanesMarkOnlyTheFinishedPrefix(t *testing.T) {
	const window = 8
	p := &partitionLanes{key: partitionKey{"t", 0}, base: 10, next: 16, done: make([]bool, window)}
	p.cond.L = &p.mu
	var marks []int64
	mark := func(_ string, _ int32, next int64) { marks = append(marks, next) }
	for _, o := range []int64{12, 11, 15, 10, 14, 13} {
		p.finish(o, window, mark)
	}
	want := []int64{13, 16} // 10 completes 10..12; 13 completes 13..15
	if len(marks) != len(want) || marks[0] != want[0] || marks[1] != want[1] {
		t.Errorf("marks %v, want %v", marks, want)
	}
}

// TestMeterPollWait: a poll before the first record (waiting for the
// publishers) and the part of a poll after the last message was handled
// are not the broker's pace and do not count; the window starts when the
// first poll with records returned.
func TestMeterPollWait(t *testing.T) {
	m := newMeter()
	m.setTotal(2)
	m.polled(time.Now().Add(-time.Hour), 0) // subscribing, nothing published yet
	if m.pollWait.Load() != 0 || m.firstAt.Load() != 0 {
		t.Fatal("a poll before the first record counted")
	}
	m.polled(time.Now().Add(-time.Minute), 1)
	if m.pollWait.Load() != 0 || m.firstAt.Load() == 0 {
		t.Fatal("the first record's poll: counted, or did not open the window")
	}
	m.polled(time.Now().Add(-20*time.Millisecond), 1)
	if w := time.Duration(m.pollWait.Load()); w < 20*time.Millisecond || w > time.Second {
		t.Fatalf("a 20ms poll counted %v", w)
	}
	m.handled(1)
	m.handled(2)
	before := m.pollWait.Load()
	m.polled(time.Now().Add(-time.Millisecond), 0)
	time.Sleep(5 * time.Millisecond)
	start := time.Now()
	time.Sleep(5 * time.Millisecond)
	m.polled(start, 0) // entirely after the last message: nothing
	if got := m.pollWait.Load() - before; got > int64(time.Millisecond)+int64(time.Millisecond) {
		t.Errorf("polls after the last message counted %v", time.Duration(got))
	}
	if r := m.finished(); r.Received != 2 || r.Checksum != 3 || r.Window <= 0 {
		t.Errorf("result %+v", r)
	}
}

// lastsItsDuration: a run bounded by time, not by count, publishes until
// its window has lasted the duration, and consumes exactly what it
// published.
func lastsItsDuration(t *testing.T, target Target) {
	sc := Scenarios()[0]
	payloads, err := NewPayloads(sc.ValueBytes)
	if err != nil {
		t.Fatal(err)
	}
	const d = 400 * time.Millisecond
	for _, loop := range Loops {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		run := &Run{Scenario: sc, Name: "d-" + loop.String(), Messages: 1 << 30, Duration: d, Payloads: payloads, Partitions: 2, Publishers: 16}
		res, err := target.RunLoop(ctx, loop, run)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", loop, err)
		}
		// The last publish may start a round trip before the deadline.
		if res.Window < d-50*time.Millisecond || res.Published == 0 {
			t.Errorf("%s: published %d in a window of %v, want at least %v", loop, res.Published, res.Window, d)
		}
	}
}
