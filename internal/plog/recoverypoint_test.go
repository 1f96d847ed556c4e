package plog

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// readRecoveryPoint returns the checkpointed recovery point of f's log
// ("" if absent).
func readRecoveryPoint(t *testing.T, f *fixture) string {
	t.Helper()
	m := readCheckpointFile(t, f.fs, path.Dir(f.cfg.Dir), recoveryPointsFile)
	v, ok := m[checkpointKey(f.cfg.Dir)]
	if !ok {
		return ""
	}
	return itoa(v)
}

// waitRecoveryPoint waits until the checkpoint says want: a publication
// starts the write once it is due.
func waitRecoveryPoint(t *testing.T, f *fixture, want string, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := readRecoveryPoint(t, f)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery point %q %s, want %s", got, why, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRecoveryPointCheckpoints: the data directory's recovery points follow
// the durable end at most every CheckpointInterval, and at the last Close,
// which also leaves the clean-shutdown marker.
func TestRecoveryPointCheckpoints(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		f.cfg.SegmentBytes = 4096
		l := f.open(t)
		mustAppend(t, l, mkBatch(2, 100, 0), AckForced)
		if got := readRecoveryPoint(t, f); got != "" {
			t.Fatalf("recovery point %q checkpointed before its interval", got)
		}
		f.clock.Advance(CheckpointInterval)
		mustAppend(t, l, mkBatch(2, 100, 0), AckForced)
		waitRecoveryPoint(t, f, "4", "after the interval")
		for len(l.segments) == 1 { // rolls write nothing
			mustAppend(t, l, mkBatch(2, 100, 0), AckForced)
		}
		time.Sleep(10 * time.Millisecond)
		if got := readRecoveryPoint(t, f); got != "4" {
			t.Fatalf("recovery point %q moved within the interval", got)
		}
		hw := l.HighWatermark()
		if _, err := f.fs.Stat(path.Join(path.Dir(f.cfg.Dir), cleanShutdownFile)); err == nil {
			t.Fatal("clean-shutdown marker while the log is open")
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readRecoveryPoint(t, f); got != itoa(hw) {
			t.Fatalf("recovery point %q after Close, want %d", got, hw)
		}
		if _, err := f.fs.Stat(path.Join(path.Dir(f.cfg.Dir), cleanShutdownFile)); err != nil {
			t.Fatalf("no clean-shutdown marker after the last Close: %v", err)
		}
		l = f.open(t)
		defer l.Close()
		if _, err := f.fs.Stat(path.Join(path.Dir(f.cfg.Dir), cleanShutdownFile)); err == nil {
			t.Fatal("clean-shutdown marker still there once a log opened")
		}
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestRecoveryPastRecoveryPoint: after a crash, the pages of the unsynced
// tail may reach the disk out of order, an invalid batch followed by valid
// ones. Past the recovery point that is the tail of a crash: truncated at
// the first invalid batch. Below it every byte was durable: corruption.
func TestRecoveryPastRecoveryPoint(t *testing.T) {
	setup := func(t *testing.T) (*fixture, string, int64) {
		f := newFixture(t, WriteSyscall)
		l := f.open(t)
		for i := 0; i < 5; i++ {
			mustAppend(t, l, mkBatch(3, 50, 0), AckForced)
		}
		l.Close() // recovery point 15
		return f, path.Join(f.cfg.Dir, segmentName(0)), 15
	}
	// appendRaw writes batches as a crash could have left them.
	appendRaw := func(t *testing.T, f *fixture, name string, bufs ...[]byte) {
		file, err := f.fs.OpenReadWrite(name)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		for _, b := range bufs {
			if _, err := file.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("invalid then valid past the recovery point", func(t *testing.T) {
		f, name, rp := setup(t)
		lost := mkBatch(3, 50, 0) // a page that never reached the disk
		batch.SetBaseOffset(lost, rp)
		clear(lost[batch.HeaderSize:])
		kept := mkBatch(3, 50, 0) // a later page that did
		batch.SetBaseOffset(kept, rp+3)
		appendRaw(t, f, name, lost, kept)
		l, err := Open(f.cfg)
		if err != nil {
			t.Fatalf("open over an out-of-order tail: %v", err)
		}
		defer l.Close()
		if l.HighWatermark() != rp {
			t.Fatalf("high watermark %d, want the recovery point %d", l.HighWatermark(), rp)
		}
		if res := mustAppend(t, l, mkBatch(1, 50, 0), AckForced); res.BaseOffset != rp {
			t.Fatalf("append after truncation at %d, want %d", res.BaseOffset, rp)
		}
	})
	t.Run("invalid below the recovery point", func(t *testing.T) {
		f, name, _ := setup(t)
		// Damage the last batch: nothing valid follows it, so without the
		// recovery point it would pass for a torn tail and be dropped,
		// although it was durable.
		file, _ := f.fs.OpenReadWrite(name)
		size, _ := file.Size()
		b := []byte{0}
		file.ReadAt(b, size-20)
		b[0] ^= 0x55
		file.WriteAt(b, size-20)
		file.Close()
		_, err := Open(f.cfg)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != name || !strings.Contains(ce.Reason, "recovery point") {
			t.Fatalf("open over a bad batch below the recovery point: %v", err)
		}
		t.Logf("error: %v", err)
	})
	t.Run("log shorter than its recovery point", func(t *testing.T) {
		f, name, _ := setup(t)
		file, _ := f.fs.OpenReadWrite(name)
		size, _ := file.Size()
		file.Truncate(size - 10)
		file.Close()
		_, err := Open(f.cfg)
		var ce *CorruptionError
		if !errors.As(err, &ce) {
			t.Fatalf("open of a log cut below its recovery point: %v", err)
		}
		t.Logf("error: %v", err)
	})
	t.Run("no recovery point", func(t *testing.T) {
		// A log without a checkpoint (never reached one, or older than
		// it) knows nothing durable: its last segment is recovered
		// leniently, and the checkpoint is written.
		f, name, _ := setup(t)
		forgetRecoveryPoint(t, f.fs, f.cfg.Dir)
		kept := mkBatch(3, 50, 0)
		batch.SetBaseOffset(kept, 18)
		lost := make([]byte, len(kept))
		appendRaw(t, f, name, lost, kept)
		l := f.open(t)
		if l.HighWatermark() != 15 {
			t.Fatalf("high watermark %d, want 15", l.HighWatermark())
		}
		l.Close()
		if got := readRecoveryPoint(t, f); got != "15" {
			t.Fatalf("recovery point %q after recovery, want 15", got)
		}
	})
}
