package batch

import (
	"encoding/binary"
	"fmt"
)

// Validate is ValidateWithin with the broker-wide MaxDecompressedBytes.
func Validate(b []byte) (Header, error) { return ValidateWithin(b, MaxDecompressedBytes) }

// ValidateWithin checks that b is exactly one well-formed batch that a
// producer may append, and returns its header. Compressed records may
// decompress to at most maxDecompressedBytes (see DecompressBudget). An
// uncompressed batch is checked without allocating unless it fails.
//
// It checks, in order: the magic byte is 2; the header is whole; batchLength
// frames exactly len(b) bytes; the CRC matches; the codec is known; the
// batch is neither a control batch nor carries a delete horizon, and a
// transactional one has a producer id; NumRecords >= 1 and LastOffsetDelta == NumRecords-1; an
// idempotent batch (ProducerID >= 0) has BaseSequence >= 0. Then it walks
// the records, decompressed as Kafka's LogValidator does when compressed:
// each is framed by its length and its fields (varint lengths of key,
// value and headers) fill it exactly, offsetDelta of record i is i, and
// exactly NumRecords records fill the (decompressed) records, which must
// decompress within the limit and pass the codec's own checksums.
//
// Checks that depend on the topic or the request (max.message.bytes, the
// timestamp type and range, sequence numbers against the producer state)
// belong to the caller. On error, the Header holds whatever could be
// parsed.
func ValidateWithin(b []byte, maxDecompressedBytes int) (Header, error) {
	h, err := checkFraming(b)
	if err != nil {
		return h, err
	}
	if err := checkAttributes(h.Attributes); err != nil {
		return h, err
	}
	if h.NumRecords < 1 {
		return h, errorf(KindInvalid, OffsetNumRecords, "record count %d: a batch holds at least one record", h.NumRecords)
	}
	if h.LastOffsetDelta != h.NumRecords-1 {
		return h, errorf(KindInvalid, OffsetLastOffsetDelta, "lastOffsetDelta %d does not match record count %d (want %d)",
			h.LastOffsetDelta, h.NumRecords, h.NumRecords-1)
	}
	if h.Transactional() && h.ProducerID < 0 {
		// KIP-98: a transaction belongs to a producer id; without one no
		// marker could ever end it.
		return h, errorf(KindInvalid, OffsetProducerID, "transactional batch without a producer id (producerId %d)", h.ProducerID)
	}
	if h.ProducerID >= 0 && h.BaseSequence < 0 {
		return h, errorf(KindInvalid, OffsetBaseSequence, "baseSequence %d is negative for producerId %d", h.BaseSequence, h.ProducerID)
	}
	if h.Compression() == CodecNone {
		err = checkRecords(b, h.NumRecords)
	} else {
		err = walkCompressed(b, &h, maxDecompressedBytes, true, nil)
	}
	return h, err
}

// checkFraming checks the batch's own integrity: magic, a whole header,
// batchLength framing exactly b, the CRC. What fails here is KindCorrupt
// (or KindInvalid for a legacy magic).
func checkFraming(b []byte) (Header, error) {
	if len(b) > OffsetMagic && b[OffsetMagic] != Magic {
		return Header{}, magicError(int8(b[OffsetMagic]))
	}
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.Length < MinLength {
		return h, errorf(KindCorrupt, OffsetLength, "batchLength %d is below the minimum %d", h.Length, MinLength)
	}
	if size := int64(LengthFieldEnd) + int64(h.Length); size != int64(len(b)) {
		return h, errorf(KindCorrupt, OffsetLength, "batchLength %d frames %d bytes, have %d", h.Length, size, len(b))
	}
	if crc := CRC(b); crc != h.CRC {
		return h, errorf(KindCorrupt, OffsetCRC, "crc mismatch: stored 0x%08x, computed 0x%08x", h.CRC, crc)
	}
	return h, nil
}

// magicError reports a batch that is not magic 2. The legacy formats (magic
// 0 and 1) are well known but refused, as Kafka refuses them in produce
// requests of version 3 and later; any other value is garbage.
func magicError(magic int8) error {
	if magic == 0 || magic == 1 {
		return errorf(KindInvalid, OffsetMagic, "message format v%d (magic %d) is not supported: only record batches of magic %d", magic, magic, Magic)
	}
	return errorf(KindCorrupt, OffsetMagic, "unknown magic %d, want %d", magic, Magic)
}

// checkAttributes refuses what producers may not send.
func checkAttributes(attributes int16) error {
	if codec := Codec(attributes & AttrCompressionMask); codec > maxCodec {
		return errorf(KindInvalid, OffsetAttributes, "unknown compression codec %d (attributes 0x%04x)", int8(codec), uint16(attributes))
	}
	if attributes&AttrControl != 0 {
		return errorf(KindInvalid, OffsetAttributes, "control batch: clients may not write control records (attributes 0x%04x)", uint16(attributes))
	}
	if attributes&AttrDeleteHorizon != 0 {
		return errorf(KindInvalid, OffsetAttributes, "delete horizon flag is set by log compaction, not producers (attributes 0x%04x)", uint16(attributes))
	}
	return nil
}

// checkRecords walks the uncompressed records of the whole batch b. It is
// recordReader.walk without a visitor, kept apart because it is the append
// hot path: each record is first skimmed (skimRecord), and only one the
// skim does not accept is walked again by next, which names what is wrong.
func checkRecords(b []byte, numRecords int32) error {
	r := recordReader{b: b, pos: OffsetRecords, end: len(b)}
	for i := int32(0); i < numRecords; i++ {
		if next, ok := skimRecord(b, r.pos, r.end, i); ok {
			r.pos = next
			continue
		}
		if r.pos == r.end {
			return r.errorAt(r.pos, "records end after %d of %d records", i, numRecords)
		}
		rec, err := r.next(i)
		if err != nil {
			return err
		}
		if rec.offsetDelta != i {
			return errorf(KindInvalid, rec.offsetDeltaPos, "record %d: offsetDelta %d, want %d", i, rec.offsetDelta, i)
		}
	}
	if r.pos != r.end {
		return r.errorAt(r.pos, "%d bytes left after the last of %d records", r.end-r.pos, numRecords)
	}
	return nil
}

// Split calls fn with each batch of a record set holding batches back to
// back (a produce request's partition data, a range of a segment), framed
// by their length fields only: fn gets whole batches to Validate. Each batch
// slice is capped at its end, so appending to it cannot clobber the next.
//
// A trailing batch cut short is a KindCorrupt error, not silently dropped;
// an empty record set calls fn zero times. Split returns fn's first error
// unchanged (positions in it are relative to the batch fn got).
//
// Kafka accepts exactly one magic-2 batch per partition in a produce
// request; enforcing that is the caller's decision.
func Split(b []byte, fn func(batch []byte) error) error {
	for pos := 0; pos < len(b); {
		rest := b[pos:]
		if len(rest) < LengthFieldEnd {
			return errorf(KindCorrupt, pos, "truncated batch: %d bytes left, the length field ends at byte %d", len(rest), LengthFieldEnd)
		}
		length := int32(binary.BigEndian.Uint32(rest[OffsetLength:]))
		if length < MinLength {
			return errorf(KindCorrupt, pos+OffsetLength, "batchLength %d is below the minimum %d", length, MinLength)
		}
		size := int64(LengthFieldEnd) + int64(length)
		if size > int64(len(rest)) {
			return errorf(KindCorrupt, pos+OffsetLength, "truncated batch: batchLength %d frames %d bytes, only %d left", length, size, len(rest))
		}
		n := int(size)
		if err := fn(rest[:n:n]); err != nil {
			return err
		}
		pos += n
	}
	return nil
}

// recordReader walks varint-framed records in b[pos:end]. When the records
// were decompressed, errors point at OffsetRecords of the batch and name the
// position in the decompressed bytes.
type recordReader struct {
	b            []byte
	pos, end     int
	decompressed bool
}

// record is what the broker needs of one record.
type record struct {
	offsetDelta    int32
	timestampDelta int64
	offsetDeltaPos int
	// keyPos and valuePos are where the key's and the value's varint
	// lengths start (ForEachKeyValue reads them again).
	keyPos, valuePos int
}

// fail reports a malformed record i at pos. A record that does not parse
// under a matching CRC was sent that way by the producer: KindInvalid.
func (r *recordReader) fail(pos int, i int32, format string, args ...any) error {
	return r.errorAt(pos, "record %d: %s", i, fmt.Sprintf(format, args...))
}

// errorAt reports a KindInvalid problem at pos of the records.
func (r *recordReader) errorAt(pos int, format string, args ...any) error {
	if r.decompressed {
		return errorf(KindInvalid, OffsetRecords, "%s (at byte %d of the decompressed records)", fmt.Sprintf(format, args...), pos)
	}
	return errorf(KindInvalid, pos, format, args...)
}

// next parses record i, which starts at r.pos, and moves past it.
func (r *recordReader) next(i int32) (record, error) {
	var rec record
	length, pos, ok := readVarint(r.b, r.pos, r.end)
	if !ok {
		return rec, r.fail(r.pos, i, "malformed length varint")
	}
	if length < 0 {
		return rec, r.fail(r.pos, i, "negative length %d", length)
	}
	if int(length) > r.end-pos {
		return rec, r.fail(r.pos, i, "length %d overruns the records by %d bytes", length, int(length)-(r.end-pos))
	}
	end := pos + int(length)
	if pos == end {
		return rec, r.fail(pos, i, "attributes missing")
	}
	pos++ // attributes: unused in magic 2
	fieldPos := pos
	if rec.timestampDelta, pos, ok = readVarlong(r.b, pos, end); !ok {
		return rec, r.fail(fieldPos, i, "malformed timestampDelta varlong")
	}
	rec.offsetDeltaPos = pos
	if rec.offsetDelta, pos, ok = readVarint(r.b, pos, end); !ok {
		return rec, r.fail(rec.offsetDeltaPos, i, "malformed offsetDelta varint")
	}
	var err error
	rec.keyPos = pos
	if pos, err = r.skipBytes(pos, end, i, "key", true); err != nil {
		return rec, err
	}
	rec.valuePos = pos
	if pos, err = r.skipBytes(pos, end, i, "value", true); err != nil {
		return rec, err
	}
	fieldPos = pos
	headers, pos, ok := readVarint(r.b, pos, end)
	if !ok {
		return rec, r.fail(fieldPos, i, "malformed header count varint")
	}
	if headers < 0 {
		return rec, r.fail(fieldPos, i, "negative header count %d", headers)
	}
	// Each header takes at least two bytes, so this loop ends within the
	// record whatever the count claims.
	for h := int32(0); h < headers; h++ {
		if pos, err = r.skipBytes(pos, end, i, "header key", false); err != nil {
			return rec, err
		}
		if pos, err = r.skipBytes(pos, end, i, "header value", true); err != nil {
			return rec, err
		}
	}
	if pos != end {
		return rec, r.fail(pos, i, "fields end %d bytes before the record's length says", end-pos)
	}
	r.pos = end
	return rec, nil
}

// skimRecord checks record i at b[pos:end] as next does and returns the
// position after it, for the common shape only: every varint of at most
// two bytes (lengths below 8 KiB) but the timestamp delta's (at most nine).
// It accepts only records next accepts; for anything else (a longer
// varint, or a malformed record) it returns false and next decides. It is
// the per-record cost of appending small records (issue 12: at 128 B the
// record walk through next was 17% of the broker's CPU).
func skimRecord(b []byte, pos, end int, i int32) (int, bool) {
	length, pos, ok := varint2(b, pos, end)
	if !ok || length < 0 || int(length) > end-pos {
		return 0, false
	}
	end = pos + int(length)
	pos++ // attributes
	// timestampDelta: a varlong of at most 9 bytes (any such value is valid).
	for n := 0; ; n++ {
		if pos >= end || n == 9 {
			return 0, false
		}
		c := b[pos]
		pos++
		if c < 0x80 {
			break
		}
	}
	var offsetDelta, n int32
	if offsetDelta, pos, ok = varint2(b, pos, end); !ok || offsetDelta != i {
		return 0, false
	}
	for field := 0; field < 2; field++ { // key, value: nullable
		if n, pos, ok = varint2(b, pos, end); !ok || n < -1 || int(n) > end-pos {
			return 0, false
		}
		pos += max(int(n), 0)
	}
	headers, pos, ok := varint2(b, pos, end)
	if !ok || headers < 0 {
		return 0, false
	}
	for h := int32(0); h < headers; h++ {
		// A header's key is not nullable, its value is.
		if n, pos, ok = varint2(b, pos, end); !ok || n < 0 || int(n) > end-pos {
			return 0, false
		}
		pos += int(n)
		if n, pos, ok = varint2(b, pos, end); !ok || n < -1 || int(n) > end-pos {
			return 0, false
		}
		pos += max(int(n), 0)
	}
	return pos, pos == end
}

// varint2 reads a Kafka varint of one or two bytes from b[pos:end] (false
// for a longer or cut one: readVarint decides those).
func varint2(b []byte, pos, end int) (int32, int, bool) {
	if pos >= end {
		return 0, pos, false
	}
	u := uint32(b[pos])
	if u >= 0x80 {
		if pos+1 >= end || b[pos+1] >= 0x80 {
			return 0, pos, false
		}
		u = u&0x7f | uint32(b[pos+1])<<7
		pos++
	}
	return int32(u>>1) ^ -int32(u&1), pos + 1, true
}

// skipBytes skips a varint length and that many bytes within b[pos:end].
// Length -1 means null, allowed where nullable.
func (r *recordReader) skipBytes(pos, end int, i int32, field string, nullable bool) (int, error) {
	n, next, ok := readVarint(r.b, pos, end)
	switch {
	case !ok:
		return pos, r.fail(pos, i, "malformed %s length varint", field)
	case n == -1 && nullable:
		return next, nil
	case n < 0:
		return pos, r.fail(pos, i, "invalid %s length %d", field, n)
	case int(n) > end-next:
		return pos, r.fail(pos, i, "%s length %d overruns the record by %d bytes", field, n, int(n)-(end-next))
	}
	return next + int(n), nil
}

// readVarint reads a Kafka varint (zigzag, then unsigned LEB128 of at most 5
// bytes, as protobuf's sint32) from b[pos:end]. It returns the value, the
// position after it, and false if it is cut short, longer than 5 bytes or
// wider than 32 bits.
func readVarint(b []byte, pos, end int) (int32, int, bool) {
	var u uint32
	for shift := uint(0); ; shift += 7 {
		if pos >= end {
			return 0, pos, false
		}
		c := b[pos]
		pos++
		if shift == 28 {
			if c > 0x0f {
				return 0, pos, false
			}
			u |= uint32(c) << shift
			break
		}
		u |= uint32(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	return int32(u>>1) ^ -int32(u&1), pos, true
}

// readVarlong reads a Kafka varlong (zigzag, then unsigned LEB128 of at
// most 10 bytes, as protobuf's sint64) from b[pos:end].
func readVarlong(b []byte, pos, end int) (int64, int, bool) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if pos >= end {
			return 0, pos, false
		}
		c := b[pos]
		pos++
		if shift == 63 {
			if c > 1 {
				return 0, pos, false
			}
			u |= uint64(c) << shift
			break
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	return int64(u>>1) ^ -int64(u&1), pos, true
}
