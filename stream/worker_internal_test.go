package stream

import "testing"

// TestLaneOfIsFixedAndSpreads: a key's lane is the same in every process
// (FNV-1a 32, pinned here by values computed apart), and one-byte keys spread over the
// lanes evenly enough that every lane has work.
func TestLaneOfIsFixedAndSpreads(t *testing.T) {
	for key, want := range map[string]int{"a": 0, "b": 1, "order-17": 2} {
		if got := laneOf([]byte(key), 4); got != want {
			t.Errorf("laneOf(%q, 4) = %d, want %d (FNV-1a 32 mod 4)", key, got, want)
		}
	}
	perLane := make([]int, 4)
	for i := range 256 {
		perLane[laneOf([]byte{byte(i)}, 4)]++
	}
	for lane, n := range perLane {
		if n < 32 || n > 96 {
			t.Fatalf("256 keys over 4 lanes: %v (lane %d)", perLane, lane)
		}
	}
}
