package plog

import (
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestAppendTiming: an acknowledged append says where its time went
// (AppendResult.Timing, the broker's produce histograms): an fdatasync that
// takes syncDelay shows in an AckForced append's sync step, and an
// AckWritten append has only its queue step (taken from a clock read the
// writer makes anyway).
func TestAppendTiming(t *testing.T) {
	const syncDelay = 5 * time.Millisecond
	f := newFixture(t, WriteSyscall)
	f.cfg.Clock = clock.Real{} // the steps are timed on Config.Clock
	f.cfg.FS = vfs.NewErrorFS(f.fs, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			time.Sleep(syncDelay)
		}
		return nil
	}))
	l := f.open(t)
	defer l.Close()

	before := time.Now()
	res := appendOK(t, l, mkBatch(3, 100, 0), AckForced)
	took := time.Since(before)
	queue, write, syncWait, sync := res.Timing.Steps(before)
	if sync < syncDelay || sync > took {
		t.Errorf("AckForced sync %v: want at least the injected %v and at most the append's %v", sync, syncDelay, took)
	}
	if queue < 0 || write <= 0 || syncWait < 0 {
		t.Errorf("AckForced steps queue %v, write %v, sync wait %v: want >= 0, > 0, >= 0", queue, write, syncWait)
	}
	if sum := queue + write + syncWait + sync; sum > took {
		t.Errorf("steps add up to %v, more than the append's %v", sum, took)
	}

	before = time.Now()
	res = appendOK(t, l, mkBatch(1, 100, 0), AckWritten)
	queue, write, syncWait, sync = res.Timing.Steps(before)
	if res.Timing.Grouped.IsZero() || queue < 0 || write != 0 || syncWait != 0 || sync != 0 {
		t.Errorf("AckWritten timing %+v (queue %v): want a queue step only, no clock read of its own", res.Timing, queue)
	}
}

// TestWakerSignalTime: a Waker remembers when the first signal it has not
// handed out arrived, once.
func TestWakerSignalTime(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	defer l.Close()
	w := NewWaker()
	l.AddWaker(w)
	defer l.RemoveWaker(w)
	if at := w.SignalTime(); !at.IsZero() {
		t.Fatalf("SignalTime before any signal: %v, want zero", at)
	}
	mustAppend(t, l, mkBatch(1, 10, 0), AckForced)
	<-w.C
	at := w.SignalTime()
	if !at.Equal(t0) { // the fixture's manual clock
		t.Fatalf("SignalTime %v, want the log clock's %v", at, t0)
	}
	if again := w.SignalTime(); !again.IsZero() {
		t.Fatalf("SignalTime twice: %v, want zero the second time", again)
	}
}

// TestPublisherYieldsOnlyAfterAGroup: the publisher yields before an fsync
// (to let the writer hand over the rest of a group the previous fsync
// released) only when that fsync released several AckForced appends. A
// lone producer, whose every append waits for its own fsync, is never
// made to wait for a yield; concurrent producers still are, and share
// fsyncs.
func TestPublisherYieldsOnlyAfterAGroup(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.FS = vfs.NewErrorFS(f.fs, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			time.Sleep(time.Millisecond) // groups form while a sync runs
		}
		return nil
	}))
	l := f.open(t)
	defer l.Close()
	for i := 0; i < 50; i++ {
		appendOK(t, l, mkBatch(1, 100, 0), AckForced)
	}
	if n := l.w.pub.yields.Load(); n != 0 {
		t.Fatalf("one producer, 50 sequential AckForced appends: the publisher yielded %d times, want 0", n)
	}

	const producers, each = 16, 20
	syncsBefore := l.Syncs()
	done := make(chan struct{})
	for p := 0; p < producers; p++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < each; i++ {
				appendOK(t, l, mkBatch(1, 100, 0), AckForced)
			}
		}()
	}
	for p := 0; p < producers; p++ {
		<-done
	}
	if n := l.w.pub.yields.Load(); n == 0 {
		t.Errorf("%d concurrent producers: the publisher never yielded for a group", producers)
	}
	if syncs := l.Syncs() - syncsBefore; syncs >= producers*each {
		t.Errorf("%d concurrent AckForced appends took %d fsyncs: no group commit", producers*each, syncs)
	}
}
