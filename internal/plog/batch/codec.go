package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes is the broker-wide bound on what one batch's
// records may decompress to: anything bigger is refused (KindInvalid) once
// that many bytes came out, so a small hostile batch costs bounded CPU. It is
// 64 times Kafka's default max.message.bytes (1 MiB). Memory is bounded
// separately: streams (gzip, lz4, zstd) are walked through a small buffer
// and never held whole, a snappy block is at most snappyMaxExpansion times
// its compressed size, and at most DecompressSlots batches decompress at
// once.
const MaxDecompressedBytes = 64 << 20

// DecompressBudget is the decompressed-size limit for the batches of a
// topic whose max.message.bytes is maxBatchBytes: 64 times it (records
// compress well, but not without limit), within [1 MiB,
// MaxDecompressedBytes].
func DecompressBudget(maxBatchBytes int) int {
	return min(max(64*maxBatchBytes, 1<<20), MaxDecompressedBytes)
}

// errTooBig is wrapped into the error of a batch over its limit.
var errTooBig = errors.New("decompressed records exceed the limit")

// xerialMagic starts snappy data framed the way the Java client's
// SnappyOutputStream (xerial snappy-java) frames it: the magic, a big-endian
// int32 version and an int32 minimum compatible version (both 1), then
// blocks, each a big-endian int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderSize = 16
	xerialBlockSize  = 32 << 10 // what snappy-java writes
)

// snappyMaxExpansion bounds how much a snappy block can inflate: its
// densest element, a 3-byte copy, yields at most 64 bytes. A block whose
// header claims more is not snappy (S2's repeat codes, which s2.Decode also
// accepts, could claim more) and is refused before anything is allocated.
const snappyMaxExpansion = 22

// zstdMaxWindow bounds the window a zstd frame may ask a decoder to hold:
// RFC 8878 recommends decoders support up to 8 MiB, which covers the
// compression levels clients use.
const zstdMaxWindow = 8 << 20

// streamChunkSize is the buffer through which decompressed streams are
// walked.
const streamChunkSize = 32 << 10

// inflater holds a decoder of each streaming codec (made on first use),
// the chunk buffer for streams and the buffer for snappy blocks. There are
// exactly DecompressSlots of them, kept for the life of the process (a
// sync.Pool would drop a zstd decoder's window at every GC); taking one is
// taking a decompression slot. So what decompression holds is bounded by
// DecompressSlots times (a zstd window of at most zstdMaxWindow, a snappy
// buffer of at most maxPooledBuffer kept, a chunk), and decompressing
// allocates nothing per batch once warm.
type inflater struct {
	src    bytes.Reader
	gzip   gzip.Reader
	lz4    *lz4.Reader
	zstd   *zstd.Decoder
	snappy []byte
	chunk  [streamChunkSize]byte
}

// maxPooledBuffer keeps the occasional huge snappy batch from pinning its
// buffer.
const maxPooledBuffer = 4 << 20

// DecompressSlots is how many batches may be decompressing at once in the
// whole process (validation on append, ListOffsets by timestamp): a burst of
// hostile or merely large compressed batches holds this many decoders and
// buffers, whatever the number of connections. Others wait for a slot;
// decompression is CPU-bound, so more at once would not finish sooner.
var DecompressSlots = max(2, runtime.GOMAXPROCS(0))

// inflaters holds the free inflaters: receiving is acquiring a slot.
var inflaters = func() chan *inflater {
	c := make(chan *inflater, DecompressSlots)
	for range DecompressSlots {
		c <- new(inflater)
	}
	return c
}()

// acquireInflater waits for a decompression slot.
func acquireInflater() *inflater { return <-inflaters }

// open returns a reader of src's decompressed bytes for a streaming codec.
func (f *inflater) open(codec Codec, src []byte) (io.Reader, error) {
	f.src.Reset(src)
	switch codec {
	case CodecGzip:
		if err := f.gzip.Reset(&f.src); err != nil {
			return nil, err
		}
		return &f.gzip, nil
	case CodecLZ4:
		if f.lz4 == nil {
			f.lz4 = lz4.NewReader(nil)
		}
		f.lz4.Reset(&f.src)
		return f.lz4, nil
	case CodecZstd:
		if f.zstd == nil {
			// Concurrency 1: the stream decodes synchronously in the
			// caller's goroutine, so a pooled decoder owns no goroutines.
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(zstdMaxWindow))
			if err != nil {
				panic(err) // only bad options fail, and ours are constant
			}
			f.zstd = d
		}
		if err := f.zstd.Reset(&f.src); err != nil {
			return nil, err
		}
		return f.zstd, nil
	}
	return nil, fmt.Errorf("codec %v is not a stream", codec)
}

// release drops the references to the batch and frees the slot.
func (f *inflater) release() {
	f.src.Reset(nil)
	if f.zstd != nil {
		f.zstd.Reset(nil)
	}
	if cap(f.snappy) > maxPooledBuffer {
		f.snappy = nil
	}
	inflaters <- f
}

// decodeSnappy decodes snappy records (one raw block, or xerial framing)
// into dst[:0], reusing its capacity, refusing more than limit bytes and a
// block that claims more than snappy can expand to.
func decodeSnappy(src, dst []byte, limit int) ([]byte, error) {
	if len(src) >= xerialHeaderSize && bytes.HasPrefix(src, xerialMagic) {
		return decodeXerial(src[xerialHeaderSize:], dst[:0], limit)
	}
	n, err := snappyDecodedLen(src, limit)
	if err != nil {
		return nil, err
	}
	if cap(dst) < n {
		dst = make([]byte, 0, n)
	}
	return s2.Decode(dst[:n], src)
}

// snappyDecodedLen is the length a raw snappy block declares, checked
// against limit and against what snappy can expand src to.
func snappyDecodedLen(src []byte, limit int) (int, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, fmt.Errorf("%w: a snappy block declares %d bytes, %d allowed", errTooBig, n, limit)
	}
	if n > snappyMaxExpansion*len(src)+64 {
		return 0, fmt.Errorf("%w: a snappy block of %d bytes declares %d, more than snappy expands to", errTooBig, len(src), n)
	}
	return n, nil
}

// decodeXerial decodes xerial-framed snappy blocks (after the header). It
// sums the blocks' declared sizes against limit before decoding any.
func decodeXerial(src, dst []byte, limit int) ([]byte, error) {
	total := 0
	for rest := src; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, errors.New("xerial snappy: truncated block length")
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("xerial snappy: block of %d bytes, only %d left", n, len(rest))
		}
		size, err := snappyDecodedLen(rest[:n], limit-total)
		if err != nil {
			return nil, err
		}
		total += size
		rest = rest[n:]
	}
	out := dst
	if cap(out) < total {
		out = make([]byte, 0, total)
	}
	for len(src) > 0 {
		n := binary.BigEndian.Uint32(src)
		block := src[4 : 4+n]
		size, _ := s2.DecodedLen(block) // checked above
		decoded, err := s2.Decode(out[len(out):len(out)+size], block)
		if err != nil {
			return nil, err
		}
		out = out[:len(out)+len(decoded)]
		src = src[4+n:]
	}
	return out, nil
}

// zstdEncoder is Build's: EncodeAll is safe for concurrent use.
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	// franz-go's options: a 64 KiB window keeps what decoders must hold
	// small.
	e, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithZeroFrames(true))
	if err != nil {
		panic(err)
	}
	return e
})

// compress compresses records for Build.
func compress(codec Codec, xerial bool, src []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case CodecNone:
		return src
	case CodecGzip:
		w := gzip.NewWriter(&buf)
		mustWrite(w, src)
	case CodecSnappy:
		if !xerial {
			return s2.EncodeSnappy(nil, src)
		}
		out := append([]byte(nil), xerialMagic...)
		out = binary.BigEndian.AppendUint32(out, 1) // version
		out = binary.BigEndian.AppendUint32(out, 1) // minimum compatible version
		for len(src) > 0 {
			n := min(len(src), xerialBlockSize)
			block := s2.EncodeSnappy(nil, src[:n])
			out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
			out = append(out, block...)
			src = src[n:]
		}
		return out
	case CodecLZ4:
		w := lz4.NewWriter(&buf)
		mustWrite(w, src)
	case CodecZstd:
		return zstdEncoder().EncodeAll(src, nil)
	default:
		panic(fmt.Sprintf("batch.Build: unknown codec %d", codec))
	}
	return buf.Bytes()
}

// mustWrite writes src to a compressing writer into memory and closes it.
// Writing to a bytes.Buffer cannot fail, so neither can it.
func mustWrite(w io.WriteCloser, src []byte) {
	if _, err := w.Write(src); err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
}
