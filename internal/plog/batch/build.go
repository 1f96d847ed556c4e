package batch

import (
	"encoding/binary"
	"fmt"
)

// BuildOptions describes a batch for Build. The zero value is one
// uncompressed record with a null key and an empty value, timestamp 0, from
// producer id 0 (a real id: pass ProducerID -1 for a non-idempotent
// producer).
type BuildOptions struct {
	Records   int // number of records; 0 means 1
	KeySize   int // bytes per key; 0 means a null key
	ValueSize int // bytes per value
	Headers   int // headers per record, each a short key and value

	Codec Codec
	// Xerial frames snappy data as the Java client does (xerial
	// snappy-java) instead of sending one raw snappy block as franz-go's
	// one-shot compressor and librdkafka do. Snappy only.
	Xerial bool

	BaseTimestamp int64 // ms since the epoch of record 0
	TimestampStep int64 // ms from one record to the next

	ProducerID    int64 // -1: not idempotent; epoch and sequence are then written as -1
	ProducerEpoch int16
	BaseSequence  int32

	BaseOffset           int64 // producers send 0
	PartitionLeaderEpoch int32 // producers send -1 or 0
	// Attributes are extra attribute bits ORed in (AttrTransactional,
	// AttrControl, ...) to build batches that Validate refuses. The codec
	// bits come from Codec.
	Attributes int16
}

// Build returns a valid batch as a Kafka client would produce it, for tests
// and benchmarks of this and other packages:
//
//	b := batch.Build(batch.BuildOptions{Records: 10, ValueSize: 128, ProducerID: -1, BaseTimestamp: ms})
//
// Keys, values and headers are filled with a deterministic pattern that
// depends on the record index (and so compresses well). Build panics on
// negative sizes.
func Build(opts BuildOptions) []byte {
	n := max(opts.Records, 1)
	if opts.KeySize < 0 || opts.ValueSize < 0 || opts.Headers < 0 {
		panic(fmt.Sprintf("batch.Build: negative size in %+v", opts))
	}

	var records, body []byte
	for i := range n {
		body = body[:0]
		body = append(body, 0) // record attributes: unused
		body = binary.AppendVarint(body, int64(i)*opts.TimestampStep)
		body = binary.AppendVarint(body, int64(i)) // offsetDelta
		if opts.KeySize == 0 {
			body = binary.AppendVarint(body, -1)
		} else {
			body = appendPattern(body, i, opts.KeySize)
		}
		body = appendPattern(body, i+1, opts.ValueSize)
		body = binary.AppendVarint(body, int64(opts.Headers))
		for h := range opts.Headers {
			body = appendPattern(body, h, 4)
			body = appendPattern(body, i+h, 8)
		}
		// Go's varint is zigzag then LEB128: Kafka's varint exactly.
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}

	maxTimestamp := opts.BaseTimestamp
	if opts.TimestampStep > 0 {
		maxTimestamp += int64(n-1) * opts.TimestampStep
	}
	producerEpoch, baseSequence := opts.ProducerEpoch, opts.BaseSequence
	if opts.ProducerID < 0 {
		producerEpoch, baseSequence = -1, -1
	}
	records = compress(opts.Codec, opts.Xerial, records)

	return frame(header{
		baseOffset:           opts.BaseOffset,
		partitionLeaderEpoch: opts.PartitionLeaderEpoch,
		attributes:           opts.Attributes&^AttrCompressionMask | int16(opts.Codec)&AttrCompressionMask,
		records:              n,
		baseTimestamp:        opts.BaseTimestamp,
		maxTimestamp:         maxTimestamp,
		producerID:           opts.ProducerID,
		producerEpoch:        producerEpoch,
		baseSequence:         baseSequence,
	}, records)
}

// KeyValue is one record for BuildRecords. A nil Key or Value is written
// as null (a nil Value is a tombstone in a compacted topic); an empty
// non-nil one as zero bytes.
type KeyValue struct {
	Key, Value []byte
}

// BuildRecords frames records as one uncompressed batch, as a
// non-idempotent producer would send it, with no headers and every record
// stamped timestamp (ms since the epoch). It is how the broker writes its
// own logs (__consumer_offsets, the metadata log): callers name records,
// only this package knows the layout. records must not be empty.
func BuildRecords(records []KeyValue, baseOffset, timestamp int64) []byte {
	if len(records) == 0 {
		panic("batch.BuildRecords: no records")
	}
	size := 0
	for _, r := range records {
		size += len(r.Key) + len(r.Value) + 3*binary.MaxVarintLen32
	}
	body := make([]byte, 0, size)
	var rec []byte
	for i, r := range records {
		rec = rec[:0]
		rec = append(rec, 0)                     // record attributes: unused
		rec = binary.AppendVarint(rec, 0)        // timestampDelta
		rec = binary.AppendVarint(rec, int64(i)) // offsetDelta
		rec = appendNullableBytes(rec, r.Key)
		rec = appendNullableBytes(rec, r.Value)
		rec = binary.AppendVarint(rec, 0) // no headers
		body = binary.AppendVarint(body, int64(len(rec)))
		body = append(body, rec...)
	}
	return frame(header{
		baseOffset:    baseOffset,
		records:       len(records),
		baseTimestamp: timestamp,
		maxTimestamp:  timestamp,
		producerID:    -1,
		producerEpoch: -1,
		baseSequence:  -1,
	}, body)
}

// ForEachKeyValue calls fn with the offsetDelta, key and value of every
// record of the uncompressed batch b, in order; nil means null. The slices
// alias b. It checks the framing and the CRC first (KindCorrupt), then
// that the records parse (KindInvalid); a compressed batch is KindInvalid:
// the broker's own logs are never compressed.
func ForEachKeyValue(b []byte, fn func(offsetDelta int32, key, value []byte) error) error {
	h, err := checkFraming(b)
	if err != nil {
		return err
	}
	if c := h.Compression(); c != CodecNone {
		return errorf(KindInvalid, OffsetAttributes, "%s batch: ForEachKeyValue reads uncompressed batches only", c)
	}
	r := recordReader{b: b, pos: OffsetRecords, end: len(b)}
	var fnErr error
	err = r.walk(h.NumRecords, false, func(rec record) bool {
		fnErr = fn(rec.offsetDelta, r.nullableBytes(rec.keyPos), r.nullableBytes(rec.valuePos))
		return fnErr == nil
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// nullableBytes returns the bytes whose varint length starts at pos, which
// next has already checked; nil for length -1.
func (r *recordReader) nullableBytes(pos int) []byte {
	n, start, _ := readVarint(r.b, pos, r.end)
	if n < 0 {
		return nil
	}
	return r.b[start : start+int(n) : start+int(n)]
}

// header holds the fields frame writes; the CRC and lengths are computed.
type header struct {
	baseOffset           int64
	partitionLeaderEpoch int32
	attributes           int16
	records              int
	baseTimestamp        int64
	maxTimestamp         int64
	producerID           int64
	producerEpoch        int16
	baseSequence         int32
}

// frame writes the batch header h in front of the (possibly compressed)
// records and sets the CRC.
func frame(h header, records []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(records))
	binary.BigEndian.PutUint64(b[OffsetBaseOffset:], uint64(h.baseOffset))
	binary.BigEndian.PutUint32(b[OffsetLength:], uint32(HeaderSize-LengthFieldEnd+len(records)))
	binary.BigEndian.PutUint32(b[OffsetPartitionLeaderEpoch:], uint32(h.partitionLeaderEpoch))
	b[OffsetMagic] = Magic
	binary.BigEndian.PutUint16(b[OffsetAttributes:], uint16(h.attributes))
	binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], uint32(h.records-1))
	binary.BigEndian.PutUint64(b[OffsetBaseTimestamp:], uint64(h.baseTimestamp))
	binary.BigEndian.PutUint64(b[OffsetMaxTimestamp:], uint64(h.maxTimestamp))
	binary.BigEndian.PutUint64(b[OffsetProducerID:], uint64(h.producerID))
	binary.BigEndian.PutUint16(b[OffsetProducerEpoch:], uint16(h.producerEpoch))
	binary.BigEndian.PutUint32(b[OffsetBaseSequence:], uint32(h.baseSequence))
	binary.BigEndian.PutUint32(b[OffsetNumRecords:], uint32(h.records))
	b = append(b, records...)
	binary.BigEndian.PutUint32(b[OffsetCRC:], CRC(b))
	return b
}

// appendNullableBytes appends a varint length and b; nil is length -1.
func appendNullableBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// appendPattern appends a varint length and size bytes of a pattern seeded
// by seed.
func appendPattern(dst []byte, seed, size int) []byte {
	dst = binary.AppendVarint(dst, int64(size))
	for j := range size {
		dst = append(dst, 'a'+byte((seed+j)%26))
	}
	return dst
}
