package plog

import (
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

// waitHW waits (real time) until l's high watermark reaches want.
func waitHW(t *testing.T, l *Log, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		wait := l.Wait()
		if l.HighWatermark() >= want {
			return
		}
		select {
		case <-wait:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("high watermark %d, want %d within %v", l.HighWatermark(), want, within)
		}
	}
}

// appendOK appends without waiting for visibility (mustAppend waits).
func appendOK(t *testing.T, l *Log, b []byte, ack AckPolicy) AppendResult {
	t.Helper()
	res, err := l.Append(b, ack)
	if err != nil {
		t.Errorf("append: %v", err)
	}
	return res
}

// TestSyncIntervalPacesWrittenAppends: AckWritten appends alone make the
// publisher fsync at most once per SyncInterval (not back to back, which on
// virtio-blk stalls the whole machine), and each still becomes visible, at
// most about an interval after its write.
func TestSyncIntervalPacesWrittenAppends(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SyncInterval = 20 * time.Millisecond
	l := f.open(t)
	defer l.Close()
	start := time.Now()
	var end int64
	for i := 0; i < 200; i++ {
		res := appendOK(t, l, mkBatch(1, 100, 0), AckWritten)
		end = res.BaseOffset + 1
		time.Sleep(100 * time.Microsecond) // a stream, not one group
	}
	waitHW(t, l, end, 5*time.Second)
	elapsed := time.Since(start)
	// One sync per interval, plus the first one (not paced) and one of slack.
	if max := int64(elapsed/f.cfg.SyncInterval) + 2; l.Syncs() > max {
		t.Fatalf("%d syncs in %v for 200 AckWritten appends: paced at %v, want at most %d",
			l.Syncs(), elapsed, f.cfg.SyncInterval, max)
	}
	if l.Syncs() < 2 {
		t.Fatalf("%d syncs: a stream of %v should take several intervals", l.Syncs(), elapsed)
	}
}

// TestSyncIntervalDoesNotDelayForced: a paced publication waits for no
// interval once an AckForced append is handed over (acks=all keeps its
// adaptive group commit), and its fsync publishes the AckWritten batches
// written before it; until then those stay invisible (design D14).
func TestSyncIntervalDoesNotDelayForced(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SyncInterval = time.Hour
	l := f.open(t)
	defer l.Close()
	mustAppend(t, l, mkBatch(1, 10, 0), AckWritten) // the first sync is not paced
	waitHW(t, l, 1, 5*time.Second)
	appendOK(t, l, mkBatch(2, 10, 0), AckWritten) // paced: an hour
	time.Sleep(20 * time.Millisecond)
	if hw := l.HighWatermark(); hw != 1 {
		t.Fatalf("high watermark %d within the sync interval of an AckWritten append, want 1", hw)
	}
	done := make(chan AppendResult, 1)
	go func() { done <- appendOK(t, l, mkBatch(1, 10, 0), AckForced) }()
	select {
	case res := <-done:
		if res.BaseOffset != 3 {
			t.Fatalf("forced append at %d, want 3", res.BaseOffset)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an AckForced append waited for the sync interval")
	}
	if hw := l.HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d after the forced append, want 4", hw)
	}
}

// TestSyncIntervalClose: Close does not wait for a paced publication; what
// it held is synced and there after reopening.
func TestSyncIntervalClose(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SyncInterval = time.Hour
	l := f.open(t)
	mustAppend(t, l, mkBatch(1, 10, 0), AckWritten)
	waitHW(t, l, 1, 5*time.Second)
	appendOK(t, l, mkBatch(3, 10, 0), AckWritten) // paced
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the sync interval")
	}
	f.cfg.FS = f.fs.(*vfs.MemFS).Crash(nil) // only what was synced survives
	l = f.open(t)
	defer l.Close()
	if hw := l.HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d after Close and a crash, want 4", hw)
	}
}
