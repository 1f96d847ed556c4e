package bench

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The raw engine's record batches (RecordBatch v2, the format of
// internal/plog/batch/doc.go) are encoded once, before the clock starts,
// and sent many times. Before each send only the fields that make a batch
// new are patched in place: the timestamps, the producer id and epoch, the
// base sequence, and the CRC-32C over them. The CRC covers everything from
// the attributes to the end, but the patched fields are all in its first
// 40 bytes: the checksum of the records behind them is computed once, and
// each send combines it with the checksum of the 40 patched bytes (as
// zlib's crc32_combine does), so the per-send cost does not grow with the
// batch.
const (
	rawBatchHeaderLen = 61 // baseOffset … recordCount
	rawCRCOffset      = 17 // the CRC field
	rawCRCStart       = 21 // attributes: the first byte the CRC covers
	rawFirstTSOffset  = 27
	rawMaxTSOffset    = 35
	rawProducerOffset = 43 // producerId int64, producerEpoch int16, baseSequence int32
	rawEpochOffset    = 51
	rawSequenceOffset = 53
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rawBatch is one pre-encoded batch: its bytes (inside a request buffer)
// and what a send needs to make them valid again.
type rawBatch struct {
	b []byte
	// tailCRC is the CRC-32C of the records (b[61:]), tailShift the
	// operator x^(8·len(records)) mod P that moves a checksum over them.
	tailCRC, tailShift uint32
	records            int32
}

// encodeRawBatch encodes records (key, value pairs; a nil key is a null
// key) as an uncompressed RecordBatch v2 with every timestamp delta 0, as
// franz-go encodes records that carry one timestamp. The producer fields
// are -1 (not idempotent) until patched.
func encodeRawBatch(keys, values [][]byte) rawBatch {
	var recs []byte
	for i := range values {
		var body []byte
		body = append(body, 0)                           // attributes
		body = kbin.AppendVarlong(body, 0)               // timestampDelta
		body = kbin.AppendVarint(body, int32(i))         // offsetDelta
		body = kbin.AppendVarintBytes(body, keys[i])     // key (null: -1)
		body = kbin.AppendVarintBytes(body, values[i])   // value
		body = kbin.AppendVarint(body, 0)                // headers
		recs = kbin.AppendVarint(recs, int32(len(body))) // length
		recs = append(recs, body...)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, // as producers send it (RecordBatch.NO_PARTITION_LEADER_EPOCH)
		Magic:                2, LastOffsetDelta: int32(len(values) - 1),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(values)), Records: recs,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12)) // batchLength: what follows it
	return rawBatch{b: b, tailCRC: crc32.Checksum(b[rawBatchHeaderLen:], castagnoli),
		tailShift: x2nmodp(int64(len(b)-rawBatchHeaderLen), 3), records: int32(len(values))}
}

// patch makes the batch new: timestamps, producer, sequence, and the CRC.
func (rb *rawBatch) patch(timestampMs, producerID int64, epoch int16, sequence int32) {
	b := rb.b
	binary.BigEndian.PutUint64(b[rawFirstTSOffset:], uint64(timestampMs))
	binary.BigEndian.PutUint64(b[rawMaxTSOffset:], uint64(timestampMs))
	binary.BigEndian.PutUint64(b[rawProducerOffset:], uint64(producerID))
	binary.BigEndian.PutUint16(b[rawEpochOffset:], uint16(epoch))
	binary.BigEndian.PutUint32(b[rawSequenceOffset:], uint32(sequence))
	head := crc32.Checksum(b[rawCRCStart:rawBatchHeaderLen], castagnoli)
	binary.BigEndian.PutUint32(b[rawCRCOffset:], crc32Combine(head, rb.tailCRC, rb.tailShift))
}

// checkRawBatch verifies b's length field and CRC-32C (tests and the
// encoder's own check).
func checkRawBatch(b []byte) error {
	if len(b) < rawBatchHeaderLen {
		return fmt.Errorf("batch of %d bytes, below the %d-byte header", len(b), rawBatchHeaderLen)
	}
	if l := int(binary.BigEndian.Uint32(b[8:])) + 12; l != len(b) {
		return fmt.Errorf("batch length field says %d bytes, the batch has %d", l, len(b))
	}
	if got, want := binary.BigEndian.Uint32(b[rawCRCOffset:]), crc32.Checksum(b[rawCRCStart:], castagnoli); got != want {
		return fmt.Errorf("batch CRC %08x, the bytes checksum to %08x", got, want)
	}
	return nil
}

// crc32Combine is the CRC of A‖B from crcA, crcB and shift = x^(8·len(B))
// mod P (zlib's crc32_combine_op, for the reflected Castagnoli polynomial).
func crc32Combine(crcA, crcB, shift uint32) uint32 { return multmodp(shift, crcA) ^ crcB }

const castagnoliReflected = 0x82f63b78

// multmodp is a·b modulo the CRC polynomial, in the reflected bit order of
// the checksum (zlib's multmodp).
func multmodp(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; ; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
}

// x2n[k] is x^(2^k) modulo the polynomial.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multmodp(p, p)
	}
	return t
}()

// x2nmodp is x^(n·2^k) modulo the polynomial (n·2^3: n bytes of zeros).
func x2nmodp(n int64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = multmodp(x2n[k&31], p)
		}
		k++
	}
	return p
}
