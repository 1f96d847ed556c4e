package stream_test

import (
	"testing"

	"github.com/sushka-io/sushka/stream/memory"
	"github.com/sushka-io/sushka/stream/streamtest"
)

func memoryTransport() *memory.Transport { return memory.New() }

// memoryOnly skips a test that inspects the memory transport (committed
// offsets, paused partitions, injected publish failures) when
// STREAMTEST_REAL=1 runs the others against an in-process Sushka.
func memoryOnly(t *testing.T) {
	t.Helper()
	if streamtest.RealFromEnv() {
		t.Skip("inspects the memory transport")
	}
}
