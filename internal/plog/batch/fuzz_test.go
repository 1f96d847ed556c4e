package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzValidate feeds arbitrary bytes to Validate, Split and ForEachRecord:
// none may panic, hang or allocate without bound, every failure must be an
// *Error, and what Validate accepts the readers and the patches must handle.
// Each input is also tried with its magic, length and CRC made consistent,
// so that mutations reach the checks behind the CRC. The seeds, run by a
// plain go test, are valid batches of every codec and damaged ones.
func FuzzValidate(f *testing.F) {
	for _, codec := range allCodecs {
		for _, xerial := range []bool{false, true} {
			if xerial && codec != CodecSnappy {
				continue
			}
			b := Build(BuildOptions{Records: 3, KeySize: 2, ValueSize: 20, Headers: 1, Codec: codec, Xerial: xerial,
				ProducerID: 1, BaseTimestamp: 1000, TimestampStep: 1})
			f.Add(b)
			f.Add(b[:len(b)-1])                                            // truncated
			f.Add(edit(b, func(b []byte) { b[len(b)-2] ^= 0x10 }))         // damaged records, CRC mismatch
			f.Add(fixCRC(edit(b, func(b []byte) { b[len(b)-2] ^= 0x10 }))) // damaged records, good CRC
			f.Add(append(bytes.Clone(b), b...))                            // two batches
			f.Add(edit(b, func(b []byte) { SetLogAppendTime(b, 5000) }))   // patched
			f.Add(fixCRC(edit(b, func(b []byte) { b[OffsetAttributes+1] |= byte(AttrTransactional) })))
		}
	}
	f.Add(withRecords(2, rec(0), rec(1)))
	f.Add(withRecords(2, rec(0), raw(0, 0, 0x02, 0x01, 0x01, 0x04, 0x02, 'h', 0x01, 0x00, 0x01)))
	f.Add(edit(Build(BuildOptions{ProducerID: -1}), func(b []byte) { b[OffsetMagic] = 1 }))
	f.Add([]byte{})
	// The hostile batch once accepted: 110 bytes marked gzip, garbage
	// under a good CRC, claiming 2^31-1 records.
	hostile := withRecords(1<<31-1, append([]byte{0x1f, 0x8b}, bytes.Repeat([]byte{0xa5}, 47)...))
	binary.BigEndian.PutUint16(hostile[OffsetAttributes:], uint16(CodecGzip))
	f.Add(fixCRC(hostile))
	// Compressed records with framing errors behind a good CRC.
	for _, codec := range allCodecs[1:] {
		f.Add(withCodec(codec, 2, append(rec(0), rec(2)...)))              // offsetDelta gap
		f.Add(withCodec(codec, 3, append(rec(0), rec(1)...)))              // one record missing
		f.Add(withCodec(codec, 1, append(rec(0), rec(1)...)))              // one record too many
		f.Add(withCodec(codec, 1, raw(0, 0, 0, 0x01, 0x02, 'v', 0x02, 1))) // header count runs past the record
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
		if len(data) >= HeaderSize {
			fixed := bytes.Clone(data)
			fixed[OffsetMagic] = Magic
			binary.BigEndian.PutUint32(fixed[OffsetLength:], uint32(len(fixed)-LengthFieldEnd))
			check(t, fixCRC(fixed))
		}
	})
}

func check(t *testing.T, data []byte) {
	h, err := Validate(data)
	checkError(t, "Validate", err, len(data))

	var records int32
	ferr := ForEachRecord(data, func(offsetDelta int32, _ int64) bool {
		if err == nil && offsetDelta != records {
			t.Fatalf("ForEachRecord: record %d has offsetDelta %d after Validate accepted the batch", records, offsetDelta)
		}
		records++
		return true
	})
	checkError(t, "ForEachRecord", ferr, len(data))

	if err == nil {
		if parsed, _ := ParseHeader(data); parsed != h || h.Size() != len(data) {
			t.Fatalf("Validate header %+v, ParseHeader %+v, size %d", h, parsed, len(data))
		}
		if ferr != nil || records != h.NumRecords {
			t.Fatalf("Validate accepted %d records, ForEachRecord saw %d: %v", h.NumRecords, records, ferr)
		}
		patched := bytes.Clone(data)
		SetBaseOffset(patched, 1<<50)
		SetPartitionLeaderEpoch(patched, 3)
		SetLogAppendTime(patched, 42)
		if _, err := Validate(patched); err != nil {
			t.Fatalf("patched batch fails Validate: %v", err)
		}
	}

	var total int
	serr := Split(data, func(b []byte) error {
		total += len(b)
		_, err := Validate(b)
		checkError(t, "Validate in Split", err, len(b))
		checkError(t, "ForEachRecord in Split", ForEachRecord(b, func(int32, int64) bool { return true }), len(b))
		return nil
	})
	checkError(t, "Split", serr, len(data))
	if serr == nil && total != len(data) {
		t.Fatalf("Split covered %d of %d bytes without an error", total, len(data))
	}
}

func checkError(t *testing.T, what string, err error, size int) {
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v is not an *Error", what, err)
	}
	if e.Kind != KindCorrupt && e.Kind != KindInvalid || e.Pos < 0 || e.Pos > size || e.Msg == "" {
		t.Fatalf("%s: malformed error %#v for %d bytes", what, e, size)
	}
}
