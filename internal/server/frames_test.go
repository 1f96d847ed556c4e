package server

import "testing"

func TestFramePool(t *testing.T) {
	for _, size := range []int{0, 1, 4095, 4096, 4097, 1 << 20, 1<<20 + 1, 1 << 26, 1<<26 + 1} {
		b := getFrame(size)
		if len(b) != size {
			t.Fatalf("getFrame(%d) has length %d", size, len(b))
		}
		if size <= 1<<26 && cap(b) != 1<<frameClass(size) {
			t.Fatalf("getFrame(%d) has capacity %d, want its class %d", size, cap(b), 1<<frameClass(size))
		}
		putFrame(b)
	}
	// A recycled buffer is handed out again for the same class.
	b := getFrame(100_000)
	b[0] = 42
	putFrame(b)
	allocs := testing.AllocsPerRun(100, func() { putFrame(getFrame(100_000)) })
	if allocs > 1 {
		t.Fatalf("get/put of a pooled frame allocates %.1f objects", allocs)
	}
}
