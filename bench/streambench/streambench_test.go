package streambench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sushka-io/sushka/test/testbroker"
)

// TestLoopsDeliverEveryMessage runs every loop of every scenario once
// against an in-process Sushka broker: each must receive every message
// exactly once (the count and the checksum of the decoded IDs), within a
// window that makes sense.
func TestLoopsDeliverEveryMessage(t *testing.T) {
	addr := testbroker.StartInProcess(t)
	k, err := NewKafka("sushka", []string{addr}, "in-process test broker", false)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
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
					Partitions: 3, Publishers: 16}
				res, err := k.RunLoop(ctx, loop, run)
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
