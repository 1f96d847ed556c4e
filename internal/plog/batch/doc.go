// Package batch frames, validates and patches Kafka record batches (magic
// 2), the unit in which Sushka receives, stores and serves records.
//
// The wire format is the storage format (design D2): a batch is written to
// a segment exactly as the producer sent it, except for the base offset and
// partition leader epoch the broker patches in (and, for LogAppendTime
// topics, the timestamp type and maxTimestamp), and consumers get the same
// bytes back. This package is the only code that knows the layout; this
// comment is its specification.
//
// # Batch layout
//
// All integers are big-endian and signed unless noted. Offsets are from the
// start of the batch. "CRC" says whether the checksum covers the field.
//
//	offset size field                CRC  notes
//	     0    8 baseOffset           no   offset of the first record; patched on append
//	     8    4 batchLength          no   bytes after this field: batch size = 12 + batchLength
//	    12    4 partitionLeaderEpoch no   leader epoch at append; patched on append
//	    16    1 magic                no   2 (0 and 1 are the legacy formats, refused)
//	    17    4 crc                  no   uint32 CRC-32C (Castagnoli) of bytes [21, size)
//	    21    2 attributes           yes  see below
//	    23    4 lastOffsetDelta      yes  = recordCount-1 for a produced batch
//	    27    8 baseTimestamp        yes  ms since the epoch, timestamp of the first record
//	    35    8 maxTimestamp         yes  largest record timestamp; append time if LogAppendTime
//	    43    8 producerId           yes  -1 if the producer is not idempotent
//	    51    2 producerEpoch        yes
//	    53    4 baseSequence         yes  sequence of the first record; record i has baseSequence+i
//	    57    4 recordCount          yes  >= 1
//	    61    - records              yes  recordCount records, compressed as one stream if
//	                                      the codec is not none
//
// As a picture, with the offset at which each field starts above it. The
// first row lies outside the CRC's range; the other rows are covered:
//
//	0                 8             12                     16      17    21
//	+-----------------+-------------+----------------------+-------+-----+
//	| baseOffset      | batchLength | partitionLeaderEpoch | magic | crc |
//	+-----------------+-------------+----------------------+-------+-----+
//	21           23                27              35             43           51
//	+------------+-----------------+---------------+--------------+------------+
//	| attributes | lastOffsetDelta | baseTimestamp | maxTimestamp | producerId |
//	+------------+-----------------+---------------+--------------+------------+
//	51              53             57            61
//	+---------------+--------------+-------------+-----------------------+
//	| producerEpoch | baseSequence | recordCount | records ...           |
//	+---------------+--------------+-------------+-----------------------+
//
// The two fields the broker rewrites on every append, baseOffset and
// partitionLeaderEpoch, lie before the CRC's range, so appending never
// recomputes a checksum. batchLength is not covered either: a damaged length
// shows as a framing error (it no longer frames the bytes) or as a CRC
// mismatch (the checksum runs over the wrong range).
//
// Attributes (int16):
//
//	bits 0-2  compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (5-7 undefined)
//	bit  3    timestamp type: 0 CreateTime, 1 LogAppendTime (set by the broker)
//	bit  4    transactional
//	bit  5    control batch (transaction markers; written by the broker only)
//	bit  6    delete horizon: baseTimestamp holds the compaction delete horizon
//	bits 7-15 unused, 0
//
// # Record layout
//
// Records follow one another with no padding. Varints are Kafka's: zigzag
// encoded, then unsigned LEB128 (7 bits a byte, least significant first, high
// bit set on all bytes but the last), as protobuf's sint32 and sint64. A
// varint (int32) takes at most 5 bytes, a varlong (int64) at most 10.
//
//	length          varint   bytes of the record after this field
//	attributes      int8     unused, 0
//	timestampDelta  varlong  timestamp - baseTimestamp
//	offsetDelta     varint   offset - baseOffset; record i has offsetDelta i
//	keyLength       varint   -1 for a null key
//	key             keyLength bytes
//	valueLength     varint   -1 for a null value (a tombstone)
//	value           valueLength bytes
//	headerCount     varint   >= 0
//	headers         headerCount times:
//	  keyLength     varint   >= 0 (header keys are never null)
//	  key           UTF-8 bytes
//	  valueLength   varint   -1 for a null value
//	  value         bytes
//
// The smallest record is 7 bytes. In a LogAppendTime batch every record's
// timestamp is the batch's maxTimestamp; the records keep the producer's
// deltas but readers ignore them.
//
// # Compression
//
// With a codec other than none, the records section (from byte 61 to the
// end) is the concatenated records compressed as one stream:
//
//	gzip    RFC 1952, possibly several members
//	snappy  either one raw snappy block (franz-go, librdkafka) or the xerial
//	        framing of the Java client: the 8 bytes 0x82 "SNAPPY" 0x00, an int32
//	        version and an int32 minimum compatible version (both 1), then
//	        blocks of an int32 length and a raw snappy block (32 KiB of input each)
//	lz4     the LZ4 frame format
//	zstd    one or more zstd frames
//
// The header stays uncompressed, so recordCount, lastOffsetDelta and the
// timestamps are known without decompressing.
//
// # Validation on append
//
// Validate (ValidateWithin, with a decompressed-size budget) checks a
// producer's batch before it is stored, as Kafka's LogValidator does:
// framing, magic, CRC, the attribute bits producers may not set (control:
// markers are the broker's; delete horizon), a transactional batch without
// a producer id,
// recordCount >= 1 with lastOffsetDelta = recordCount-1, baseSequence >= 0
// for idempotent producers, and then the records themselves, decompressed
// if the codec is not none: each record's framing (its length, varint
// lengths of key, value and headers that fill it exactly), offsetDelta 0,
// 1, ... in order, and exactly recordCount records filling the records. A
// batch claiming more records than its budget could hold (7 bytes each) is
// refused from its header.
//
// Decompression is bounded three ways, so that no batch can make the broker
// allocate without limit: the decompressed bytes (DecompressBudget: 64
// times max.message.bytes, at most MaxDecompressedBytes); the memory
// (gzip, lz4 and zstd streams are walked through a 32 KiB buffer and never
// held whole, a zstd frame may not ask for a window over 8 MiB, a snappy
// block may not declare more than snappy can expand to); and the
// concurrency (at most DecompressSlots batches decompress at once in the
// process, each with its own long-lived decoders, so validation allocates
// nothing per batch once warm). Measured costs are in docs/benchmarks.md
// (BenchmarkValidateCompressed).
//
// Failures are *Error values. KindCorrupt means the bytes fail the batch's
// own integrity checks (length framing, unknown magic, CRC): they are not
// what the producer sent, and the server answers CORRUPT_MESSAGE, which
// clients retry. KindInvalid means the CRC matched, so the producer really
// sent these bytes and resending cannot help: the server answers
// INVALID_RECORD. Malformed records under a good CRC are KindInvalid, as in
// Kafka. Each error carries the position of the offending field.
//
// Topic and request rules (max.message.bytes, message.timestamp.type and
// the timestamp range, Kafka's INVALID_TIMESTAMP for a producer that sets
// the LogAppendTime bit itself, one batch per partition per produce request,
// sequence numbers against the producer state) are the caller's.
//
// # Reading
//
// Split walks record sets holding several batches back to back, by their
// length fields; a batch cut short at the end is an error. ForEachRecord
// decompresses under the same bounds as Validate and reports each record's
// offsetDelta and timestamp. Build makes valid batches of any codec for
// tests.
package batch
