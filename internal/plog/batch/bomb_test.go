package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// bigRecordBatch returns a batch of codec holding one well-formed record
// whose value is valueSize zero bytes, compressed as a stream so that the
// test never holds the records whole: a decompression bomb when valueSize
// is beyond the limit, a large legitimate batch within it.
func bigRecordBatch(t testing.TB, codec Codec, valueSize int) []byte {
	t.Helper()
	var body []byte
	body = append(body, 0)                             // attributes
	body = binary.AppendVarint(body, 0)                // timestampDelta
	body = binary.AppendVarint(body, 0)                // offsetDelta
	body = binary.AppendVarint(body, -1)               // null key
	body = binary.AppendVarint(body, int64(valueSize)) // value length
	length := len(body) + valueSize + 1                // + the header count
	var compressed bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case CodecGzip:
		w = gzip.NewWriter(&compressed)
	case CodecLZ4:
		w = lz4.NewWriter(&compressed)
	case CodecZstd:
		zw, err := zstd.NewWriter(&compressed)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("%v is not a stream codec", codec)
	}
	mustWriteAll := func(p []byte) {
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	mustWriteAll(binary.AppendVarint(nil, int64(length)))
	mustWriteAll(body)
	zeros := make([]byte, 1<<20)
	for left := valueSize; left > 0; left -= len(zeros) {
		mustWriteAll(zeros[:min(left, len(zeros))])
	}
	mustWriteAll([]byte{0}) // no headers
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := Build(BuildOptions{ProducerID: -1})[:HeaderSize]
	b = append(b, compressed.Bytes()...)
	binary.BigEndian.PutUint32(b[OffsetLength:], uint32(len(b)-LengthFieldEnd))
	binary.BigEndian.PutUint16(b[OffsetAttributes:], uint16(codec))
	return fixCRC(b)
}

// allocatedBy returns the bytes fn allocates (all goroutines).
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

var streamCodecs = []Codec{CodecGzip, CodecLZ4, CodecZstd}

// TestDecompressionBombRefusedInBoundedMemory: a batch of at most 1 MiB
// whose one record inflates to 256 MiB is refused once the limit is passed,
// allocating no more than a decoder's buffers (a zstd window, two 4 MiB lz4
// blocks, which the lz4 package pools and a GC drops): the stream is
// walked, never held.
func TestDecompressionBombRefusedInBoundedMemory(t *testing.T) {
	for _, codec := range streamCodecs {
		b := bigRecordBatch(t, codec, 256<<20)
		if len(b) > 2<<20 {
			t.Fatalf("%v: bomb of %d bytes, want a small one", codec, len(b))
		}
		ValidateWithin(b, MaxDecompressedBytes) // warm the pools
		var err error
		n := allocatedBy(func() { _, err = ValidateWithin(b, MaxDecompressedBytes) })
		if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "exceed") {
			t.Fatalf("%v: bomb of %d bytes: %v, want a size error", codec, len(b), err)
		}
		if n > 16<<20 {
			t.Fatalf("%v: refusing a %d-byte bomb allocated %d bytes, want under 16 MiB", codec, len(b), n)
		}
		t.Logf("%v: %d-byte bomb refused, %d bytes allocated", codec, len(b), n)
	}
}

// TestConcurrentLargeBatchesBoundedMemory: 16 concurrent walks (pipelined
// ListOffsets by timestamp) over a valid batch that inflates to 48 MiB
// allocate a few MiB in all, not 16 times the records.
func TestConcurrentLargeBatchesBoundedMemory(t *testing.T) {
	for _, codec := range streamCodecs {
		b := bigRecordBatch(t, codec, 48<<20)
		if _, err := Validate(b); err != nil {
			t.Fatalf("%v: %v", codec, err)
		}
		n := allocatedBy(func() {
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					records := 0
					if err := ForEachRecord(b, func(int32, int64) bool { records++; return true }); err != nil || records != 1 {
						t.Errorf("%v: ForEachRecord: %v after %d records", codec, err, records)
					}
				}()
			}
			wg.Wait()
		})
		if n > 64<<20 {
			t.Fatalf("%v: 16 concurrent walks over 48 MiB of records allocated %d MiB", codec, n>>20)
		}
		t.Logf("%v: 16 concurrent walks over 48 MiB records: %d KiB allocated", codec, n>>10)
	}
}

// TestDecompressSlotsBound: no more than DecompressSlots batches are
// decompressing at once, however many goroutines try.
func TestDecompressSlotsBound(t *testing.T) {
	b := bigRecordBatch(t, CodecGzip, 4<<20)
	var mu sync.Mutex
	inUse, peak := 0, 0
	var wg sync.WaitGroup
	for range 4 * DecompressSlots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ForEachRecord(b, func(int32, int64) bool {
				mu.Lock()
				inUse++
				peak = max(peak, inUse)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inUse--
				mu.Unlock()
				return true
			})
		}()
	}
	wg.Wait()
	if peak > DecompressSlots || peak == 0 {
		t.Fatalf("%d walks inside the decompression bound at once, want 1..%d", peak, DecompressSlots)
	}
}
