package plog

import (
	"sync/atomic"
	"testing"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// readCountingFS counts the reads of the files it opens and the bytes they
// ask for.
type readCountingFS struct {
	vfs.FS
	reads, bytes *atomic.Int64
}

func (fs readCountingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return readCountingFile{File: f, fs: fs}, nil
}

func (fs readCountingFS) Create(name string) (vfs.File, error) { return fs.wrap(fs.FS.Create(name)) }
func (fs readCountingFS) Open(name string) (vfs.File, error)   { return fs.wrap(fs.FS.Open(name)) }
func (fs readCountingFS) OpenReadWrite(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name))
}

type readCountingFile struct {
	vfs.File
	fs readCountingFS
}

func (f readCountingFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.reads.Add(1)
	f.fs.bytes.Add(int64(len(p)))
	return f.File.ReadAt(p, off)
}

// TestReadFromBoundaryReadsLittle: a Read from a batch's base offset (where
// a consumer's next fetch starts) finds its start in the index without a
// read, and its end with one read of about an index interval (issue 12:
// two reads of 16 KiB per partition per fetch); a Read of everything left
// reads nothing. The chunk is the same either way.
func TestReadFromBoundaryReadsLittle(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	var reads, bytes atomic.Int64
	f.cfg.FS = readCountingFS{FS: f.fs, reads: &reads, bytes: &bytes}
	f.cfg.SegmentBytes, f.cfg.IndexInterval = 1<<20, DefaultIndexInterval
	l := f.open(t)
	defer l.Close()
	const batches = 16
	var bases, positions []int64
	pos := int64(0)
	for i := range batches {
		b := mkBatch(8, 1000, t0.UnixMilli()+int64(i)) // ~8 KiB: an index entry each
		res := mustAppend(t, l, b, AckForced)
		bases, positions = append(bases, res.BaseOffset), append(positions, pos)
		pos += int64(len(b))
	}
	for i, base := range bases {
		reads.Store(0)
		bytes.Store(0)
		res, err := l.Read(base, 3*8200, true)
		if err != nil {
			t.Fatal(err)
		}
		n, asked := reads.Load(), bytes.Load()
		if len(res.Chunks) != 1 || res.Chunks[0].Pos != positions[i] {
			t.Fatalf("read at %d: chunks %+v, want one at %d", base, res.Chunks, positions[i])
		}
		res.Release()
		if n > 1 || asked > firstScanBytes {
			t.Fatalf("read at batch %d (offset %d): %d reads of %d bytes, want at most 1 of %d", i, base, n, asked, DefaultIndexInterval+batch.HeaderSize)
		}
	}
	reads.Store(0)
	res, err := l.Read(bases[0], 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Chunks) != 1 || res.Chunks[0].Len != pos {
		t.Fatalf("read of everything: chunks %+v, want %d bytes", res.Chunks, pos)
	}
	res.Release()
	if n := reads.Load(); n != 0 {
		t.Fatalf("a read of everything from a batch boundary made %d reads, want 0", n)
	}
	// From inside a batch: the walk from the index entry finds it.
	res, err = l.Read(bases[5]+3, 8200, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Chunks) != 1 || res.Chunks[0].Pos != positions[5] {
		t.Fatalf("read inside batch 5: chunks %+v, want one at %d", res.Chunks, positions[5])
	}
	res.Release()
}
