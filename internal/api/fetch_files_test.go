package api

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// descriptorLimitFS fails opens past limit files open at once with
// EMFILE, as the kernel does past RLIMIT_NOFILE (0: no limit).
type descriptorLimitFS struct {
	vfs.FS
	limit atomic.Int64
	open  atomic.Int64
	peak  atomic.Int64
}

type limitedFile struct {
	vfs.File
	fs   *descriptorLimitFS
	once sync.Once
}

func (f *limitedFile) Close() error {
	f.once.Do(func() { f.fs.open.Add(-1) })
	return f.File.Close()
}

func (d *descriptorLimitFS) wrap(open func(string) (vfs.File, error), name string) (vfs.File, error) {
	n := d.open.Add(1)
	if lim := d.limit.Load(); lim > 0 && n > lim {
		d.open.Add(-1)
		return nil, &pathError{name, syscall.EMFILE}
	}
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	f, err := open(name)
	if err != nil {
		d.open.Add(-1)
		return nil, err
	}
	return &limitedFile{File: f, fs: d}, nil
}

type pathError struct {
	name string
	err  error
}

func (e *pathError) Error() string { return "open " + e.name + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func (d *descriptorLimitFS) Create(name string) (vfs.File, error) { return d.wrap(d.FS.Create, name) }
func (d *descriptorLimitFS) Open(name string) (vfs.File, error)   { return d.wrap(d.FS.Open, name) }
func (d *descriptorLimitFS) OpenReadWrite(name string) (vfs.File, error) {
	return d.wrap(d.FS.OpenReadWrite, name)
}

// TestFullFetchPinsBoundedFiles explains, at the scale of a test, why a
// sessionless full fetch at offset 0 over 100,000 partitions answered
// records for 19,980 of them (docs/benchmarks.md): each partition answered
// with records pinned its segment file open until the response was
// written, and the process's descriptor limit (ulimit -n 20,000 on that
// machine, less the ~20 the broker holds otherwise) made every later open
// fail, answered KAFKA_STORAGE_ERROR. Not the response's MaxBytes: 100,000
// one-record batches of ~70 B are 7 MB of a 64 MiB MaxBytes, and Kafka
// (KIP-74: partitions in order, each up to its max bytes, the first batch
// always) would answer every one. Here: 60 partitions with a record each,
// at most 20 files may be open, a file cache of 4. Before the fix ~20
// partitions came back with records, the rest with KAFKA_STORAGE_ERROR;
// now the response pins at most the cache's 4 files and carries the others'
// records read into memory: all 60.
func TestFullFetchPinsBoundedFiles(t *testing.T) {
	const partitions, fdLimit, cacheLimit = 60, 20, 4
	lfs := &descriptorLimitFS{FS: vfs.NewMem()}
	tb := startTestBroker(t, Config{FS: lfs, FileCache: plog.NewIdleFileCache(cacheLimit, 0, clock.Real{})})
	tp := tb.createTopic(t, "t", partitions)
	offsets := map[int32]int64{}
	for p := range int32(partitions) {
		appendVisible(t, tp.parts[p])
		offsets[p] = 0
	}
	time.Sleep(1500 * time.Millisecond) // the writers stop (1 s idle): their active files are the cache's
	lfs.limit.Store(fdLimit)
	lfs.peak.Store(lfs.open.Load())
	c := dialRaw(t, tb.addr)
	resp := fetchRaw(t, c, sessionReq{topic: tp, offsets: offsets, epoch: -1})
	withRecords, failed := 0, 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.RecordBatches) > 0 {
				withRecords++
			}
			if rp.ErrorCode != 0 {
				failed++
			}
		}
	}
	t.Logf("%d partitions: %d answered with records, %d with an error; at most %d files open during the fetch", partitions, withRecords, failed, lfs.peak.Load())
	if withRecords != partitions || failed != 0 {
		t.Fatalf("%d of %d partitions answered with records, %d with an error (a descriptor limit of %d)", withRecords, partitions, failed, fdLimit)
	}
}
