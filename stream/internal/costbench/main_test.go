package main

import "testing"

// TestScenariosDeliver runs every scenario without valgrind: each must
// deliver all its records and stop, or the measurement would hang.
func TestScenariosDeliver(t *testing.T) {
	for _, sc := range scenarios {
		deliver(sc, 10, false)
		if allocs := deliver(sc, 300, false); allocs == 0 {
			t.Fatalf("%s: no allocations counted at all: the counter is not measuring", sc.name)
		}
	}
}
