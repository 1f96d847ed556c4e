package stream_test

import (
	"strconv"
	"testing"

	"github.com/sushka-io/sushka/stream/internal/deliverycost"
	"github.com/sushka-io/sushka/stream/memory"
)

// runDeliveries publishes n records before the measured region (as the
// seed's method fills the queue first), then runs the scenario's App over
// them and returns the allocations of the App's part: start, n deliveries,
// shutdown.
func runDeliveries(t testing.TB, sc deliverycost.Scenario, n int) float64 {
	store := memory.New()
	if err := deliverycost.Fill(store, n); err != nil {
		t.Fatal(err)
	}
	// AllocsPerRun calls f once more as a warm-up: each call consumes the
	// prefilled topic from the start in a group of its own.
	groups := 0
	return testing.AllocsPerRun(1, func() {
		groups++
		if err := deliverycost.Deliver(store, sc, n, "g"+strconv.Itoa(groups)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDeliveryAllocations is the gate on allocations: per delivery, the
// difference between runs of 2,000 and 1,000 deliveries divided by 1,000
// (start-up and shutdown cancel out) must not exceed the scenario's
// declared floor, and a cold start (New, Run, one delivery, shutdown) must
// not exceed its declared cold floor. The scenarios and their floors are
// deliverycost.Scenarios, the table costbench measures too.
func TestDeliveryAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	for _, sc := range deliverycost.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			// The first run warms what is lazily initialised once per
			// process (the runtime's and the codec's caches).
			runDeliveries(t, sc, 100)
			short := runDeliveries(t, sc, 1000)
			long := runDeliveries(t, sc, 2000)
			perMessage := (long - short) / 1000
			cold := runDeliveries(t, sc, 1)
			t.Logf("%.3f allocations per delivery (1000: %.0f, 2000: %.0f), floor %.2f %s; cold start with one delivery: %.0f, floor %.0f",
				perMessage, short, long, sc.Floor, sc.Note, cold, sc.ColdFloor)
			// A hundredth of an allocation per message of slack: a
			// goroutine's sudog or a grown stack record may land in either
			// run; a real allocation on the path is 1.0.
			if perMessage > sc.Floor+0.01 {
				t.Errorf("%.3f allocations per delivery, above the declared floor %.2f", perMessage, sc.Floor)
			}
			if cold > sc.ColdFloor {
				t.Errorf("cold start: %.0f allocations, above the declared cold floor %.0f", cold, sc.ColdFloor)
			}
		})
	}
}
