package plog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog/batch"
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
	if hw := l.HighWatermark(); hw != 1 {
		t.Fatalf("high watermark %d after a failed fsync, want 1: nothing is published after it", hw)
	}
}

// TestDiskFullCrashes: seeded runs of appends of every ack kind while the
// disk fills up and frees again (ENOSPC on writes and segment creation) and
// the clock moves, then a crash (in order or out of order). The partition
// always resumes once space is back, and after the crash every batch
// acknowledged with AckForced is there byte for byte at its offset, every
// batch recovered was appended, at the offset it was acknowledged with,
// and offsets are contiguous.
func TestDiskFullCrashes(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := uint64(0); seed < uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xd15cf))
		wp := WritePath(rng.IntN(2))
		mem := vfs.NewMem()
		clk := clock.NewManual(t0)
		var full atomic.Bool
		cfg := DefaultConfig(vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
			if full.Load() && (op == vfs.OpWritev || op == vfs.OpCreate) {
				return syscall.ENOSPC
			}
			return nil
		})), "/d/t-0")
		cfg.Clock, cfg.WritePath, cfg.Logger = clk, wp, quietLogger
		cfg.SegmentBytes = int64(1024 + rng.IntN(16<<10))
		cfg.IndexInterval = 256 + rng.IntN(2048)
		l, err := Open(cfg)
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		byKey := map[int64]*appended{}
		var forced []*appended
		stamp := int64(1_700_000_000_000)
		for op, ops := 0, 10+rng.IntN(60); op < ops; op++ {
			if rng.IntN(6) == 0 {
				full.Store(!full.Load())
			}
			clk.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
			stamp++
			b := batch.Build(batch.BuildOptions{Records: 1 + rng.IntN(5), ValueSize: crashValueSize(rng), ProducerID: -1, BaseTimestamp: stamp})
			a := &appended{offset: -1, ack: AckPolicy(1 + rng.IntN(2))}
			byKey[stamp] = a
			res, err := l.Append(b, a.ack)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("seed %d: append: %v", seed, err)
				}
				continue
			}
			a.bytes, a.offset = append([]byte(nil), b...), res.BaseOffset
			if a.ack == AckForced {
				forced = append(forced, a)
			}
		}
		full.Store(false)
		clk.Advance(diskFullRetryMax)
		stamp++
		last := &appended{offset: -1, ack: AckForced}
		byKey[stamp] = last
		b := batch.Build(batch.BuildOptions{Records: 1, ProducerID: -1, BaseTimestamp: stamp})
		res, err := l.Append(b, AckForced)
		if err != nil {
			t.Fatalf("seed %d (%v): the log did not resume once space was back: %v", seed, wp, err)
		}
		last.bytes, last.offset = append([]byte(nil), b...), res.BaseOffset
		forced = append(forced, last)
		outOfOrder := rng.IntN(2) == 0
		crashed := crashMem(mem, rng, outOfOrder)
		l.Close()

		cfg.FS = crashed
		l, err = Open(cfg)
		if err != nil {
			t.Fatalf("seed %d (%v, out of order %v): recovery failed: %v", seed, wp, outOfOrder, err)
		}
		next := l.LogStartOffset()
		readAt := map[int64][]byte{}
		for _, b := range readAll(t, l, next) {
			h, _ := batch.ParseHeader(b)
			a := byKey[contentKey(b)]
			switch {
			case h.BaseOffset != next:
				t.Fatalf("seed %d: batch at offset %d, want %d (gap or overlap)", seed, h.BaseOffset, next)
			case a == nil:
				t.Fatalf("seed %d: recovered a batch never appended at offset %d", seed, h.BaseOffset)
			case a.offset >= 0 && (a.offset != h.BaseOffset || !bytes.Equal(a.bytes, b)):
				t.Fatalf("seed %d: batch acknowledged at %d recovered at %d or changed", seed, a.offset, h.BaseOffset)
			}
			readAt[h.BaseOffset] = b
			next = h.LastOffset() + 1
		}
		for _, a := range forced {
			if !bytes.Equal(readAt[a.offset], a.bytes) {
				t.Fatalf("seed %d (%v, out of order %v): forced batch at offset %d lost", seed, wp, outOfOrder, a.offset)
			}
		}
		l.Close()
	}
}
