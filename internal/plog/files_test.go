package plog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// countingFS counts the files open through it, and the most at once.
type countingFS struct {
	vfs.FS
	open, peak atomic.Int64
}

type countedFile struct {
	vfs.File
	fs     *countingFS
	closed atomic.Bool
}

func (f *countedFile) Close() error {
	if !f.closed.Swap(true) {
		f.fs.open.Add(-1)
	}
	return f.File.Close()
}

func (c *countingFS) count(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	n := c.open.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return &countedFile{File: f, fs: c}, nil
}

func (c *countingFS) Create(name string) (vfs.File, error) { return c.count(c.FS.Create(name)) }
func (c *countingFS) Open(name string) (vfs.File, error)   { return c.count(c.FS.Open(name)) }
func (c *countingFS) OpenReadWrite(name string) (vfs.File, error) {
	return c.count(c.FS.OpenReadWrite(name))
}

// TestSegmentFilesBounded: a log of many sealed segments under a small
// open-file limit keeps at most the limit open (plus the active segment's),
// through appends, a restart and concurrent reads of every segment, which
// still return exactly the bytes appended.
func TestSegmentFilesBounded(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		const limit, readers = 6, 4
		fs := &countingFS{FS: vfs.NewMem()}
		f := newFixture(t, wp)
		f.cfg.FS = fs
		f.cfg.SegmentBytes = 2048
		f.cfg.FileCache = NewFileCache(limit)
		l := f.open(t)
		want := map[int64][]byte{} // base offset -> the batch as stored
		for i := 0; i < 200; i++ {
			b := mkBatch(2, 100+i%50, t0.UnixMilli()+int64(i))
			res := mustAppend(t, l, b, AckWritten)
			want[res.BaseOffset] = bytes.Clone(b)
		}
		if n := len(l.segments); n < 30 {
			t.Fatalf("%d segments, want many", n)
		}
		if got := fs.open.Load(); got > limit+1 {
			t.Fatalf("%d files open after appending %d segments, limit %d + the active one", got, len(l.segments), limit)
		}
		l.Close()
		if got := fs.open.Load(); got != 0 {
			t.Fatalf("%d files open after Close", got)
		}

		fs.peak.Store(0)
		l = f.open(t) // recovery reads every segment
		defer l.Close()
		if got := fs.peak.Load(); got > limit+1 {
			t.Fatalf("recovery had %d files open at once, limit %d + the active one", got, limit)
		}
		offsets := make([]int64, 0, len(want))
		for off := range want {
			offsets = append(offsets, off)
		}
		var wg sync.WaitGroup
		for r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 7))
				offsets := append([]int64(nil), offsets...)
				for range 3 {
					rng.Shuffle(len(offsets), func(i, j int) { offsets[i], offsets[j] = offsets[j], offsets[i] })
					for _, off := range offsets {
						if !readOne(t, l, off, want[off]) {
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if got := fs.peak.Load(); got > limit+1 {
			t.Fatalf("%d files open at once during %d concurrent readers, limit %d + the active one", got, readers, limit)
		}
		if got := f.cfg.FileCache.Open(); got > limit {
			t.Fatalf("the cache counts %d open sealed files, limit %d", got, limit)
		}
		t.Logf("%d segments, at most %d files open at once", len(l.segments), fs.peak.Load())
	})
}

// readOne reads the batch at off and checks it is want, byte for byte.
func readOne(t *testing.T, l *Log, off int64, want []byte) bool {
	res, err := l.Read(off, int64(len(want)), true)
	if err != nil || len(res.Chunks) != 1 {
		t.Errorf("read %d: %v, %d chunks", off, err, len(res.Chunks))
		return false
	}
	defer res.Release()
	c := res.Chunks[0]
	got := make([]byte, len(want))
	if c.Len < int64(len(want)) {
		t.Errorf("read %d: chunk of %d bytes, want at least %d", off, c.Len, len(want))
		return false
	}
	if _, err := c.File.ReadAt(got, c.Pos); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read %d: %v, bytes differ from the batch appended", off, err)
		return false
	}
	if _, err := batch.Validate(got); err != nil {
		t.Errorf("read %d: %v", off, err)
		return false
	}
	return true
}

// TestPinnedSegmentOutlivesEvictionAndDeletion: a Read's chunks stay
// readable until Release (a sendfile in progress) while the cache closes
// every other idle file and retention deletes the segment; Release then
// closes it.
func TestPinnedSegmentOutlivesEvictionAndDeletion(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	f := newFixture(t, WriteSyscall)
	f.cfg.FS = fs
	f.cfg.SegmentBytes = 1024
	f.cfg.FileCache = NewFileCache(1)
	f.cfg.RetentionTime = -1
	l := f.open(t)
	defer l.Close()
	want := map[int64][]byte{}
	for i := 0; i < 40; i++ {
		b := mkBatch(2, 200, t0.UnixMilli())
		want[mustAppend(t, l, b, AckWritten).BaseOffset] = bytes.Clone(b)
	}
	held, err := l.Read(0, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	for off, b := range want {
		if off != 0 && !readOne(t, l, off, b) {
			t.FailNow()
		}
	}
	cfg := f.cfg
	cfg.RetentionBytes = 0
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() == 0 {
		t.Fatal("retention deleted nothing")
	}
	got := make([]byte, len(want[0]))
	if _, err := held.Chunks[0].File.ReadAt(got, held.Chunks[0].Pos); err != nil || !bytes.Equal(got, want[0]) {
		t.Fatalf("pinned chunk after eviction and deletion: %v, bytes differ", err)
	}
	before := fs.open.Load()
	held.Release()
	if after := fs.open.Load(); after != before-1 {
		t.Fatalf("Release of a deleted segment's last reader: %d files open, want %d", after, before-1)
	}
	if n := f.cfg.FileCache.Open(); n != 0 {
		t.Fatalf("cache counts %d sealed files open, want 0 (all deleted)", n)
	}
}

// TestIdlePartitionsHoldNoFiles: 50 partitions sharing a cache of 8 files
// need at most 8 descriptors once their writers are idle (the active
// segments' files are closed too, and reopened by the next append or
// read), instead of one per partition; every record stays readable and
// appendable.
func TestIdlePartitionsHoldNoFiles(t *testing.T) {
	const partitions, limit = 50, 8
	fs := &countingFS{FS: vfs.NewMem()}
	cache := NewFileCache(limit)
	logs, want := openSharingCache(t, fs, cache, partitions)
	appendTo := func(p int) {
		b := mkBatch(3, 50+p, t0.UnixMilli())
		want[p][mustAppend(t, logs[p], b, AckForced).BaseOffset] = bytes.Clone(b)
	}
	for p := range logs {
		for range 3 {
			appendTo(p)
		}
	}
	// A writer unpins its file once its queue is empty, just after it
	// acknowledged: wait for the last ones.
	deadline := time.Now().Add(5 * time.Second)
	for fs.open.Load() > limit && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := fs.open.Load(); got > limit {
		t.Fatalf("%d files open for %d idle partitions, limit %d", got, partitions, limit)
	}
	for p := range logs {
		appendTo(p) // reopens the active file, read-write
		for off, b := range want[p] {
			if !readOne(t, logs[p], off, b) {
				t.FailNow()
			}
		}
	}
	for fs.open.Load() > limit && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := fs.open.Load(); got > limit {
		t.Fatalf("%d files open for %d idle partitions after reads and appends, limit %d", got, partitions, limit)
	}
	t.Logf("%d partitions, %d files open when idle (peak %d)", partitions, fs.open.Load(), fs.peak.Load())
}

// TestIdleTimeoutRacesReadsAndAppends: with files timing out after a
// millisecond, readers of every batch and appenders to the same partitions
// race the sweep that closes them: every read returns exactly the bytes
// appended (a file is never closed under a pinned reader or writer; -race
// checks the handover), and once idle no file is open and the sweep ends.
func TestIdleTimeoutRacesReadsAndAppends(t *testing.T) {
	const partitions, readers = 8, 4
	fs := &countingFS{FS: vfs.NewMem()}
	cache := NewIdleFileCache(64, time.Millisecond, clock.Real{})
	logs, want := openSharingCache(t, fs, cache, partitions)
	var mu sync.Mutex
	appendTo := func(p, i int) {
		b := mkBatch(2, 40+i%30, t0.UnixMilli())
		off := mustAppend(t, logs[p], b, AckForced).BaseOffset
		mu.Lock()
		want[p][off] = bytes.Clone(b)
		mu.Unlock()
	}
	for p := range logs {
		appendTo(p, 0)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range logs {
		wg.Add(1)
		go func() { // appends, with pauses longer than the idle timeout
			defer wg.Done()
			for i := 1; i < 40; i++ {
				appendTo(p, i)
				time.Sleep(time.Duration(i%3) * time.Millisecond)
			}
		}()
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := rng.IntN(partitions)
				mu.Lock()
				var off int64
				var b []byte
				for off, b = range want[p] {
					break
				}
				mu.Unlock()
				if !readOne(t, logs[p], off, b) {
					return
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for fs.open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := fs.open.Load(); got > 0 {
		t.Fatalf("%d files open once idle past the timeout (the cache counts %d)", got, cache.Open())
	}
	for p := range logs { // reopened on use
		for off, b := range want[p] {
			if !readOne(t, logs[p], off, b) {
				t.FailNow()
			}
		}
	}
	t.Logf("%d partitions, peak %d files open", partitions, fs.peak.Load())
}

// openSharingCache opens n logs of 1 KiB segments in fs sharing cache,
// closed when the test ends, each with an empty map for the batches the
// test appends.
func openSharingCache(t *testing.T, fs vfs.FS, cache *FileCache, n int) ([]*Log, []map[int64][]byte) {
	t.Helper()
	logs, want := make([]*Log, n), make([]map[int64][]byte, n)
	for p := range logs {
		cfg := DefaultConfig(fs, fmt.Sprintf("/data/t-%d", p))
		cfg.Logger, cfg.FileCache, cfg.SegmentBytes = quietLogger, cache, 1024
		l, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		logs[p], want[p] = l, map[int64][]byte{}
	}
	return logs, want
}
