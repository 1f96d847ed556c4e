package streambench

import (
	"context"
	"encoding/json"
	"sync/atomic"
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
		t.Run("start-at-zero", func(t *testing.T) { groupStartsAtZero(t, k) })
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

// consumeWindowBound bounds the window of each consume run of
// deliverEveryMessage: half the JetStream loops' pull expiry. The
// adapter's and framework's windows reached it when the transport's
// consumer Close waited for its pull request to expire (5.05-5.09 s
// against the raw loop's 70-110 ms).
const consumeWindowBound = natsFetchExpiry / 2

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
					Partitions: partitions, Publishers: 16, Duration: 300 * time.Millisecond}
				res, err := target.RunLoop(ctx, loop, run)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d messages in %v, poll wait %v, CPU %v, broker CPU %v (%v)", res.Received, res.Window, res.PollWait, res.CPU, res.BrokerCPU, res.BrokerCPUOK)
				switch {
				case sc.Publish:
					// A run bounded by time publishes until then, and the
					// broker holds exactly what it acknowledged.
					if res.Window < run.Duration || res.Published == 0 {
						t.Errorf("published %d in a window of %v, want at least %v", res.Published, res.Window, run.Duration)
					}
				case res.Published != run.Messages || res.PublishBound() || res.AfterPublish < res.Window:
					// The backlog was published before the consumer
					// started: the window ends after the publishers' stop
					// by at least its own length.
					t.Errorf("published %d of a backlog of %d; %v after the publishers' stop for a window of %v", res.Published, run.Messages, res.AfterPublish, res.Window)
				case res.Window >= consumeWindowBound:
					// Every loop handles the 3,000 in well under a second
					// (raw JetStream 70-150 ms): a window this long waited
					// for a timer, not for messages.
					t.Errorf("%d messages in a window of %v, want less than %v (a pull request's expiry is %v: did the loop wait for one?)",
						res.Received, res.Window, consumeWindowBound, natsFetchExpiry)
				}
				if res.CPU <= 0 {
					t.Errorf("no CPU time measured in the window (%v)", res.CPU)
				}
				if d := res.Diagnostics; !sc.Publish && (d.User+d.System <= 0 || d.AllocBytes == 0 || d.Goroutines == 0) {
					t.Errorf("diagnostics of a window that decoded %d messages: %+v", res.Received, d)
				}
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
	p := newPartitionLanes(partitionKey{"t", 0}, 10, window)
	p.next = 16
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

// TestLanesWakeOncePerPoll: what one poll brings a partition is handed
// over in one send, as the framework's workers are woken once per poll (a
// send per record, and the polling goroutine waiting on one partition's
// full window, made the raw and adapter loops cost 28 % more CPU per
// message than the framework in ack each, at half its msg/s). Key lanes
// that fill the window get what the partition's goroutine holds before it
// waits, and it is woken once half the window is finished, not once per
// finished record.
func TestLanesWakeOncePerPoll(t *testing.T) {
	pl, err := NewPayloads(512)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		sc                     Scenario
		window, polls, perPoll int
		holdBytes              int64
	}{
		{"one lane", Scenario{}, 8, 3, 100, HoldBytes},
		{"batches", Scenario{BatchMaxCount: 16}, 8, 3, 100, HoldBytes},
		{"key lanes, window smaller than a poll", Scenario{KeyLanes: 4}, 8, 2, 50, HoldBytes},
		{"key lanes, window larger than a poll", Scenario{KeyLanes: 4}, 1000, 3, 100, HoldBytes},
		// Every poll spends the budget: the polling goroutine waits
		// after each until the partition has handled it.
		{"hold budget spent", Scenario{}, 8, 20, 10, 4 * 512},
		{"hold budget spent, batches", Scenario{BatchMaxCount: 16}, 8, 20, 10, 4 * 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeter(cpuClock{})
			n := tc.polls * tc.perPoll
			m.setTotal(n)
			var marked atomic.Int64
			k := newConsumeLoop(tc.sc, m, func(_ string, _ int32, next int64) { marked.Store(next) })
			k.window, k.hold.limit = tc.window, tc.holdBytes
			done := make(chan struct{})
			go func() {
				defer close(done)
				for poll := range tc.polls {
					for i := range tc.perPoll {
						o := poll*tc.perPoll + i
						k.dispatch(item{"t", 0, int64(o), pl.Keys[o%len(pl.Keys)], pl.Values[o%len(pl.Values)]})
					}
					k.flush()
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the polling goroutine waits for records it has not handed over")
			}
			if err := k.close(); err != nil {
				t.Fatal(err)
			}
			if got := m.received.Load(); got != int64(n) {
				t.Fatalf("%d of %d handled", got, n)
			}
			if got := marked.Load(); got != int64(n) {
				t.Errorf("marked up to %d, want %d", got, n)
			}
			if k.hold.held != 0 {
				t.Errorf("%d value bytes still held once every record was handled, want 0", k.hold.held)
			}
			p := k.parts[partitionKey{"t", 0}]
			if p.handovers != tc.polls {
				t.Errorf("%d hand-overs to the partition for %d polls of %d records, want %d", p.handovers, tc.polls, tc.perPoll, tc.polls)
			}
			if most := n / (tc.window / 2); p.wakes > most {
				t.Errorf("the partition's goroutine was woken %d times for %d records in a window of %d, want at most %d", p.wakes, n, tc.window, most)
			}
		})
	}
}

// TestMeterPollWait: a poll before the first record (waiting for the
// publishers) and the part of a poll after the last message was handled
// are not the broker's pace and do not count; the window starts when the
// first poll with records returned.
func TestMeterPollWait(t *testing.T) {
	m := newMeter(cpuClock{})
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

// groupStartsAtZero: before the first publish, the run commits offset 0
// of every partition for its group, so the group's position is the start
// of the topic whatever the consumer's reset policy.
func groupStartsAtZero(t *testing.T, k *Kafka) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic, group = "start-at-zero", "start-at-zero-group"
	if _, err := k.admin.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := k.startAtZero(ctx, group, topic, 3); err != nil {
		t.Fatal(err)
	}
	offsets, err := k.admin.FetchOffsets(ctx, group)
	if err == nil {
		err = offsets.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		if o, ok := offsets.Lookup(topic, p); !ok || o.At != 0 {
			t.Errorf("partition %d: committed %+v (%v), want 0", p, o, ok)
		}
	}
}

// TestPublishBound: a consuming round whose window ended within the slack
// of the publishers' stop is publish-bound.
func TestPublishBound(t *testing.T) {
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {PublishBoundSlack - time.Millisecond, true}, {PublishBoundSlack, false}, {5 * time.Second, false}, {-time.Second, true}} {
		if got := (Result{AfterPublish: c.after}).PublishBound(); got != c.want {
			t.Errorf("%v after the publishers' stop: publish-bound %v, want %v", c.after, got, c.want)
		}
	}
}

// TestChildAddrs: --serve-listen names both listeners or none.
func TestChildAddrs(t *testing.T) {
	if addr, admin, err := childAddrs("127.0.0.1:41000,127.0.0.1:41001"); err != nil || addr != "127.0.0.1:41000" || admin != "127.0.0.1:41001" {
		t.Errorf("childAddrs = %q, %q, %v", addr, admin, err)
	}
	for _, bad := range []string{"127.0.0.1:41000", "127.0.0.1:41000,", ",127.0.0.1:41001"} {
		if _, _, err := childAddrs(bad); err == nil {
			t.Errorf("childAddrs(%q) accepted", bad)
		}
	}
	if addr, admin, err := childAddrs(""); err != nil || addr == "" || addr == admin {
		t.Errorf("free ports: %q, %q, %v", addr, admin, err)
	}
}
