package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedBytes bounds what one batch's records may decompress to.
// Anything bigger is refused (KindInvalid) before it is fully inflated, so a
// small hostile batch cannot make the broker allocate gigabytes. It is 64
// times Kafka's default max.message.bytes (1 MiB).
const MaxDecompressedBytes = 64 << 20

// errTooBig is wrapped into the error of a batch over MaxDecompressedBytes.
var errTooBig = fmt.Errorf("decompressed records exceed %d bytes", MaxDecompressedBytes)

// xerialMagic starts snappy data framed the way the Java client's
// SnappyOutputStream (xerial snappy-java) frames it: the magic, a big-endian
// int32 version and an int32 minimum compatible version (both 1), then
// blocks, each a big-endian int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderSize = 16
	xerialBlockSize  = 32 << 10 // what snappy-java writes
)

// Decoders are pooled or shared: ListOffsets may decompress many batches.
var (
	gzipReaders = sync.Pool{New: func() any { return new(gzip.Reader) }}
	lz4Readers  = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	// zstdDecoder is shared: DecodeAll is safe for concurrent use. The
	// memory bound makes it refuse frames that declare, or grow to, more
	// than MaxDecompressedBytes.
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxDecompressedBytes),
		)
		if err != nil {
			panic(err) // only bad options fail, and ours are constant
		}
		return d
	})
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		// franz-go's options: a 64 KiB window keeps what decoders
		// must hold small.
		e, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithZeroFrames(true))
		if err != nil {
			panic(err)
		}
		return e
	})
)

// decompress inflates a batch's records, refusing more than limit bytes. It
// appends to dst[:0], reusing its capacity when it can.
func decompress(codec Codec, src, dst []byte, limit int) ([]byte, error) {
	dst = dst[:0]
	switch codec {
	case CodecGzip:
		r := gzipReaders.Get().(*gzip.Reader)
		defer gzipReaders.Put(r)
		if err := r.Reset(bytes.NewReader(src)); err != nil {
			return nil, err
		}
		return readBounded(r, dst, limit)
	case CodecSnappy:
		if len(src) >= xerialHeaderSize && bytes.HasPrefix(src, xerialMagic) {
			return decodeXerial(src[xerialHeaderSize:], dst, limit)
		}
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, err
		}
		if n > limit {
			return nil, errTooBig
		}
		if cap(dst) < n {
			dst = make([]byte, 0, n)
		}
		return s2.Decode(dst[:n], src)
	case CodecLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(r)
		r.Reset(bytes.NewReader(src))
		return readBounded(r, dst, limit)
	case CodecZstd:
		out, err := zstdDecoder().DecodeAll(src, dst)
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || len(out) > limit {
			return nil, errTooBig
		}
		return out, err
	}
	return nil, fmt.Errorf("unknown compression codec %d", int8(codec))
}

// readBounded appends r's bytes to dst, failing once r yields more than
// limit bytes.
func readBounded(r io.Reader, dst []byte, limit int) ([]byte, error) {
	out := bytes.NewBuffer(dst)
	n, err := out.ReadFrom(&io.LimitedReader{R: r, N: int64(limit) + 1})
	if err != nil {
		return nil, err
	}
	if n > int64(limit) {
		return nil, errTooBig
	}
	return out.Bytes(), nil
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
		size, err := s2.DecodedLen(rest[:n])
		if err != nil {
			return nil, err
		}
		if total += size; total > limit {
			return nil, errTooBig
		}
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
