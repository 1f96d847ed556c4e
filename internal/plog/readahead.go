package plog

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/sushka-io/sushka/internal/vfs"
)

// recoverReadSize is the read size of the recovery scan: large sequential
// reads run at disk speed. A scan holds at most two blocks of it (the one
// being checksummed and the one being read), whatever the size of its
// batches. A variable so that tests can cut a segment into many blocks.
var recoverReadSize = 16 << 20

// recoveryBufferBytes counts the bytes of recovery read buffers allocated
// and not yet released, recoveryBufferPeak the most it reached (tests: the
// memory of N recoveries on K threads is bounded by K × 2 × the read size).
var recoveryBufferBytes, recoveryBufferPeak atomic.Int64

// scanBuffers are the two read blocks of one recovery thread, reused from
// one segment and one partition to the next. They grow to the read size as
// the segments need it, so opening many small partitions allocates little.
// Owned by one scan at a time (the scanner, and its reader goroutine for the
// block it fills).
type scanBuffers struct {
	blocks [2][]byte
}

// block returns buffer i with at least n bytes.
func (b *scanBuffers) block(i, n int) []byte {
	if cap(b.blocks[i]) < n {
		grown := recoveryBufferBytes.Add(int64(n - cap(b.blocks[i])))
		for peak := recoveryBufferPeak.Load(); grown > peak && !recoveryBufferPeak.CompareAndSwap(peak, grown); {
			peak = recoveryBufferPeak.Load()
		}
		b.blocks[i] = make([]byte, n)
	}
	return b.blocks[i][:n]
}

// release drops the buffers (the thread has nothing more to recover).
func (b *scanBuffers) release() {
	for i := range b.blocks {
		recoveryBufferBytes.Add(-int64(cap(b.blocks[i])))
		b.blocks[i] = nil
	}
}

// readBlock is one block of a segment file: data holds the file's bytes
// from pos.
type readBlock struct {
	pos  int64
	data []byte
	err  error
}

// blockReader hands out the bytes [0, size) of a segment file as
// consecutive blocks of the read size, in order. A file larger than one
// block is read ahead by a goroutine of its own: it reads block n+1 into
// the second buffer while the scan checksums block n, so the disk is never
// idle while the CPU works. The two buffers go round between them: the scan
// gives a block back when it asks for the next one.
type blockReader struct {
	file vfs.File
	path string
	size int64
	bufs *scanBuffers

	next   int64  // file position of the next block to hand out
	held   []byte // the block the scan holds (read ahead: give it back on next)
	ahead  bool   // a reader goroutine runs
	filled chan readBlock
	free   chan []byte
	stop   chan struct{}
	done   chan struct{}
}

// start prepares r to read size bytes of file, starting the read-ahead
// goroutine when the file is more than one block.
func (r *blockReader) start(file vfs.File, path string, size int64, bufs *scanBuffers) {
	*r = blockReader{file: file, path: path, size: size, bufs: bufs}
	if size <= int64(recoverReadSize) {
		return
	}
	r.ahead = true
	r.filled = make(chan readBlock, 1)
	r.free = make(chan []byte, 2)
	r.stop = make(chan struct{})
	r.done = make(chan struct{})
	r.free <- bufs.block(0, recoverReadSize)
	r.free <- bufs.block(1, recoverReadSize)
	go r.readAhead()
}

// readAhead reads every block in order into whichever buffer is free and
// hands it over, until the end, an error or stop.
func (r *blockReader) readAhead() {
	defer close(r.done)
	for pos := int64(0); pos < r.size; {
		var buf []byte
		select {
		case buf = <-r.free:
		case <-r.stop:
			return
		}
		b := r.read(buf, pos)
		select {
		case r.filled <- b:
		case <-r.stop:
			return
		}
		if b.err != nil {
			return
		}
		pos += int64(len(b.data))
	}
}

// read reads the block at pos into buf.
func (r *blockReader) read(buf []byte, pos int64) readBlock {
	buf = buf[:min(int64(len(buf)), r.size-pos)]
	return readBlock{pos: pos, data: buf, err: readFull(r.file, r.path, buf, pos)}
}

// readFull reads len(buf) bytes of file at pos; a short read is an error.
func readFull(file vfs.File, path string, buf []byte, pos int64) error {
	m, err := file.ReadAt(buf, pos)
	if m < len(buf) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &IOError{Op: fmt.Sprintf("read %s at %d", path, pos), Err: err}
	}
	return nil
}

// nextBlock gives the held block back and returns the next one; io.EOF
// past the end.
func (r *blockReader) nextBlock() (readBlock, error) {
	if r.next >= r.size {
		return readBlock{}, io.EOF
	}
	var b readBlock
	if r.ahead {
		if r.held != nil {
			r.free <- r.held // never blocks: there are two buffers and room for two
			r.held = nil
		}
		b = <-r.filled
	} else {
		b = r.read(r.bufs.block(0, int(r.size-r.next)), r.next)
	}
	if b.err != nil {
		return b, b.err
	}
	r.held = b.data
	r.next += int64(len(b.data))
	return b, nil
}

// close stops the read-ahead goroutine and waits for it, so that nothing
// reads the file or the buffers once close returns.
func (r *blockReader) close() {
	if r.ahead {
		close(r.stop)
		<-r.done
		r.ahead = false
	}
	r.held = nil
}
