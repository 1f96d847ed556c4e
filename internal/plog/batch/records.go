package batch

// ForEachRecord calls fn with the offsetDelta and timestamp (ms) of each
// record of the whole batch b, in order, until fn returns false. It is the
// slow path behind ListOffsets by timestamp: compressed records are
// decompressed within MaxDecompressedBytes, under the same broker-wide
// bound on concurrent decompression as validation (DecompressSlots), and
// streams are walked through a small buffer, never held whole. fn runs
// while a decompression slot is held: it must not decompress itself.
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
	visit := func(rec record) bool {
		timestamp := h.BaseTimestamp + rec.timestampDelta
		if h.LogAppendTime() {
			timestamp = h.MaxTimestamp
		}
		return fn(rec.offsetDelta, timestamp)
	}
	if codec := h.Compression(); codec != CodecNone {
		if codec > maxCodec {
			return errorf(KindInvalid, OffsetAttributes, "unknown compression codec %d (attributes 0x%04x)", int8(codec), uint16(h.Attributes))
		}
		return walkCompressed(b, &h, MaxDecompressedBytes, false, visit)
	}
	r := recordReader{b: b, pos: OffsetRecords, end: len(b)}
	return r.walk(h.NumRecords, false, visit)
}
