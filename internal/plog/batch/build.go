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

	b := make([]byte, HeaderSize, HeaderSize+len(records))
	binary.BigEndian.PutUint64(b[OffsetBaseOffset:], uint64(opts.BaseOffset))
	binary.BigEndian.PutUint32(b[OffsetLength:], uint32(HeaderSize-LengthFieldEnd+len(records)))
	binary.BigEndian.PutUint32(b[OffsetPartitionLeaderEpoch:], uint32(opts.PartitionLeaderEpoch))
	b[OffsetMagic] = Magic
	attributes := opts.Attributes&^AttrCompressionMask | int16(opts.Codec)&AttrCompressionMask
	binary.BigEndian.PutUint16(b[OffsetAttributes:], uint16(attributes))
	binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], uint32(n-1))
	binary.BigEndian.PutUint64(b[OffsetBaseTimestamp:], uint64(opts.BaseTimestamp))
	binary.BigEndian.PutUint64(b[OffsetMaxTimestamp:], uint64(maxTimestamp))
	binary.BigEndian.PutUint64(b[OffsetProducerID:], uint64(opts.ProducerID))
	binary.BigEndian.PutUint16(b[OffsetProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(b[OffsetBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(b[OffsetNumRecords:], uint32(n))
	b = append(b, records...)
	binary.BigEndian.PutUint32(b[OffsetCRC:], CRC(b))
	return b
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
