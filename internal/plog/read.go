package plog

import (
	"fmt"
	"io"
	"sync"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// scanBufSize is how much a reader reads at once while walking batch
// headers from an index entry, once its first read did not reach the
// batch it looks for.
const scanBufSize = 16 << 10

// firstScanBytes is a walk's first read: one default index interval and a
// header, where the walk from an index entry usually ends (issue 12: a
// fetch's walks read 16 KiB each to find one 61-byte header of its large
// batches, a copy of 32 KiB per partition per fetch next to its sendfile).
const firstScanBytes = DefaultIndexInterval + batch.HeaderSize

var scanBufs = sync.Pool{New: func() any { b := make([]byte, scanBufSize); return &b }}

// headerWalker walks the batch headers of a segment from a position with as
// few reads as possible, never reading at or past end: the bytes past the
// published size are the writer's (being written, or through a mapping).
type headerWalker struct {
	s      *segment
	end    int64 // the published size when the walk started
	buf    []byte
	bufPos int64 // file position of buf[0]
	bufLen int
	bp     *[]byte
}

func newHeaderWalker(s *segment, end int64) headerWalker {
	bp := scanBufs.Get().(*[]byte)
	return headerWalker{s: s, end: end, buf: *bp, bp: bp, bufPos: -1}
}

func (w *headerWalker) close() { scanBufs.Put(w.bp) }

// header returns the header of the batch at pos, which must be below the
// segment's published size.
func (w *headerWalker) header(pos int64) (batch.Header, error) {
	if w.bufPos < 0 || pos < w.bufPos || pos+batch.HeaderSize > w.bufPos+int64(w.bufLen) {
		size := int64(len(w.buf))
		if w.bufPos < 0 {
			size = firstScanBytes
		}
		n, err := w.s.file.ReadAt(w.buf[:min(size, max(w.end-pos, 0))], pos)
		if n < batch.HeaderSize {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return batch.Header{}, &IOError{Op: fmt.Sprintf("read %s at %d", w.s.path, pos), Err: err}
		}
		w.bufPos, w.bufLen = pos, n
	}
	off := pos - w.bufPos
	return batch.ParseHeader(w.buf[off : off+batch.HeaderSize])
}

// readHeader reads the header of the batch at pos, below end.
func readHeader(s *segment, pos, end int64) (batch.Header, error) {
	w := newHeaderWalker(s, end)
	defer w.close()
	return w.header(pos)
}

// findBatch returns the position of the first batch at or after from whose
// last offset is >= offset, or end when there is none.
func findBatch(s *segment, from, end, offset int64) (int64, error) {
	w := newHeaderWalker(s, end)
	defer w.close()
	pos := from
	for pos < end {
		h, err := w.header(pos)
		if err != nil {
			return 0, err
		}
		if h.LastOffset() >= offset {
			return pos, nil
		}
		pos += int64(h.Size())
	}
	return end, nil
}

// lastBoundary returns the largest batch boundary <= limit, walking from the
// boundary from (<= limit) and never past end, and the base offset of the
// batch there (-1 when the boundary is end).
func lastBoundary(s *segment, from, limit, end int64) (pos, offset int64, err error) {
	w := newHeaderWalker(s, end)
	defer w.close()
	pos = from
	for pos < end {
		h, err := w.header(pos)
		if err != nil {
			return 0, -1, err
		}
		next := pos + int64(h.Size())
		if next > limit {
			return pos, h.BaseOffset, nil
		}
		pos = next
	}
	return pos, -1, nil
}
