package plog

import (
	"errors"
	"sync"
	"testing"

	"github.com/sushka-io/sushka/internal/vfs"
)

// writebackCall is one StartWriteback a writebackFS saw, with the file's
// size (the end of what was written) at the call.
type writebackCall struct {
	name        string
	off, n      int64
	writtenSize int64
}

// writebackFS records every StartWriteback of its files.
type writebackFS struct {
	vfs.FS
	mu    sync.Mutex
	calls []writebackCall
}

type writebackFile struct {
	vfs.File
	fs *writebackFS
}

func (f *writebackFile) StartWriteback(off, n int64) error {
	size, err := f.File.Size()
	if err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.fs.calls = append(f.fs.calls, writebackCall{name: f.Name(), off: off, n: n, writtenSize: size})
	f.fs.mu.Unlock()
	return f.File.StartWriteback(off, n)
}

func (w *writebackFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &writebackFile{File: f, fs: w}, nil
}

func (w *writebackFS) Create(name string) (vfs.File, error) { return w.wrap(w.FS.Create(name)) }
func (w *writebackFS) OpenReadWrite(name string) (vfs.File, error) {
	return w.wrap(w.FS.OpenReadWrite(name))
}

func (w *writebackFS) recorded() []writebackCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]writebackCall(nil), w.calls...)
}

// TestEarlyWritebackRanges: with Config.EarlyWritebackBytes set, the writer
// starts the writeback of what groups with an AckForced append wrote: whole
// pages only, never past what was written, each segment's ranges one after
// another from its start, each at least the setting; groups of acks=1 only,
// and the setting 0, start none.
func TestEarlyWritebackRanges(t *testing.T) {
	const minBytes = 8 << 10
	for _, tc := range []struct {
		name      string
		bytes     int64
		ack       AckPolicy
		wantCalls bool
	}{
		{"acks=all", minBytes, AckForced, true},
		{"acks=1", minBytes, AckWritten, false},
		{"off", 0, AckForced, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &writebackFS{FS: vfs.NewMem()}
			f := newFixture(t, WriteSyscall)
			f.cfg.FS, f.cfg.EarlyWritebackBytes = fs, tc.bytes
			l := f.open(t)
			defer l.Close()
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ { // concurrent appenders: groups of several
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 60; i++ {
						if _, err := l.Append(mkBatch(3, 300+100*g+i, t0.UnixMilli()), tc.ack); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if n := len(l.segments); n < 3 {
				t.Fatalf("%d segments: the test wants rolls", n)
			}
			calls := fs.recorded()
			if !tc.wantCalls {
				if len(calls) > 0 {
					t.Fatalf("%d StartWriteback calls, want none (first %+v)", len(calls), calls[0])
				}
				return
			}
			if len(calls) < 10 {
				t.Fatalf("%d StartWriteback calls for ~%d KiB of acks=all appends", len(calls), 4*60*3*500/1024)
			}
			next := map[string]int64{} // per segment file: where its next range must start
			for i, c := range calls {
				if c.off%writebackPageBytes != 0 || (c.off+c.n)%writebackPageBytes != 0 {
					t.Errorf("call %d %+v: not whole pages", i, c)
				}
				if c.n < minBytes {
					t.Errorf("call %d %+v: fewer than %d bytes", i, c, minBytes)
				}
				if c.off+c.n > c.writtenSize {
					t.Errorf("call %d %+v: past the %d bytes written", i, c, c.writtenSize)
				}
				if c.off != next[c.name] {
					t.Errorf("call %d %+v: starts at %d, the previous range of %s ended at %d", i, c, c.off, c.name, next[c.name])
				}
				next[c.name] = c.off + c.n
			}
			if len(next) < 2 {
				t.Errorf("writeback started in %d segment(s) of %d", len(next), len(l.segments))
			}
		})
	}
}

// TestEarlyWritebackAckWaitsForSync: early writeback is a hint, never the
// durability: with it on (and with every StartWriteback failing), each
// acks=all append is durable when acknowledged, that is in what a power
// loss at that moment keeps, and every acknowledgement cost an fsync.
func TestEarlyWritebackAckWaitsForSync(t *testing.T) {
	for _, failing := range []bool{false, true} {
		name := map[bool]string{false: "writeback", true: "writeback failing"}[failing]
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			var fs vfs.FS = mem
			if failing {
				fs = vfs.NewErrorFS(mem, vfs.OnPath(".log", vfs.OpStartWriteback))
			}
			rec := &writebackFS{FS: fs}
			f := newFixture(t, WriteSyscall)
			f.cfg.FS, f.cfg.EarlyWritebackBytes = rec, writebackPageBytes
			l := f.open(t)
			defer l.Close()
			for i := 0; i < 40; i++ {
				syncs := mem.SyncCount()
				b := mkBatch(4, 2000+i, t0.UnixMilli())
				res, err := l.Append(b, AckForced)
				if err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
				end := res.BaseOffset + 4
				if got := recoveredHighWatermark(t, f.cfg, mem.Crash(nil)); got < end {
					t.Fatalf("append %d acknowledged up to offset %d, a power loss then keeps %d", i, end, got)
				}
				if mem.SyncCount() == syncs {
					t.Fatalf("append %d acknowledged with no fsync", i)
				}
			}
			if len(rec.recorded()) == 0 {
				t.Fatal("no StartWriteback: the test does not test early writeback")
			}
			if err := l.Err(); err != nil && !errors.Is(err, vfs.ErrInjected) {
				t.Fatal(err)
			} else if err != nil {
				t.Fatalf("a failed StartWriteback failed the log: %v", err)
			}
		})
	}
}
