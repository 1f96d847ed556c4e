package server

import (
	"math/bits"
	"sync"
)

// Request frames are read into pooled buffers, so a producer streaming
// megabyte requests does not make the runtime allocate, zero, collect and
// return to the OS a megabyte per request (measured: memclr and madvise were
// ~18% of the broker's CPU under produce load before pooling).
//
// A frame is recycled only when the handler says it no longer references
// it once Handle returns (Request.RecycleFrame): decoded requests alias the
// frame for their byte fields (Produce records, group member metadata), so
// recycling is opt-in per request.

const (
	minFrameClass = 12 // 4 KiB
	maxFrameClass = 26 // 64 MiB; larger frames are allocated and collected
)

var framePools [maxFrameClass + 1]sync.Pool

// frameClass is the power of two a buffer of size bytes is taken from.
func frameClass(size int) int {
	if size <= 1<<minFrameClass {
		return minFrameClass
	}
	return bits.Len(uint(size - 1))
}

// getFrame returns a buffer of exactly size bytes (contents undefined).
func getFrame(size int) []byte {
	c := frameClass(size)
	if c > maxFrameClass {
		return make([]byte, size)
	}
	if p, _ := framePools[c].Get().(*[]byte); p != nil {
		return (*p)[:size]
	}
	return make([]byte, size, 1<<c)
}

// putFrame recycles a buffer from getFrame.
func putFrame(b []byte) {
	c := frameClass(cap(b))
	if c > maxFrameClass || c < minFrameClass || cap(b) != 1<<c {
		return
	}
	b = b[:cap(b)]
	framePools[c].Put(&b)
}
