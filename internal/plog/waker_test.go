package plog

import (
	"testing"
	"time"
)

func signalled(w *Waker) bool {
	select {
	case <-w.C:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

// TestWakerOneChannelForManyLogs: one Waker registered with several logs is
// signalled by an append to any of them, by none after RemoveWaker, and by
// Close; signals coalesce instead of blocking the writer.
func TestWakerOneChannelForManyLogs(t *testing.T) {
	var logs []*Log
	for i := 0; i < 3; i++ {
		f := newFixture(t, WriteSyscall)
		l := f.open(t)
		logs = append(logs, l)
	}
	w := NewWaker()
	for _, l := range logs {
		l.AddWaker(w)
	}
	if signalled(w) {
		t.Fatal("signalled before any append")
	}
	mustAppend(t, logs[2], mkBatch(1, 1, 0), AckWritten)
	if !signalled(w) {
		t.Fatal("append to the third log did not signal")
	}
	// Many appends while nobody looks: the writer never blocks on C.
	for i := 0; i < 10; i++ {
		mustAppend(t, logs[0], mkBatch(1, 1, 0), AckWritten)
	}
	if !signalled(w) || signalled(w) {
		t.Fatal("ten appends should leave exactly one pending signal")
	}

	logs[1].RemoveWaker(w)
	if n := logs[1].Wakers(); n != 0 {
		t.Fatalf("%d wakers after RemoveWaker", n)
	}
	mustAppend(t, logs[1], mkBatch(1, 1, 0), AckWritten)
	if signalled(w) {
		t.Fatal("signalled by a log it was removed from")
	}
	logs[0].Close()
	if !signalled(w) {
		t.Fatal("Close did not signal")
	}
	logs[1].Close()
	logs[2].Close()
}
