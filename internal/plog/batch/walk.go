package batch

import (
	"fmt"
	"io"
	"math"
)

// minRecordSize is the smallest record: a length, the attributes, a zero
// timestampDelta and offsetDelta, a null key and value, no headers.
const minRecordSize = 7

// walkCompressed decompresses the records of the compressed batch b (header
// h, framing and CRC already checked) within limit bytes and walks them:
// exactly h.NumRecords records must fill the decompressed bytes, and with
// checkOffsets record i must have offsetDelta i. fn, if not nil, sees each
// record and stops the walk by returning false.
func walkCompressed(b []byte, h *Header, limit int, checkOffsets bool, fn func(record) bool) error {
	codec := h.Compression()
	if int64(h.NumRecords)*minRecordSize > int64(limit) {
		return errorf(KindInvalid, OffsetNumRecords, "record count %d cannot fit in the %d bytes %s records may decompress to",
			h.NumRecords, limit, codec)
	}
	f := acquireInflater()
	defer f.release()
	if codec == CodecSnappy {
		records, err := decodeSnappy(b[OffsetRecords:], f.snappy, limit)
		if err != nil {
			return decompressError(codec, err)
		}
		f.snappy = records[:0]
		r := recordReader{b: records, pos: 0, end: len(records), decompressed: true}
		return r.walk(h.NumRecords, checkOffsets, fn)
	}
	rd, err := f.open(codec, b[OffsetRecords:])
	if err != nil {
		return decompressError(codec, err)
	}
	s := recordStream{r: rd, buf: f.chunk[:], limit: limit, codec: codec}
	return s.walk(h.NumRecords, checkOffsets, fn)
}

func decompressError(codec Codec, err error) error {
	return errorf(KindInvalid, OffsetRecords, "%s records do not decompress: %v", codec, err)
}

// walk reads numRecords records from r and checks that they fill it.
func (r *recordReader) walk(numRecords int32, checkOffsets bool, fn func(record) bool) error {
	for i := int32(0); i < numRecords; i++ {
		if r.pos == r.end {
			return r.errorAt(r.pos, "records end after %d of %d records", i, numRecords)
		}
		rec, err := r.next(i)
		if err != nil {
			return err
		}
		if checkOffsets && rec.offsetDelta != i {
			return r.errorAt(rec.offsetDeltaPos, "record %d: offsetDelta %d, want %d", i, rec.offsetDelta, i)
		}
		if fn != nil && !fn(rec) {
			return nil
		}
	}
	if r.pos != r.end {
		return r.errorAt(r.pos, "%d bytes left after the last of %d records", r.end-r.pos, numRecords)
	}
	return nil
}

// recordStream walks records as a decompressor produces them, through a
// small buffer: it never holds more than a chunk of the records, so a batch
// that inflates to its limit costs CPU, not memory. Positions are in the
// decompressed bytes. It parses exactly what recordReader.next parses.
type recordStream struct {
	r        io.Reader
	codec    Codec
	buf      []byte
	i, n     int // buf[i:n] is read and not yet consumed
	pos      int // decompressed position of buf[i]
	produced int // bytes read from r
	limit    int
	err      error // the first read error other than io.EOF, or the limit
	eof      bool
}

// fill reads more when the buffer is consumed; false at the end or on an
// error.
func (s *recordStream) fill() bool {
	for empty := 0; s.i == s.n; empty++ {
		if s.eof || s.err != nil {
			return false
		}
		if empty == 100 {
			s.err = io.ErrNoProgress // a decoder that keeps returning nothing
			return false
		}
		m, err := s.r.Read(s.buf)
		s.i, s.n = 0, m
		s.produced += m
		if s.produced > s.limit {
			s.err = fmt.Errorf("%w: more than %d bytes", errTooBig, s.limit)
			s.n = 0
			return false
		}
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			s.err = err
		}
	}
	return true
}

func (s *recordStream) readByte() (byte, bool) {
	if s.i == s.n && !s.fill() {
		return 0, false
	}
	c := s.buf[s.i]
	s.i++
	s.pos++
	return c, true
}

// skip consumes n bytes.
func (s *recordStream) skip(n int) bool {
	for n > 0 {
		if s.i == s.n && !s.fill() {
			return false
		}
		m := min(n, s.n-s.i)
		s.i += m
		s.pos += m
		n -= m
	}
	return true
}

// varint reads a Kafka varint that must end before end (readVarint's rules).
func (s *recordStream) varint(end int) (int32, bool) {
	u, ok := s.uvarint(end, 28, 0x0f)
	return int32(uint32(u)>>1) ^ -int32(u&1), ok
}

// varlong reads a Kafka varlong that must end before end (readVarlong's
// rules).
func (s *recordStream) varlong(end int) (int64, bool) {
	u, ok := s.uvarint(end, 63, 1)
	return int64(u>>1) ^ -int64(u&1), ok
}

// uvarint reads the unsigned (zigzag-encoded) base-128 value of a varint
// or varlong: lastShift is the shift of its last possible byte, which may
// be at most lastMax.
func (s *recordStream) uvarint(end int, lastShift uint, lastMax byte) (uint64, bool) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if s.pos >= end {
			return 0, false
		}
		c, ok := s.readByte()
		if !ok {
			return 0, false
		}
		if shift == lastShift {
			if c > lastMax {
				return 0, false
			}
			return u | uint64(c)<<shift, true
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return u, true
		}
	}
}

// fail reports a malformed record i at pos, unless the stream itself failed
// (then that is the error: the records did not decompress).
func (s *recordStream) fail(pos int, i int32, format string, args ...any) error {
	if s.err != nil {
		return decompressError(s.codec, s.err)
	}
	return errorf(KindInvalid, OffsetRecords, "record %d: %s (at byte %d of the decompressed records)", i, fmt.Sprintf(format, args...), pos)
}

// next parses record i, which starts at s.pos, and moves past it.
func (s *recordStream) next(i int32) (record, error) {
	var rec record
	start := s.pos
	length, ok := s.varint(math.MaxInt)
	if !ok {
		return rec, s.fail(start, i, "malformed length varint")
	}
	if length < 0 {
		return rec, s.fail(start, i, "negative length %d", length)
	}
	end := s.pos + int(length)
	if s.pos == end {
		return rec, s.fail(s.pos, i, "attributes missing")
	}
	if !s.skip(1) { // attributes: unused in magic 2
		return rec, s.fail(start, i, "length %d runs past the end of the records", length)
	}
	fieldPos := s.pos
	if rec.timestampDelta, ok = s.varlong(end); !ok {
		return rec, s.fail(fieldPos, i, "malformed timestampDelta varlong")
	}
	rec.offsetDeltaPos = s.pos
	if rec.offsetDelta, ok = s.varint(end); !ok {
		return rec, s.fail(rec.offsetDeltaPos, i, "malformed offsetDelta varint")
	}
	if err := s.skipBytes(end, i, "key", true); err != nil {
		return rec, err
	}
	if err := s.skipBytes(end, i, "value", true); err != nil {
		return rec, err
	}
	fieldPos = s.pos
	headers, ok := s.varint(end)
	if !ok {
		return rec, s.fail(fieldPos, i, "malformed header count varint")
	}
	if headers < 0 {
		return rec, s.fail(fieldPos, i, "negative header count %d", headers)
	}
	// Each header takes at least two bytes, so this loop ends within the
	// record whatever the count claims.
	for h := int32(0); h < headers; h++ {
		if err := s.skipBytes(end, i, "header key", false); err != nil {
			return rec, err
		}
		if err := s.skipBytes(end, i, "header value", true); err != nil {
			return rec, err
		}
	}
	if s.pos != end {
		return rec, s.fail(s.pos, i, "fields end %d bytes before the record's length says", end-s.pos)
	}
	return rec, nil
}

// skipBytes skips a varint length and that many bytes, within the record
// ending at end. Length -1 means null, allowed where nullable.
func (s *recordStream) skipBytes(end int, i int32, field string, nullable bool) error {
	pos := s.pos
	n, ok := s.varint(end)
	switch {
	case !ok:
		return s.fail(pos, i, "malformed %s length varint", field)
	case n == -1 && nullable:
		return nil
	case n < 0:
		return s.fail(pos, i, "invalid %s length %d", field, n)
	case int(n) > end-s.pos:
		return s.fail(pos, i, "%s length %d overruns the record by %d bytes", field, n, int(n)-(end-s.pos))
	}
	if !s.skip(int(n)) {
		return s.fail(pos, i, "%s of %d bytes runs past the end of the records", field, n)
	}
	return nil
}

// walk reads numRecords records and checks that they end the stream;
// reading to the end also checks the codec's own checksums.
func (s *recordStream) walk(numRecords int32, checkOffsets bool, fn func(record) bool) error {
	for i := int32(0); i < numRecords; i++ {
		if s.i == s.n && !s.fill() {
			if s.err != nil {
				return decompressError(s.codec, s.err)
			}
			return errorf(KindInvalid, OffsetRecords, "records end after %d of %d records (at byte %d of the decompressed records)", i, numRecords, s.pos)
		}
		rec, err := s.next(i)
		if err != nil {
			return err
		}
		if checkOffsets && rec.offsetDelta != i {
			return errorf(KindInvalid, OffsetRecords, "record %d: offsetDelta %d, want %d (at byte %d of the decompressed records)",
				i, rec.offsetDelta, i, rec.offsetDeltaPos)
		}
		if fn != nil && !fn(rec) {
			return nil
		}
	}
	if s.i < s.n || s.fill() {
		return errorf(KindInvalid, OffsetRecords, "bytes left after the last of %d records (at byte %d of the decompressed records)", numRecords, s.pos)
	}
	if s.err != nil {
		return decompressError(s.codec, s.err)
	}
	return nil
}
