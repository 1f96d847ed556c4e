package batch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Sizes of the fixed part of a batch (see the package documentation).
const (
	// HeaderSize is the size of the fixed header; records start here.
	HeaderSize = 61
	// LengthFieldEnd is where the batchLength field ends: a batch's total
	// size is LengthFieldEnd + batchLength.
	LengthFieldEnd = 12
	// MinLength is the smallest legal batchLength: the header after the
	// length field, with no records.
	MinLength = HeaderSize - LengthFieldEnd
	// Magic is the only magic byte (message format version) Sushka
	// accepts.
	Magic = 2
)

// Offsets of the header fields, from the start of the batch.
const (
	OffsetBaseOffset           = 0
	OffsetLength               = 8
	OffsetPartitionLeaderEpoch = 12
	OffsetMagic                = 16
	OffsetCRC                  = 17
	OffsetAttributes           = 21 // the CRC covers this byte to the end of the batch
	OffsetLastOffsetDelta      = 23
	OffsetBaseTimestamp        = 27
	OffsetMaxTimestamp         = 35
	OffsetProducerID           = 43
	OffsetProducerEpoch        = 51
	OffsetBaseSequence         = 53
	OffsetNumRecords           = 57
	OffsetRecords              = 61
)

// Bits of the attributes field.
const (
	AttrCompressionMask int16 = 0x07 // bits 0-2: the Codec
	AttrLogAppendTime   int16 = 0x08 // bit 3: timestamp type; 0 CreateTime, 1 LogAppendTime
	AttrTransactional   int16 = 0x10 // bit 4
	AttrControl         int16 = 0x20 // bit 5: transaction markers, written by the broker only
	AttrDeleteHorizon   int16 = 0x40 // bit 6: baseTimestamp is the compaction delete horizon
)

// Codec is the compression codec of a batch's records (attribute bits 0-2).
type Codec int8

const (
	CodecNone Codec = iota
	CodecGzip
	CodecSnappy
	CodecLZ4
	CodecZstd
)

// maxCodec is the largest codec id Kafka defines.
const maxCodec = CodecZstd

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// Header is the decoded fixed part of a batch.
type Header struct {
	BaseOffset           int64
	Length               int32 // batchLength: bytes after the length field
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64 // -1: not an idempotent producer
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Compression returns the codec of the batch's records.
func (h *Header) Compression() Codec { return Codec(h.Attributes & AttrCompressionMask) }

// LogAppendTime reports whether the timestamps are the broker's append time
// (then every record's timestamp is MaxTimestamp).
func (h *Header) LogAppendTime() bool { return h.Attributes&AttrLogAppendTime != 0 }

// Transactional reports whether the batch belongs to a transaction.
func (h *Header) Transactional() bool { return h.Attributes&AttrTransactional != 0 }

// Control reports whether the batch holds control records (transaction
// markers).
func (h *Header) Control() bool { return h.Attributes&AttrControl != 0 }

// Size returns the batch's total size in bytes, LengthFieldEnd + Length.
func (h *Header) Size() int { return LengthFieldEnd + int(h.Length) }

// LastOffset returns the offset of the batch's last record.
func (h *Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// ParseHeader decodes the fixed header at the start of b. It needs at least
// HeaderSize bytes and checks nothing else: use Validate for untrusted bytes.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, errorf(KindCorrupt, len(b), "truncated header: have %d bytes, need %d", len(b), HeaderSize)
	}
	b = b[:HeaderSize] // one bounds check for all the reads below
	return Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[OffsetBaseOffset:])),
		Length:               int32(binary.BigEndian.Uint32(b[OffsetLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[OffsetPartitionLeaderEpoch:])),
		Magic:                int8(b[OffsetMagic]),
		CRC:                  binary.BigEndian.Uint32(b[OffsetCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[OffsetAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[OffsetLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[OffsetBaseTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[OffsetMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[OffsetProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[OffsetProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[OffsetBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[OffsetNumRecords:])),
	}, nil
}

// castagnoli is the CRC-32C table, built once.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC computes the checksum a batch should store: CRC-32C (Castagnoli) of
// b[OffsetAttributes:]. b must be exactly one batch, at least HeaderSize
// bytes long.
func CRC(b []byte) uint32 {
	return crc32.Checksum(b[OffsetAttributes:], castagnoli)
}

// UpdateCRC continues a batch's CRC-32C over p, the next bytes of the
// batch: UpdateCRC(0, b[OffsetAttributes:]) is CRC(b). Recovery checksums a
// batch that spans its read blocks piece by piece with it.
func UpdateCRC(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, castagnoli, p)
}
