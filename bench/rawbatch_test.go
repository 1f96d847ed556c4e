package bench

import (
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCRC32Combine checks the combination of two checksums against the
// checksum of the concatenation, for lengths around the byte-shift
// boundaries.
func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 8, 63, 64, 1000, 4096, 65537} {
		a, b := make([]byte, 40), make([]byte, n)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := crc32.Checksum(append(append([]byte{}, a...), b...), castagnoli)
		got := crc32Combine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), x2nmodp(int64(n), 3))
		if got != want {
			t.Errorf("len(B) %d: combined %08x, want %08x", n, got, want)
		}
	}
}

// TestRawBatchPatch: a patched batch has a valid CRC and decodes (kmsg)
// to the fields and records it was given.
func TestRawBatchPatch(t *testing.T) {
	values := Payloads(10, 100)
	keys := make([][]byte, 10)
	for i := range keys {
		if i%2 == 0 {
			keys[i] = BenchKey(int64(i))
		}
	}
	rb := encodeRawBatch(keys, values)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100; i++ {
		ts, pid, epoch, seq := rng.Int64(), rng.Int64(), int16(rng.Uint32()), rng.Int32()
		rb.patch(ts, pid, epoch, seq)
		if err := checkRawBatch(rb.b); err != nil {
			t.Fatal(err)
		}
		var dec kmsg.RecordBatch
		if err := dec.ReadFrom(rb.b); err != nil {
			t.Fatal(err)
		}
		if dec.FirstTimestamp != ts || dec.MaxTimestamp != ts || dec.ProducerID != pid || dec.ProducerEpoch != epoch ||
			dec.FirstSequence != seq || dec.NumRecords != 10 || dec.LastOffsetDelta != 9 || dec.Magic != 2 {
			t.Fatalf("decoded %+v", dec)
		}
		r := kbinRecords(t, dec.Records, 10)
		for j, rec := range r {
			if string(rec.Value) != string(values[j]) || string(rec.Key) != string(keys[j]) || (keys[j] == nil) != (rec.Key == nil) ||
				rec.OffsetDelta != int32(j) || rec.TimestampDelta64 != 0 {
				t.Fatalf("record %d: %+v", j, rec)
			}
		}
	}
	rb.b[100] ^= 1
	if checkRawBatch(rb.b) == nil {
		t.Fatal("a flipped record byte must fail the CRC check")
	}
}

func kbinRecords(t *testing.T, b []byte, n int) []kmsg.Record {
	t.Helper()
	var out []kmsg.Record
	for i := 0; i < n; i++ {
		var r kmsg.Record
		l, used := varint(b)
		if used <= 0 {
			t.Fatalf("record %d: bad length", i)
		}
		if err := r.ReadFrom(b[:used+int(l)]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		out = append(out, r)
		b = b[used+int(l):]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after the records", len(b))
	}
	return out
}

func varint(b []byte) (int64, int) {
	var u uint64
	for i := 0; i < len(b) && i < 10; i++ {
		u |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i + 1
		}
	}
	return 0, -1
}

func TestNextSequenceWraps(t *testing.T) {
	for _, c := range []struct{ seq, n, want int32 }{{0, 5, 5}, {math.MaxInt32 - 5, 5, math.MaxInt32}, {math.MaxInt32 - 4, 5, 0}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 1, 5, 3}} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// BenchmarkRawBatchPatch: the per-send cost of a 64 KiB batch (patch and
// combined CRC) against recomputing its CRC over all of it.
func BenchmarkRawBatchPatch(b *testing.B) {
	rb := encodeRawBatch(make([][]byte, 64), Payloads(64, 1024))
	b.Run("combined", func(b *testing.B) {
		b.SetBytes(int64(len(rb.b)))
		for i := 0; i < b.N; i++ {
			rb.patch(int64(i), 1, 0, int32(i))
		}
	})
	b.Run("full-crc", func(b *testing.B) {
		b.SetBytes(int64(len(rb.b)))
		for i := 0; i < b.N; i++ {
			rb.patch(int64(i), 1, 0, int32(i))
			crc32.Checksum(rb.b[rawCRCStart:], castagnoli)
		}
	})
}
