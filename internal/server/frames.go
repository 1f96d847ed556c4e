package server

import (
	"errors"
	"io"
	"math/bits"
	"sync"
)

// Request frames are read into pooled buffers, so a producer streaming
// megabyte requests does not make the runtime allocate, zero, collect and
// return to the OS a megabyte per request (measured: memclr and madvise were
// ~18% of the broker's CPU under produce load before pooling).
//
// A frame is recycled only when the handler says it no longer references
// it once Handle returns (Request.RecycleFrame): decoded requests alias the
// frame for their byte fields (Produce records, group member metadata), so
// recycling is opt-in per request.

const (
	minFrameClass = 12 // 4 KiB
	maxFrameClass = 26 // 64 MiB; larger frames are allocated and collected
)

var framePools [maxFrameClass + 1]sync.Pool

// frameClass is the power of two a buffer of size bytes is taken from.
func frameClass(size int) int {
	if size <= 1<<minFrameClass {
		return minFrameClass
	}
	return bits.Len(uint(size - 1))
}

// getFrame returns a buffer of exactly size bytes (contents undefined).
func getFrame(size int) []byte {
	if b := pooledFrame(size); b != nil {
		return b
	}
	c := frameClass(size)
	if c > maxFrameClass {
		return make([]byte, size)
	}
	return make([]byte, size, 1<<c)
}

// putFrame recycles a buffer from getFrame.
func putFrame(b []byte) {
	c := frameClass(cap(b))
	if c > maxFrameClass || c < minFrameClass || cap(b) != 1<<c {
		return
	}
	b = b[:cap(b)]
	framePools[c].Put(&b)
}

// firstChunkBytes is how much of a frame is allocated before its bytes
// arrive when no pooled buffer of its size is free; the buffer then doubles
// as bytes arrive. A declared size that never arrives costs at most this.
const firstChunkBytes = 64 << 10

// readFrame reads a frame body of size bytes from r. A free pooled buffer of
// the frame's class is used at once (it costs no new memory: the common
// case of a connection streaming requests of similar sizes); otherwise the
// buffer starts at firstChunkBytes and doubles as bytes arrive, so a
// client announcing a large frame and sending nothing holds no more than
// that. On error the buffer is recycled and nil returned.
func readFrame(r io.Reader, size int) ([]byte, error) {
	buf := pooledFrame(size)
	if buf == nil {
		buf = getFrame(min(size, firstChunkBytes))
	}
	n := 0
	for n < size {
		if n == len(buf) {
			if c := min(cap(buf), size); c > len(buf) {
				buf = buf[:c]
			} else {
				grown := getFrame(min(size, 2*cap(buf)))
				copy(grown, buf[:n])
				putFrame(buf)
				buf = grown
			}
		}
		m, err := r.Read(buf[n:])
		n += m
		if err != nil && n < size {
			putFrame(buf)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// pooledFrame returns a pooled buffer of exactly size bytes, or nil if the
// pool of its class is empty.
func pooledFrame(size int) []byte {
	c := frameClass(size)
	if c > maxFrameClass {
		return nil
	}
	if p, _ := framePools[c].Get().(*[]byte); p != nil {
		return (*p)[:size]
	}
	return nil
}
