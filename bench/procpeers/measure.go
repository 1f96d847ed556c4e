package main

import (
	"runtime"
	"runtime/metrics"
)

// liveHeapBytes is the live Go heap plus goroutine stacks after a full
// collection: what a set of processes holds, read from runtime/metrics.
func liveHeapBytes() int64 {
	runtime.GC()
	runtime.GC()
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
	}
	metrics.Read(samples)
	return int64(samples[0].Value.Uint64() + samples[1].Value.Uint64())
}
