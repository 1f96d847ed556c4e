package plog

import (
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

// writebackCall is one StartWriteback a writebackFS saw, with the file's
// size (the end of what was written) at the call.
type writebackCall struct {
	name        string
	off, n      int64
	writtenSize int64
}

// writebackFS records every StartWriteback of its files; its Syncs take
// syncDelay (a disk), so that appends arrive while one runs.
type writebackFS struct {
	vfs.FS
	syncDelay time.Duration
	mu        sync.Mutex
	calls     []writebackCall
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

func (f *writebackFile) Sync() error {
	time.Sleep(f.fs.syncDelay)
	return f.File.Sync()
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
// starts the writeback of what groups with an AckForced append wrote while
// an fdatasync runs: whole pages only, never past what was written, each
// segment's ranges in order without overlap, each at least the setting.
// Groups of acks=1 only, the setting 0, and groups written while no
// fdatasync runs (each append waited for) start none.
func TestEarlyWritebackRanges(t *testing.T) {
	const minBytes = 2 * writebackPageBytes
	for _, tc := range []struct {
		name      string
		bytes     int64
		ack       AckPolicy
		pipelined bool
		wantCalls bool
	}{
		{"acks=all", minBytes, AckForced, true, true},
		{"acks=all, each append waited for", minBytes, AckForced, false, false},
		{"acks=1", minBytes, AckWritten, true, false},
		{"off", 0, AckForced, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &writebackFS{FS: vfs.NewMem(), syncDelay: 300 * time.Microsecond}
			f := newFixture(t, WriteSyscall)
			f.cfg.FS, f.cfg.EarlyWritebackBytes = fs, tc.bytes
			l := f.open(t)
			defer l.Close()
			if tc.pipelined {
				// Appends keep arriving, each without waiting for the one
				// before: groups are written while an fdatasync runs.
				var pending []Pending
				for i := 0; i < 240; i++ {
					p, err := l.Enqueue(mkBatch(3, 300+i, t0.UnixMilli()), tc.ack)
					if err != nil {
						t.Fatal(err)
					}
					pending = append(pending, p)
					time.Sleep(20 * time.Microsecond)
				}
				for _, p := range pending {
					if _, err := p.Wait(); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				for i := 0; i < 240; i++ {
					mustAppend(t, l, mkBatch(3, 300+i, t0.UnixMilli()), tc.ack)
				}
			}
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
			if len(calls) < 5 {
				t.Fatalf("%d StartWriteback calls for ~%d KiB of acks=all appends", len(calls), 240*3*500/1024)
			}
			next := map[string]int64{} // per segment file: the end of its last range
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
				if c.off < next[c.name] {
					t.Errorf("call %d %+v: overlaps the previous range of %s, which ended at %d", i, c, c.name, next[c.name])
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
// loss at that moment keeps.
func TestEarlyWritebackAckWaitsForSync(t *testing.T) {
	for _, failing := range []bool{false, true} {
		name := map[bool]string{false: "writeback", true: "writeback failing"}[failing]
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			var fs vfs.FS = mem
			if failing {
				fs = vfs.NewErrorFS(mem, vfs.OnPath(".log", vfs.OpStartWriteback))
			}
			rec := &writebackFS{FS: fs, syncDelay: 300 * time.Microsecond}
			f := newFixture(t, WriteSyscall)
			f.cfg.FS, f.cfg.EarlyWritebackBytes = rec, writebackPageBytes
			l := f.open(t)
			defer l.Close()
			// Appends keep arriving without waiting (groups written while
			// an fdatasync runs); each acknowledgement is checked against
			// what a power loss at that moment keeps.
			pending := make(chan Pending, 100)
			go func() {
				defer close(pending)
				for i := 0; i < 100; i++ {
					p, err := l.Enqueue(mkBatch(4, 2000+i, t0.UnixMilli()), AckForced)
					if err != nil {
						t.Errorf("append %d: %v", i, err)
						return
					}
					pending <- p
					time.Sleep(20 * time.Microsecond)
				}
			}()
			for p := range pending {
				res, err := p.Wait()
				if err != nil {
					t.Fatalf("append: %v", err)
				}
				end := res.BaseOffset + 4
				if got := recoveredHighWatermark(t, f.cfg, mem.Crash(nil)); got < end {
					t.Fatalf("acknowledged up to offset %d, a power loss then keeps %d", end, got)
				}
			}
			if len(rec.recorded()) == 0 {
				t.Fatal("no StartWriteback: the test does not test early writeback")
			}
			if err := l.Err(); err != nil {
				t.Fatalf("the log failed (a failed StartWriteback must not fail it): %v", err)
			}
		})
	}
}
