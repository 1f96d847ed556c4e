package plog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestHighWatermarkExcludesUnsyncedBatch: an AckWritten append is
// acknowledged once written, but it becomes visible (high watermark, Read,
// Wait) only once it is durable: while its fsync has not happened, a crash
// would take it away, so no reader may see it.
func TestHighWatermarkExcludesUnsyncedBatch(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		mem := f.fs.(*vfs.MemFS)
		var blocking atomic.Bool
		inSync := make(chan struct{}, 1)
		release := make(chan struct{})
		f.cfg.FS = vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
			if op == vfs.OpSync && blocking.Load() {
				inSync <- struct{}{}
				<-release
			}
			return nil
		}))
		unblock := sync.OnceFunc(func() { blocking.Store(false); close(release) })
		l := f.open(t)
		defer l.Close()
		defer unblock() // before Close, which syncs
		first := mkBatch(2, 10, 0)
		mustAppend(t, l, first, AckForced)
		hw := l.HighWatermark()
		if hw != 2 {
			t.Fatalf("high watermark after a forced append: %d, want 2", hw)
		}

		blocking.Store(true)
		wait := l.Wait()
		res, err := l.Append(mkBatch(3, 10, 0), AckWritten)
		if err != nil || res.BaseOffset != 2 {
			t.Fatalf("written append: base %d, %v", res.BaseOffset, err)
		}
		if got := l.HighWatermark(); got != hw {
			t.Fatalf("high watermark %d covers a batch acknowledged as written, before its fsync", got)
		}
		// The writer may not have reached the fsync yet; once it is in it,
		// the batch is written and not durable.
		select {
		case <-inSync:
		case <-time.After(5 * time.Second):
			t.Fatal("the writer never synced the written batch")
		}
		durable := mem.Crash(nil)
		if got := l.HighWatermark(); got != hw {
			t.Errorf("high watermark %d covers a batch that is written but not synced (durable up to %d)", got, hw)
		}
		if got := recoveredHighWatermark(t, f.cfg, durable); got != hw {
			t.Fatalf("durable state holds offsets up to %d, want %d", got, hw)
		}
		select {
		case <-wait:
			t.Error("Wait fired for a batch that is not durable")
		default:
		}
		r, err := l.Read(2, 1<<20, true)
		if err != nil || len(r.Chunks) != 0 {
			t.Errorf("Read at the acknowledged but unsynced offset: %d chunks, %v; want none and no error", len(r.Chunks), err)
		}
		r.Release()
		if _, err := l.Read(6, 1<<20, true); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Errorf("Read past the written end: %v, want ErrOffsetOutOfRange", err)
		}

		unblock()
		select {
		case <-wait:
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not fire once the batch was synced")
		}
		if got := l.HighWatermark(); got != 5 {
			t.Fatalf("high watermark after the sync: %d, want 5", got)
		}
	})
}

// recoveredHighWatermark opens a copy of cfg's log on fs and returns its
// high watermark.
func recoveredHighWatermark(t *testing.T, cfg Config, fs vfs.FS) int64 {
	t.Helper()
	cfg.FS = fs
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	defer l.Close()
	return l.HighWatermark()
}

var visibleCrashPoints = 150
var debugVisible = false

// TestCrashReadersSeeOnlyDurable: appenders of every ack kind and readers
// run concurrently; at a random sync or write the filesystem crashes
// (keeping a random part of the unsynced writes, in order or out of order). After recovery, every
// batch any reader read before the crash is there byte for byte at its
// offset: a reader never sees what a crash can take away (design D14), so
// an offset is never reused for different records.
func TestCrashReadersSeeOnlyDurable(t *testing.T) {
	points := visibleCrashPoints
	if testing.Short() {
		points = 40
	}
	var checked int
	for i := 0; i < points; i++ {
		seed := uint64(i)
		rng := rand.New(rand.NewPCG(seed, 0x71517))
		wp := WritePath(rng.IntN(2))
		n, ok := crashWithReaders(t, seed, rng, wp)
		if !ok {
			return
		}
		checked += n
	}
	t.Logf("%d crashes, %d batches read before a crash checked after recovery", points, checked)
}

func crashWithReaders(t *testing.T, seed uint64, rng *rand.Rand, wp WritePath) (int, bool) {
	mem := vfs.NewMem()
	crashAt := 2 + rng.IntN(30) // the crash-th sync or write
	crashRng := rand.New(rand.NewPCG(rng.Uint64(), seed))
	outOfOrder := rng.IntN(2) == 0

	// Readers hold seen for reading while they read and record; the crash
	// takes it for writing, so the reads recorded when it is taken are
	// exactly those that completed before the crash.
	var seen sync.RWMutex
	var readMu sync.Mutex      // a leaf under seen
	read := map[int64][]byte{} // (readMu) base offset -> bytes read there
	var crashed *vfs.MemFS     // (seen)
	var ops atomic.Int64
	fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		// Before a sync or a write takes effect, in the writer goroutine
		// (so no store through a mapping races with Crash).
		if op != vfs.OpSync && op != vfs.OpWritev {
			return nil
		}
		if ops.Add(1) == int64(crashAt) {
			seen.Lock()
			crashed = crashMem(mem, crashRng, outOfOrder)
			seen.Unlock()
		}
		return nil
	}))
	cfg := DefaultConfig(fs, "/d/t-0")
	cfg.WritePath, cfg.Logger = wp, quietLogger
	cfg.SegmentBytes = int64(2048 + rng.IntN(32<<10))
	cfg.IndexInterval = 256 + rng.IntN(1024)
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("seed %d: open: %v", seed, err)
	}

	stop := make(chan struct{})
	var readers sync.WaitGroup
	var readErr atomic.Value
	for r := 0; r < 2; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				seen.RLock()
				if crashed != nil {
					seen.RUnlock()
					return
				}
				off, b, err := readOnce(l)
				if b != nil {
					readMu.Lock()
					read[off] = b
					readMu.Unlock()
				}
				seen.RUnlock()
				if err != nil {
					readErr.Store(err)
					return
				}
			}
		}()
	}

	var appenders sync.WaitGroup
	var stamp atomic.Int64
	stamp.Store(1_700_000_000_000)
	for a := 0; a < 3; a++ {
		appendRng := rand.New(rand.NewPCG(rng.Uint64(), uint64(a)))
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			for i := 0; i < 15; i++ {
				b := batch.Build(batch.BuildOptions{Records: 1 + appendRng.IntN(4), ValueSize: crashValueSize(appendRng), ProducerID: -1, BaseTimestamp: stamp.Add(1)})
				if _, err := l.Append(b, AckPolicy(appendRng.IntN(3))); err != nil {
					readErr.Store(err)
					return
				}
			}
		}()
	}
	appenders.Wait()
	// The last append is forced so that the crash point is reached.
	for ops.Load() < int64(crashAt) {
		if _, err := l.Append(batch.Build(batch.BuildOptions{Records: 1, ProducerID: -1, BaseTimestamp: stamp.Add(1)}), AckForced); err != nil {
			t.Fatalf("seed %d: append: %v", seed, err)
		}
	}
	close(stop)
	readers.Wait()
	l.Close()
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}

	seen.Lock()
	defer seen.Unlock()
	cfg.FS = crashed
	if debugVisible {
		names, _ := crashed.List(cfg.Dir)
		for _, n := range names {
			fi, _ := crashed.Stat(cfg.Dir + "/" + n)
			t.Logf("seed %d after crash: %s %d bytes", seed, n, fi.Size())
		}
	}
	l, err = Open(cfg)
	if err != nil {
		t.Errorf("seed %d (%v): recovery failed: %v", seed, wp, err)
		return 0, false
	}
	defer l.Close()
	after := map[int64][]byte{}
	for _, b := range readAll(t, l, l.LogStartOffset()) {
		h, _ := batch.ParseHeader(b)
		after[h.BaseOffset] = b
	}
	for off, b := range read {
		if !bytes.Equal(after[off], b) {
			t.Errorf("seed %d (%v, crash at op %d): the batch a reader read at offset %d is not there after the crash (hw %d)",
				seed, wp, crashAt, off, l.HighWatermark())
			return 0, false
		}
	}
	return len(read), true
}

// readOnce reads one batch at a random offset below the high watermark and
// returns its base offset and bytes (nil when there is none yet).
func readOnce(l *Log) (int64, []byte, error) {
	start, hw := l.LogStartOffset(), l.HighWatermark()
	if hw == start {
		return 0, nil, nil
	}
	res, err := l.Read(start+rand.Int64N(hw-start), 1, true)
	if err != nil {
		return 0, nil, err
	}
	defer res.Release()
	if len(res.Chunks) == 0 {
		return 0, nil, nil
	}
	c := res.Chunks[0]
	buf := make([]byte, c.Len)
	if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
		return 0, nil, err
	}
	h, err := batch.Validate(buf)
	if err != nil {
		return 0, nil, err
	}
	return h.BaseOffset, buf, nil
}

// TestRecoveryMakesTailDurable: after a process crash (not a power loss)
// the page cache still holds written but unsynced batches; recovery reads
// them and publishes them, so it must make them durable first.
func TestRecoveryMakesTailDurable(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		mem := f.fs.(*vfs.MemFS)
		var failSync atomic.Bool
		cfg := f.cfg
		cfg.FS = vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
			if op == vfs.OpSync && failSync.Load() {
				return vfs.ErrInjected
			}
			return nil
		}))
		crashed, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, crashed, mkBatch(2, 10, 0), AckForced)
		failSync.Store(true)
		// Written and acknowledged; the fsync after it fails, so it stays
		// in the page cache only.
		if _, err := crashed.Append(mkBatch(3, 10, 0), AckWritten); err != nil {
			t.Fatalf("written append: %v", err)
		}
		if crashed.HighWatermark() != 2 {
			t.Fatalf("high watermark %d after a failed fsync, want 2", crashed.HighWatermark())
		}

		// The process dies (a failed log closes without syncing) and
		// restarts on the same page cache.
		crashed.Close()
		l := f.open(t)
		defer l.Close()
		hw := l.HighWatermark()
		if hw != 5 {
			t.Fatalf("recovered high watermark %d, want 5 (the written batch is in the page cache)", hw)
		}
		if got := recoveredHighWatermark(t, f.cfg, mem.Crash(nil)); got != hw {
			t.Fatalf("recovery published offsets up to %d, a power loss then keeps only %d", hw, got)
		}
	})
}
