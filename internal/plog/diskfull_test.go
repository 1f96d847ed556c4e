package plog

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

// TestDiskFullResumes: a write that fails with ENOSPC fails its group and,
// for a while, the appends after it (KAFKA_STORAGE_ERROR, which clients
// retry); once space is back, the partition recovers from what is on disk
// and appends resume, at the offsets of the group that was never
// acknowledged. Nothing acknowledged is lost and nothing unacknowledged
// becomes visible by mistake.
func TestDiskFullResumes(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		mem := f.fs.(*vfs.MemFS)
		var full atomic.Bool
		f.cfg.FS = vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
			// Writes and new segments need space; a shrinking Truncate
			// (sealing an mmap segment) does not.
			if full.Load() && (op == vfs.OpWritev || op == vfs.OpCreate) {
				return syscall.ENOSPC
			}
			return nil
		}))
		if wp == WriteMmap {
			f.cfg.SegmentBytes = 4096 // stores need no space; the next segment does
		}
		l := f.open(t)
		defer l.Close()
		a := mustAppend(t, l, mkBatch(2, 100, 0), AckForced)
		written := mustAppend(t, l, mkBatch(2, 100, 0), AckWritten)
		full.Store(true)
		var err error
		for i := 0; i < 100 && err == nil; i++ { // mmap: until a roll
			_, err = l.Append(mkBatch(2, 1000, 0), AckWritten)
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk: %v, want ENOSPC", err)
		}
		hw := l.HighWatermark()
		held, err := l.Read(0, 1<<20, true) // a fetch in flight across the resume
		if err != nil || len(held.Chunks) == 0 {
			t.Fatalf("read before resuming: %v", err)
		}
		full.Store(false)
		if _, err := l.Append(mkBatch(1, 10, 0), AckForced); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append right after the failure: %v, want the error until the retry is due", err)
		}
		f.clock.Advance(diskFullRetryMin)
		res, err := l.Append(mkBatch(1, 10, 0), AckForced)
		if err != nil {
			t.Fatalf("append once space is back: %v", err)
		}
		if res.BaseOffset != hw {
			t.Fatalf("resumed at offset %d, want %d (the high watermark before the failure)", res.BaseOffset, hw)
		}
		if a.BaseOffset != 0 || written.BaseOffset != 2 || hw < 4 {
			t.Fatalf("offsets before the failure: %d, %d, high watermark %d", a.BaseOffset, written.BaseOffset, hw)
		}
		c := held.Chunks[0]
		if _, err := c.File.ReadAt(make([]byte, c.Len), c.Pos); err != nil {
			t.Fatalf("a read held across the resume: %v", err)
		}
		held.Release()
		got := readAll(t, l, 0)
		if last := got[len(got)-1]; lastOffset(last) != hw {
			t.Fatalf("after resuming, the log ends at %d, want %d", lastOffset(last), hw)
		}
		if got := recoveredHighWatermark(t, f.cfg, mem.Crash(nil)); got != hw+1 {
			t.Fatalf("durable after resuming: up to %d, want %d", got, hw+1)
		}
	})
}

// TestFailedSyncNeverResumes: an fsync failure is sticky for good, even
// with ENOSPC: its pages may have been dropped, and a later fsync would
// report success for data that is not on disk.
func TestFailedSyncNeverResumes(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	var failing atomic.Bool
	f.cfg.FS = vfs.NewErrorFS(f.fs, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		if failing.Load() && op == vfs.OpSync {
			return syscall.ENOSPC
		}
		return nil
	}))
	l := f.open(t)
	defer l.Close()
	mustAppend(t, l, mkBatch(1, 10, 0), AckForced)
	failing.Store(true)
	if _, err := l.Append(mkBatch(1, 10, 0), AckForced); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	failing.Store(false)
	f.clock.Advance(time.Hour)
	if _, err := l.Append(mkBatch(1, 10, 0), AckForced); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append after a failed fsync, an hour later: %v, want the sticky error", err)
	}
}
