package plog

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// readRecord is one ReadAt of a segment file.
type readRecord struct {
	file     string
	pos, len int64
}

// readTrackingFS records the reads of segment files and how many run at
// once, optionally slowing each down so that recoveries overlap in time.
type readTrackingFS struct {
	vfs.FS
	delay time.Duration

	mu                   sync.Mutex
	reads                []readRecord
	inFlight, maxFlight  int
	goroutinesAtReadPeak int
}

func (fs *readTrackingFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &readTrackingFile{File: f, fs: fs}, nil
}

func (fs *readTrackingFS) segmentReads(file string) []readRecord {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []readRecord
	for _, r := range fs.reads {
		if r.file == file {
			out = append(out, r)
		}
	}
	return out
}

// recoveryGoroutines counts the goroutines recovery started: OpenAll's
// threads and their read-aheads, found by who created them (a count of all
// goroutines also counted the file cache's sweep and what earlier tests
// left exiting: TestOpenAllBounded failed in CI at 7).
func recoveryGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/sushka-io/sushka/internal/plog.OpenAll") ||
			strings.Contains(g, "created by github.com/sushka-io/sushka/internal/plog.(*blockReader).start") {
			n++
		}
	}
	return n
}

type readTrackingFile struct {
	vfs.File
	fs *readTrackingFS
}

func (f *readTrackingFile) ReadAt(p []byte, off int64) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	fs.reads = append(fs.reads, readRecord{f.Name(), off, int64(len(p))})
	fs.inFlight++
	fs.maxFlight = max(fs.maxFlight, fs.inFlight)
	fs.goroutinesAtReadPeak = max(fs.goroutinesAtReadPeak, recoveryGoroutines())
	fs.mu.Unlock()
	time.Sleep(fs.delay)
	n, err := f.File.ReadAt(p, off)
	fs.mu.Lock()
	fs.inFlight--
	fs.mu.Unlock()
	return n, err
}

// withReadSize sets recoverReadSize for one test.
func withReadSize(t *testing.T, n int) {
	old := recoverReadSize
	recoverReadSize = n
	t.Cleanup(func() { recoverReadSize = old })
}

// writeBatches appends the batches (n records of size bytes each) with
// acks=all and closes the log; it returns each batch's file position and
// base offset in the last segment.
func writeBatches(t *testing.T, cfg Config, sizes []int) (pos, base []int64) {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range sizes {
		last := l.segments[len(l.segments)-1]
		p := last.size
		res := mustAppend(t, l, mkBatch(2, size, 0), AckForced)
		if l.segments[len(l.segments)-1] != last {
			pos, base = nil, nil // rolled: positions restart in the new segment
			p = 0
		}
		pos, base = append(pos, p), append(base, res.BaseOffset)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return pos, base
}

// TestRecoveryReadsEachBlockOnce: the scan reads a segment in consecutive
// blocks of the read size, each byte once (a batch that spans two blocks
// is checksummed piece by piece, not read again from its start), and holds
// two blocks of memory even for a batch larger than a block. Before the
// read-ahead, a spanning batch was read again from its start and a large
// one grew the buffer to its size.
func TestRecoveryReadsEachBlockOnce(t *testing.T) {
	const block = 4096 + 7 // batches straddle blocks at every offset
	withReadSize(t, block)
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentBytes = 4 << 20
	tfs := &readTrackingFS{FS: f.fs}
	f.cfg.FS = tfs
	sizes := []int{100, 3000, 20000, 50, 7000, 1, 4000, 12000, 300, 2500}
	for range 3 {
		sizes = append(sizes, sizes...)
	}
	_, base := writeBatches(t, f.cfg, sizes)
	name := path.Join(f.cfg.Dir, segmentName(0))
	tfs.mu.Lock()
	tfs.reads = nil
	tfs.mu.Unlock()
	recoveryBufferPeak.Store(recoveryBufferBytes.Load())
	before := recoveryBufferBytes.Load()

	l := f.open(t)
	defer l.Close()
	if want := base[len(base)-1] + 2; l.HighWatermark() != want {
		t.Fatalf("high watermark %d after recovery, want %d", l.HighWatermark(), want)
	}
	if n := len(readAll(t, l, 0)); n != len(sizes) {
		t.Fatalf("%d batches read back, want %d", n, len(sizes))
	}
	size := l.segments[0].size
	reads := tfs.segmentReads(name)
	var at int64
	for i, r := range reads {
		if at >= size {
			break // reads after the scan (readAll above)
		}
		if want := min(int64(block), size-at); r.pos != at || r.len != want {
			t.Fatalf("read %d of the scan at %d (%d bytes), want at %d (%d bytes): each block once, in order\nreads: %v", i, r.pos, r.len, at, want, reads[:i+1])
		}
		at += r.len
	}
	if at != size {
		t.Fatalf("the scan read %d of %d bytes", at, size)
	}
	if peak := recoveryBufferPeak.Load() - before; peak > 2*block {
		t.Fatalf("recovery held %d bytes of read buffers, want at most 2 blocks (%d) with a batch of %d bytes", peak, 2*block, 20000)
	}
}

// TestRecoveryCRCErrorInNextBlock: a batch whose CRC fails in block n+1,
// found while the read-ahead already reads further, ends the scan at that
// batch exactly: past the recovery point its tail is truncated there, below
// it the log refuses to open naming that batch's position. Both for a batch
// inside block n+1 and for one that starts in block n and is corrupt in
// block n+1.
func TestRecoveryCRCErrorInNextBlock(t *testing.T) {
	const block = 8192
	withReadSize(t, block)
	sizes := make([]int, 40)
	for i := range sizes {
		sizes[i] = 900 + 37*i // about a dozen blocks, batches of 1.9–4.7 KiB
	}
	for _, spanning := range []bool{false, true} {
		for _, belowRecoveryPoint := range []bool{false, true} {
			t.Run(fmt.Sprintf("spanning=%v/below-recovery-point=%v", spanning, belowRecoveryPoint), func(t *testing.T) {
				f := newFixture(t, WriteSyscall)
				f.cfg.SegmentBytes = 1 << 20
				tfs := &readTrackingFS{FS: f.fs}
				f.cfg.FS = tfs
				pos, base := writeBatches(t, f.cfg, sizes)
				name := path.Join(f.cfg.Dir, segmentName(0))
				// The victim: the first batch starting in block 3 (or the
				// first that starts in block 2 and ends in block 3).
				victim := -1
				for i := range pos {
					end := pos[i] + int64(len(mkBatch(2, sizes[i], 0)))
					inside := pos[i]/block == 3
					spans := pos[i]/block == 2 && (end-1)/block == 3
					if (spanning && spans) || (!spanning && inside) {
						victim = i
						break
					}
				}
				if victim < 0 {
					t.Fatal("no batch fits the case: change the sizes")
				}
				corruptAt := pos[victim] + int64(len(mkBatch(2, sizes[victim], 0))) - 3 // in its last records: block 3
				if corruptAt/block != 3 {
					t.Fatalf("corruption at %d is not in block 3", corruptAt)
				}
				file, _ := f.fs.OpenReadWrite(name)
				b := []byte{0}
				file.ReadAt(b, corruptAt)
				b[0] ^= 0x55
				file.WriteAt(b, corruptAt)
				file.Close()
				if !belowRecoveryPoint {
					forgetRecoveryPoint(t, f.fs, f.cfg.Dir) // nothing known durable: a crash's tail
				}
				tfs.mu.Lock()
				tfs.reads = nil
				tfs.mu.Unlock()

				l, err := Open(f.cfg)
				if belowRecoveryPoint {
					var ce *CorruptionError
					if !errors.As(err, &ce) || ce.File != name || ce.Pos != pos[victim] || !strings.Contains(ce.Reason, "crc mismatch") {
						t.Fatalf("open over a corrupt batch at %d below the recovery point: %v", pos[victim], err)
					}
				} else {
					if err != nil {
						t.Fatalf("open over a corrupt tail: %v", err)
					}
					defer l.Close()
					if l.HighWatermark() != base[victim] || l.segments[0].size != pos[victim] {
						t.Fatalf("recovered to offset %d, size %d; want the batch before the corrupt one: offset %d, size %d",
							l.HighWatermark(), l.segments[0].size, base[victim], pos[victim])
					}
					if n := len(readAll(t, l, 0)); n != victim {
						t.Fatalf("%d batches after truncation, want %d", n, victim)
					}
				}
				// The scan read block after block up to block 3, never a
				// batch again from its start.
				reads := tfs.segmentReads(name)
				for i := range 4 {
					if i >= len(reads) || reads[i].pos != int64(i)*block || reads[i].len != block {
						t.Fatalf("scan reads %v, want blocks 0..3 of %d bytes first", reads[:min(len(reads), 6)], block)
					}
				}
			})
		}
	}
}

// writePartitions writes n partitions of the sizes' batches under /data,
// two segments each, and returns their configs.
func writePartitions(t *testing.T, fs vfs.FS, n int, sizes []int) []Config {
	t.Helper()
	var cfgs []Config
	for p := range n {
		cfg := DefaultConfig(fs, fmt.Sprintf("/data/topic-%d", p))
		cfg.Logger, cfg.SegmentBytes, cfg.IndexInterval = quietLogger, 1<<20, 512
		writeBatches(t, cfg, sizes)
		cfgs = append(cfgs, cfg)
	}
	return cfgs
}

// TestOpenAllTornTailInOnePartition: partitions recovered in parallel are
// recovered each on its own: the torn tail of one is truncated in that one
// only, the corruption of another fails that one only, and the rest keep
// every batch.
func TestOpenAllTornTailInOnePartition(t *testing.T) {
	withReadSize(t, 4096)
	fs := vfs.NewMem()
	sizes := []int{3000, 500, 9000, 1200, 2500, 700, 4000}
	cfgs := writePartitions(t, fs, 8, sizes)
	want := int64(2 * len(sizes))
	sizeOf := func(p int) int64 {
		st, err := fs.Stat(path.Join(cfgs[p].Dir, segmentName(0)))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	clean := sizeOf(0)
	// Partition 3: half a batch written past the recovery point (a crash).
	torn := mkBatch(2, 3000, 0)
	batch.SetBaseOffset(torn, want)
	file, _ := fs.OpenReadWrite(path.Join(cfgs[3].Dir, segmentName(0)))
	file.WriteAt(torn[:len(torn)/2], clean)
	file.Close()
	// Partition 5: a byte flipped in its first batch (below the recovery point).
	file, _ = fs.OpenReadWrite(path.Join(cfgs[5].Dir, segmentName(0)))
	file.WriteAt([]byte{0xff}, 100)
	file.Close()

	logs, errs := OpenAll(cfgs, 4)
	for p, l := range logs {
		if p == 5 {
			var ce *CorruptionError
			if !errors.As(errs[p], &ce) || ce.Pos != 0 {
				t.Fatalf("partition 5 (corrupt) opened with %v", errs[p])
			}
			continue
		}
		if errs[p] != nil {
			t.Fatalf("partition %d: %v", p, errs[p])
		}
		if l.HighWatermark() != want || sizeOf(p) != clean {
			t.Fatalf("partition %d: high watermark %d, segment %d bytes; want %d, %d bytes", p, l.HighWatermark(), sizeOf(p), want, clean)
		}
		if n := len(readAll(t, l, 0)); n != len(sizes) {
			t.Fatalf("partition %d: %d batches, want %d", p, n, len(sizes))
		}
		l.Close()
	}
}

// TestOpenAllBounded: N partitions on K recovery threads open with at most
// K reads in flight (and more than one: in parallel), at most 2K
// goroutines besides the caller's (a thread and its read-ahead each), and
// at most K × 2 blocks of read buffers, reused from one partition to the
// next.
func TestOpenAllBounded(t *testing.T) {
	const block, threads, partitions = 4096, 3, 24
	withReadSize(t, block)
	tfs := &readTrackingFS{FS: vfs.NewMem()}
	sizes := []int{3000, 500, 9000, 1200, 2500, 700, 4000, 6000}
	cfgs := writePartitions(t, tfs, partitions, sizes)
	// A cache of their own without an idle timeout: the shared cache starts
	// its sweep goroutine when the first opened partition's file goes idle,
	// one goroutine that is not recovery's (it made this test fail at 7).
	files := NewIdleFileCache(DefaultMaxOpenSegmentFiles, 0, clock.Real{})
	for i := range cfgs {
		cfgs[i].FileCache = files
	}
	tfs.mu.Lock()
	tfs.reads, tfs.maxFlight, tfs.goroutinesAtReadPeak = nil, 0, 0
	tfs.delay = 200 * time.Microsecond
	tfs.mu.Unlock()
	recoveryBufferPeak.Store(recoveryBufferBytes.Load())
	before := recoveryBufferBytes.Load()
	goroutines := recoveryGoroutines()

	logs, errs := OpenAll(cfgs, threads)
	for p, l := range logs {
		if errs[p] != nil {
			t.Fatalf("partition %d: %v", p, errs[p])
		}
		defer l.Close()
	}
	tfs.mu.Lock()
	defer tfs.mu.Unlock()
	if tfs.maxFlight > threads || tfs.maxFlight < 2 {
		t.Fatalf("%d reads in flight at most, want 2..%d (parallel, bounded by the threads)", tfs.maxFlight, threads)
	}
	if tfs.goroutinesAtReadPeak < threads {
		t.Fatalf("%d recovery goroutines counted at the read peak, want at least the %d threads (is recoveryGoroutines still finding them?)", tfs.goroutinesAtReadPeak, threads)
	}
	if extra := tfs.goroutinesAtReadPeak - goroutines; extra > 2*threads {
		t.Fatalf("%d goroutines during recovery besides the %d before, want at most %d", extra, goroutines, 2*threads)
	}
	if peak := recoveryBufferPeak.Load() - before; peak > threads*2*block {
		t.Fatalf("recovery held %d bytes of read buffers, want at most %d (%d threads × 2 blocks)", peak, threads*2*block, threads)
	}
	if left := recoveryBufferBytes.Load() - before; left != 0 {
		t.Fatalf("%d bytes of read buffers still counted after OpenAll", left)
	}
}

// TestCleanRestartSyncsNothing: a log that ends at its recovery point (a
// clean stop) opens without an fsync of its segment; one with batches past
// it (an unclean stop: they may be in the page cache only) syncs it before
// they become visible.
func TestCleanRestartSyncsNothing(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	writeBatches(t, f.cfg, []int{100, 200, 300})
	var mu sync.Mutex
	syncs := 0
	f.cfg.FS = vfs.NewErrorFS(f.fs, vfs.InjectorFunc(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, ".log") {
			mu.Lock()
			syncs++
			mu.Unlock()
		}
		return nil
	}))
	for _, clean := range []bool{true, false} {
		if !clean {
			forgetRecoveryPoint(t, f.fs, f.cfg.Dir)
		}
		mu.Lock()
		syncs = 0
		mu.Unlock()
		l := f.open(t)
		mu.Lock()
		got := syncs
		mu.Unlock()
		if want := map[bool]int{true: 0, false: 1}[clean]; got != want || l.HighWatermark() != 6 {
			t.Fatalf("clean=%v: %d segment syncs at open (high watermark %d), want %d", clean, got, l.HighWatermark(), want)
		}
		l.Close()
	}
}
