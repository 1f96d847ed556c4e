package batch

import "sync"

// recordBuffers holds buffers for decompressed records: they never leave
// ForEachRecord, so they can be reused.
var recordBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer keeps the occasional huge batch from pinning its buffer.
const maxPooledBuffer = 4 << 20

// ForEachRecord calls fn with the offsetDelta and timestamp (ms) of each
// record of the whole batch b, in order, until fn returns false. It is the
// slow path behind ListOffsets by timestamp and may allocate: compressed
// records are decompressed, up to MaxDecompressedBytes.
//
// It checks the batch's framing and CRC like Validate, then that the records
// parse and that there are exactly NumRecords of them; it does not apply
// Validate's producer rules (control and transactional batches are read
// like any other). In a LogAppendTime batch every record's timestamp is the
// batch's MaxTimestamp, as in Kafka; otherwise it is BaseTimestamp plus the
// record's timestampDelta.
func ForEachRecord(b []byte, fn func(offsetDelta int32, timestamp int64) bool) error {
	h, err := checkFraming(b)
	if err != nil {
		return err
	}
	r := recordReader{b: b, pos: OffsetRecords, end: len(b)}
	if codec := h.Compression(); codec != CodecNone {
		if codec > maxCodec {
			return errorf(KindInvalid, OffsetAttributes, "unknown compression codec %d (attributes 0x%04x)", int8(codec), uint16(h.Attributes))
		}
		buf := recordBuffers.Get().(*[]byte)
		defer recordBuffers.Put(buf)
		records, err := decompress(codec, b[OffsetRecords:], *buf, MaxDecompressedBytes)
		if err != nil {
			return errorf(KindInvalid, OffsetRecords, "%s records do not decompress: %v", codec, err)
		}
		if cap(records) <= maxPooledBuffer {
			*buf = records
		}
		r = recordReader{b: records, pos: 0, end: len(records), decompressed: true}
	}
	return r.each(h.NumRecords, func(rec record) (bool, error) {
		timestamp := h.BaseTimestamp + rec.timestampDelta
		if h.LogAppendTime() {
			timestamp = h.MaxTimestamp
		}
		return fn(rec.offsetDelta, timestamp), nil
	})
}

// each parses count records and calls fn with each, until fn returns false
// or an error; the records must fill the reader exactly.
func (r *recordReader) each(count int32, fn func(record) (bool, error)) error {
	for i := int32(0); i < count; i++ {
		if r.pos == r.end {
			return r.errorAt(r.pos, "records end after %d of %d records", i, count)
		}
		rec, err := r.next(i)
		if err != nil {
			return err
		}
		if more, err := fn(rec); !more || err != nil {
			return err
		}
	}
	if r.pos != r.end {
		return r.errorAt(r.pos, "%d bytes left after the last of %d records", r.end-r.pos, count)
	}
	return nil
}
