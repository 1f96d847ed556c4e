package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// fixCRC recomputes the CRC of a batch a test has edited, so that the edit
// reaches the checks after the CRC.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[OffsetCRC:], CRC(b))
	return b
}

// withRecords returns an uncompressed batch whose records section is
// exactly records, claiming numRecords records, with length and CRC fixed.
func withRecords(numRecords int32, records ...[]byte) []byte {
	b := Build(BuildOptions{ProducerID: -1})[:HeaderSize]
	for _, r := range records {
		b = append(b, r...)
	}
	binary.BigEndian.PutUint32(b[OffsetLength:], uint32(len(b)-LengthFieldEnd))
	binary.BigEndian.PutUint32(b[OffsetNumRecords:], uint32(numRecords))
	binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], uint32(numRecords-1))
	return fixCRC(b)
}

// withCodec returns a batch of codec whose records, before compression,
// are exactly records, claiming numRecords records.
func withCodec(codec Codec, numRecords int32, records []byte) []byte {
	b := withRecords(numRecords, compress(codec, false, records))
	binary.BigEndian.PutUint16(b[OffsetAttributes:], uint16(codec))
	return fixCRC(b)
}

// rec encodes a well-formed 8-byte record: a null key, the value "v", no
// headers and the given offsetDelta (< 64, so its varint is one byte).
func rec(offsetDelta int) []byte {
	return raw(0, 0, byte(offsetDelta<<1), 0x01, 0x02, 'v', 0)
}

// raw prefixes body with its length varint.
func raw(body ...byte) []byte {
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// recordPos is where record i of a batch of rec records starts.
func recordPos(i int) int { return OffsetRecords + 8*i }

func edit(b []byte, fn func(b []byte)) []byte {
	b = bytes.Clone(b)
	fn(b)
	return b
}

func TestValidateFraming(t *testing.T) {
	good := Build(BuildOptions{Records: 3, KeySize: 4, ValueSize: 10, Headers: 1, ProducerID: -1, BaseTimestamp: 1000, TimestampStep: 1})
	putU16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	putU32 := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint32(b[off:], v) }
	}
	putU64 := func(off int, v uint64) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint64(b[off:], v) }
	}
	and := func(fns ...func([]byte)) func([]byte) {
		return func(b []byte) {
			for _, fn := range fns {
				fn(b)
			}
			fixCRC(b)
		}
	}
	goodLen := uint32(len(good) - LengthFieldEnd)

	tests := []struct {
		name  string
		batch []byte
		kind  Kind // 0: valid
		pos   int
		msg   string
	}{
		{name: "valid", batch: good},
		{name: "empty", batch: nil, kind: KindCorrupt, pos: 0, msg: "truncated header: have 0 bytes, need 61"},
		{name: "short header", batch: good[:60], kind: KindCorrupt, pos: 60, msg: "truncated header"},
		{name: "legacy magic 0", batch: edit(good, func(b []byte) { b[OffsetMagic] = 0 }), kind: KindInvalid, pos: OffsetMagic, msg: "message format v0"},
		{name: "legacy magic 1", batch: edit(good, func(b []byte) { b[OffsetMagic] = 1 }), kind: KindInvalid, pos: OffsetMagic, msg: "message format v1"},
		{name: "unknown magic", batch: edit(good, func(b []byte) { b[OffsetMagic] = 3 }), kind: KindCorrupt, pos: OffsetMagic, msg: "unknown magic 3"},
		{name: "length below minimum", batch: edit(good, putU32(OffsetLength, MinLength-1)), kind: KindCorrupt, pos: OffsetLength, msg: "batchLength 48 is below the minimum 49"},
		{name: "length negative", batch: edit(good, putU32(OffsetLength, 0xffffffff)), kind: KindCorrupt, pos: OffsetLength, msg: "below the minimum"},
		{name: "length too long", batch: edit(good, putU32(OffsetLength, goodLen+1)), kind: KindCorrupt, pos: OffsetLength, msg: "frames"},
		{name: "length too short", batch: edit(good, putU32(OffsetLength, goodLen-1)), kind: KindCorrupt, pos: OffsetLength, msg: "frames"},
		{name: "truncated batch", batch: good[:len(good)-1], kind: KindCorrupt, pos: OffsetLength, msg: "frames"},
		{name: "trailing byte", batch: append(bytes.Clone(good), 0), kind: KindCorrupt, pos: OffsetLength, msg: "frames"},
		{name: "crc field", batch: edit(good, func(b []byte) { b[OffsetCRC] ^= 1 }), kind: KindCorrupt, pos: OffsetCRC, msg: "crc mismatch: stored 0x"},
		{name: "attributes byte", batch: edit(good, func(b []byte) { b[OffsetAttributes+1] ^= 0x80 }), kind: KindCorrupt, pos: OffsetCRC, msg: "crc mismatch"},
		{name: "maxTimestamp byte", batch: edit(good, func(b []byte) { b[OffsetMaxTimestamp] ^= 1 }), kind: KindCorrupt, pos: OffsetCRC, msg: "crc mismatch"},
		{name: "record byte", batch: edit(good, func(b []byte) { b[len(b)-1] ^= 1 }), kind: KindCorrupt, pos: OffsetCRC, msg: "crc mismatch"},
		{name: "baseOffset not covered", batch: edit(good, putU64(OffsetBaseOffset, 12345))},
		{name: "leader epoch not covered", batch: edit(good, putU32(OffsetPartitionLeaderEpoch, 7))},
		{name: "LogAppendTime allowed", batch: edit(good, and(putU16(OffsetAttributes, uint16(AttrLogAppendTime))))},
		{name: "unknown codec", batch: edit(good, and(putU16(OffsetAttributes, 5))), kind: KindInvalid, pos: OffsetAttributes, msg: "unknown compression codec 5"},
		{name: "control", batch: edit(good, and(putU16(OffsetAttributes, uint16(AttrControl)))), kind: KindInvalid, pos: OffsetAttributes, msg: "control batch"},
		{name: "transactional without producer id", batch: edit(good, and(putU16(OffsetAttributes, uint16(AttrTransactional)))), kind: KindInvalid, pos: OffsetProducerID, msg: "transactional batch without a producer id"},
		{name: "delete horizon", batch: edit(good, and(putU16(OffsetAttributes, uint16(AttrDeleteHorizon)))), kind: KindInvalid, pos: OffsetAttributes, msg: "delete horizon"},
		{name: "zero records", batch: edit(good, and(putU32(OffsetNumRecords, 0), putU32(OffsetLastOffsetDelta, 0xffffffff))), kind: KindInvalid, pos: OffsetNumRecords, msg: "record count 0"},
		{name: "negative records", batch: edit(good, and(putU32(OffsetNumRecords, 0xffffffff))), kind: KindInvalid, pos: OffsetNumRecords, msg: "record count -1"},
		{name: "lastOffsetDelta", batch: edit(good, and(putU32(OffsetLastOffsetDelta, 5))), kind: KindInvalid, pos: OffsetLastOffsetDelta, msg: "lastOffsetDelta 5 does not match record count 3 (want 2)"},
		{name: "idempotent without sequence", batch: edit(good, and(putU64(OffsetProducerID, 7), putU32(OffsetBaseSequence, 0xffffffff))), kind: KindInvalid, pos: OffsetBaseSequence, msg: "baseSequence -1 is negative for producerId 7"},
		{name: "idempotent", batch: Build(BuildOptions{Records: 2, ProducerID: 7, ProducerEpoch: 1, BaseSequence: 40})},

		// Records, under a good CRC: always KindInvalid.
		{name: "records ok", batch: withRecords(3, rec(0), rec(1), rec(2))},
		{name: "fewer records than count", batch: withRecords(4, rec(0), rec(1), rec(2)), kind: KindInvalid, pos: recordPos(3), msg: "records end after 3 of 4 records"},
		{name: "more records than count", batch: withRecords(2, rec(0), rec(1), rec(2)), kind: KindInvalid, pos: recordPos(2), msg: "8 bytes left after the last of 2 records"},
		{name: "offsetDelta", batch: withRecords(3, rec(0), rec(5), rec(2)), kind: KindInvalid, pos: recordPos(1) + 3, msg: "record 1: offsetDelta 5, want 1"},
		{name: "negative length", batch: withRecords(2, rec(0), []byte{0x03}, rec(1)[1:]), kind: KindInvalid, pos: recordPos(1), msg: "record 1: negative length -2"},
		{name: "length overruns", batch: withRecords(1, []byte{0x12}, rec(0)[1:]), kind: KindInvalid, pos: recordPos(0), msg: "record 0: length 9 overruns the records by 2 bytes"},
		{name: "length varint too long", batch: withRecords(1, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, rec(0)), kind: KindInvalid, pos: recordPos(0), msg: "malformed length varint"},
		{name: "empty record", batch: withRecords(1, []byte{0x00}), kind: KindInvalid, pos: recordPos(0) + 1, msg: "attributes missing"},
		{name: "timestampDelta cut", batch: withRecords(1, raw(0, 0x80)), kind: KindInvalid, pos: recordPos(0) + 2, msg: "malformed timestampDelta varlong"},
		{name: "offsetDelta cut", batch: withRecords(1, raw(0, 0)), kind: KindInvalid, pos: recordPos(0) + 3, msg: "malformed offsetDelta varint"},
		{name: "key length -2", batch: withRecords(1, raw(0, 0, 0, 0x03, 0x02, 'v', 0)), kind: KindInvalid, pos: recordPos(0) + 4, msg: "invalid key length -2"},
		{name: "key overruns record", batch: withRecords(1, raw(0, 0, 0, 0x0a, 'k', 'k'), rec(0)), kind: KindInvalid, pos: recordPos(0) + 4, msg: "key length 5 overruns the record by 3 bytes"},
		{name: "value cut", batch: withRecords(1, raw(0, 0, 0, 0x01)), kind: KindInvalid, pos: recordPos(0) + 5, msg: "malformed value length varint"},
		{name: "null value ok", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x01, 0))},
		{name: "header count negative", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x01, 0x01)), kind: KindInvalid, pos: recordPos(0) + 6, msg: "negative header count -1"},
		{name: "header ok", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x01, 0x02, 0x02, 'h', 0x01))},
		{name: "header null key", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01)), kind: KindInvalid, pos: recordPos(0) + 7, msg: "invalid header key length -1"},
		{name: "header count overruns", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x01, 0x04, 0x02, 'h', 0x01)), kind: KindInvalid, pos: recordPos(0) + 10, msg: "malformed header key length varint"},
		{name: "slack in record", batch: withRecords(1, raw(0, 0, 0, 0x01, 0x02, 'v', 0, 0xee)), kind: KindInvalid, pos: recordPos(0) + 8, msg: "fields end 1 bytes before the record's length says"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Validate(tt.batch)
			if tt.kind == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if want, _ := ParseHeader(tt.batch); h != want {
					t.Fatalf("header %+v, want %+v", h, want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate: %v, want an *Error", err)
			}
			if e.Kind != tt.kind || e.Pos != tt.pos || !strings.Contains(e.Msg, tt.msg) {
				t.Fatalf("Validate: %v (kind %v, pos %d), want kind %v at %d containing %q", err, e.Kind, e.Pos, tt.kind, tt.pos, tt.msg)
			}
			sentinel := map[Kind]error{KindCorrupt: ErrCorrupt, KindInvalid: ErrInvalidRecord}
			if !errors.Is(err, sentinel[tt.kind]) {
				t.Fatalf("errors.Is(%v, %v) = false", err, sentinel[tt.kind])
			}
			for kind, other := range sentinel {
				if kind != tt.kind && errors.Is(err, other) {
					t.Fatalf("errors.Is(%v, %v) = true", err, other)
				}
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	b := Build(BuildOptions{ProducerID: -1})
	stored := binary.BigEndian.Uint32(b[OffsetCRC:])
	b[OffsetCRC] ^= 0xff
	_, err := Validate(b)
	want := "corrupt record batch at byte 17: crc mismatch: stored 0x" // then the damaged value
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "computed 0x"+hex32(stored)) {
		t.Fatalf("error %q, want %q...computed 0x%s", err, want, hex32(stored))
	}
}

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	var s [8]byte
	for i := 7; i >= 0; i-- {
		s[i] = digits[v&0xf]
		v >>= 4
	}
	return string(s[:])
}

func TestValidateDecompressesRecords(t *testing.T) {
	// Compressed records are decompressed and walked on append, as Kafka's
	// LogValidator does: garbage under a good CRC is INVALID_RECORD, for
	// Validate as for ForEachRecord.
	for _, codec := range allCodecs[1:] {
		b := Build(BuildOptions{Records: 2, Codec: codec, ProducerID: -1})
		b = append(b[:HeaderSize:HeaderSize], "not compressed at all"...)
		binary.BigEndian.PutUint32(b[OffsetLength:], uint32(len(b)-LengthFieldEnd))
		fixCRC(b)
		for name, err := range map[string]error{
			"Validate":      second(Validate(b)),
			"ForEachRecord": ForEachRecord(b, func(int32, int64) bool { return true }),
		} {
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindInvalid || e.Pos != OffsetRecords {
				t.Fatalf("%v: %s: %v, want KindInvalid at %d", codec, name, err, OffsetRecords)
			}
		}
	}
}

// TestValidateCompressedRecordCount: the header's record count and
// lastOffsetDelta must match the compressed records, and the records' own
// framing must hold, for every codec.
func TestValidateCompressedRecordCount(t *testing.T) {
	for _, codec := range allCodecs[1:] {
		for _, tc := range []struct {
			name string
			edit func(b []byte) []byte
			want string
		}{
			{"claims 2^31-1 records", func(b []byte) []byte {
				binary.BigEndian.PutUint32(b[OffsetNumRecords:], math.MaxInt32)
				binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], math.MaxInt32-1)
				return b
			}, "cannot fit"},
			{"claims one more record", func(b []byte) []byte {
				binary.BigEndian.PutUint32(b[OffsetNumRecords:], 4)
				binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], 3)
				return b
			}, "records end after 3 of 4 records"},
			{"claims one record less", func(b []byte) []byte {
				binary.BigEndian.PutUint32(b[OffsetNumRecords:], 2)
				binary.BigEndian.PutUint32(b[OffsetLastOffsetDelta:], 1)
				return b
			}, "left after the last of 2 records"},
		} {
			b := Build(BuildOptions{Records: 3, ValueSize: 10, Codec: codec, ProducerID: -1})
			b = fixCRC(tc.edit(b))
			_, err := Validate(b)
			if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v %s: %v, want INVALID_RECORD with %q", codec, tc.name, err, tc.want)
			}
		}
		// Records whose offsetDeltas are not 0, 1, 2: built with gaps.
		records := append(append(rec(0), rec(2)...), rec(3)...)
		b := withCodec(codec, 3, records)
		if _, err := Validate(b); !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "offsetDelta 2, want 1") {
			t.Errorf("%v: offsetDelta gap: %v", codec, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestParseHeader(t *testing.T) {
	b := Build(BuildOptions{
		Records: 5, Codec: CodecLZ4, BaseTimestamp: 1_700_000_000_000, TimestampStep: 10,
		ProducerID: 42, ProducerEpoch: 3, BaseSequence: 100, BaseOffset: 9, PartitionLeaderEpoch: 4,
	})
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Header{
		BaseOffset: 9, Length: int32(len(b) - 12), PartitionLeaderEpoch: 4, Magic: 2, CRC: CRC(b),
		Attributes: int16(CodecLZ4), LastOffsetDelta: 4, BaseTimestamp: 1_700_000_000_000,
		MaxTimestamp: 1_700_000_000_040, ProducerID: 42, ProducerEpoch: 3, BaseSequence: 100, NumRecords: 5,
	}
	if h != want {
		t.Fatalf("header\n %+v, want\n %+v", h, want)
	}
	if h.Compression() != CodecLZ4 || h.LogAppendTime() || h.Transactional() || h.Control() {
		t.Fatalf("attribute helpers wrong for %+v", h)
	}
	if h.Size() != len(b) || h.LastOffset() != 13 {
		t.Fatalf("Size %d LastOffset %d, want %d and 13", h.Size(), h.LastOffset(), len(b))
	}
	h.Attributes = AttrLogAppendTime | AttrTransactional | AttrControl | int16(CodecZstd)
	if h.Compression() != CodecZstd || !h.LogAppendTime() || !h.Transactional() || !h.Control() {
		t.Fatalf("attribute helpers wrong for %+v", h)
	}
}

func TestBuildNonIdempotent(t *testing.T) {
	h, err := Validate(Build(BuildOptions{Records: 2, ProducerID: -1, ProducerEpoch: 5, BaseSequence: 5}))
	if err != nil {
		t.Fatal(err)
	}
	if h.ProducerID != -1 || h.ProducerEpoch != -1 || h.BaseSequence != -1 {
		t.Fatalf("producer fields %d/%d/%d, want -1/-1/-1", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
}

func TestPatching(t *testing.T) {
	for _, codec := range allCodecs {
		b := Build(BuildOptions{Records: 4, ValueSize: 100, Codec: codec, ProducerID: 1, BaseTimestamp: 1000, TimestampStep: 5})
		crc := binary.BigEndian.Uint32(b[OffsetCRC:])

		SetBaseOffset(b, 1<<40+7)
		SetPartitionLeaderEpoch(b, 12)
		h, err := Validate(b)
		if err != nil {
			t.Fatalf("%v: after SetBaseOffset: %v", codec, err)
		}
		if h.BaseOffset != 1<<40+7 || h.LastOffset() != 1<<40+10 || h.PartitionLeaderEpoch != 12 || h.CRC != crc {
			t.Fatalf("%v: patched header %+v", codec, h)
		}

		SetLogAppendTime(b, 99_000)
		h, err = Validate(b)
		if err != nil {
			t.Fatalf("%v: after SetLogAppendTime: %v", codec, err)
		}
		if !h.LogAppendTime() || h.MaxTimestamp != 99_000 || h.BaseTimestamp != 1000 || h.Compression() != codec || h.CRC == crc {
			t.Fatalf("%v: LogAppendTime header %+v", codec, h)
		}
		var timestamps []int64
		if err := ForEachRecord(b, func(_ int32, ts int64) bool { timestamps = append(timestamps, ts); return true }); err != nil {
			t.Fatal(err)
		}
		if len(timestamps) != 4 || timestamps[0] != 99_000 || timestamps[3] != 99_000 {
			t.Fatalf("%v: LogAppendTime record timestamps %v, want 4 × 99000", codec, timestamps)
		}
	}
}

func TestForEachRecord(t *testing.T) {
	for _, codec := range allCodecs {
		for _, xerial := range []bool{false, true} {
			if xerial && codec != CodecSnappy {
				continue
			}
			// Enough data for several xerial blocks and lz4 blocks.
			b := Build(BuildOptions{Records: 300, KeySize: 16, ValueSize: 1000, Headers: 2, Codec: codec, Xerial: xerial,
				ProducerID: -1, BaseTimestamp: 5000, TimestampStep: 3})
			if _, err := Validate(b); err != nil {
				t.Fatalf("%v: %v", codec, err)
			}
			var n int32
			err := ForEachRecord(b, func(offsetDelta int32, ts int64) bool {
				if offsetDelta != n || ts != 5000+3*int64(n) {
					t.Fatalf("%v: record %d: offsetDelta %d timestamp %d", codec, n, offsetDelta, ts)
				}
				n++
				return true
			})
			if err != nil || n != 300 {
				t.Fatalf("%v xerial=%v: ForEachRecord: %v after %d records", codec, xerial, err, n)
			}
			n = 0
			if err := ForEachRecord(b, func(int32, int64) bool { n++; return n < 10 }); err != nil || n != 10 {
				t.Fatalf("%v: stopping early: %v after %d records", codec, err, n)
			}
		}
	}
}

func TestDecompressLimit(t *testing.T) {
	// 1 MiB of records compresses to a few KiB; with a 64 KiB limit every
	// codec must refuse it, and accept it with a limit of its exact size.
	opts := BuildOptions{Records: 1024, ValueSize: 1000, ProducerID: -1}
	size := len(Build(opts)) - HeaderSize
	for _, codec := range allCodecs[1:] {
		for _, xerial := range []bool{false, true} {
			if xerial && codec != CodecSnappy {
				continue
			}
			opts.Codec, opts.Xerial = codec, xerial
			b := Build(opts)
			if _, err := ValidateWithin(b, 64<<10); !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "exceed") {
				t.Fatalf("%v xerial=%v: with a small limit: %v, want a size error", codec, xerial, err)
			}
			if _, err := ValidateWithin(b, size); err != nil {
				t.Fatalf("%v xerial=%v: at the limit: %v", codec, xerial, err)
			}
		}
	}
}

func TestForEachRecordRejectsBombs(t *testing.T) {
	// A raw snappy block that claims to decode to 1 GiB: refused from its
	// header, before anything is allocated. So is a xerial block claiming
	// it, and a zstd frame declaring it.
	claim := binary.AppendUvarint(nil, 1<<30)
	xerial := append(bytes.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)
	xerial = binary.BigEndian.AppendUint32(xerial, uint32(len(claim)+1))
	xerial = append(append(xerial, claim...), 0)
	zstdFrame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xa0} // magic; descriptor: single segment, 4-byte content size
	zstdFrame = binary.LittleEndian.AppendUint32(zstdFrame, 1<<30)
	zstdFrame = append(zstdFrame, 0x01, 0x00, 0x00) // a last, empty raw block
	for _, tt := range []struct {
		codec   Codec
		payload []byte
	}{
		{CodecSnappy, append(claim, 0)},
		{CodecSnappy, xerial},
		{CodecZstd, zstdFrame},
	} {
		b := Build(BuildOptions{Codec: tt.codec, ProducerID: -1})[:HeaderSize]
		b = append(b, tt.payload...)
		binary.BigEndian.PutUint32(b[OffsetLength:], uint32(len(b)-LengthFieldEnd))
		fixCRC(b)
		err := ForEachRecord(b, func(int32, int64) bool { return true })
		if !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "exceed") {
			t.Fatalf("%v: ForEachRecord: %v, want a size error", tt.codec, err)
		}
	}
}

func TestSplit(t *testing.T) {
	var set []byte
	var want [][]byte
	for i, codec := range allCodecs {
		b := Build(BuildOptions{Records: i + 1, ValueSize: 10 * i, Codec: codec, ProducerID: -1})
		want = append(want, b)
		set = append(set, b...)
	}
	var got [][]byte
	err := Split(set, func(b []byte) error {
		if cap(b) != len(b) {
			t.Fatalf("batch slice has spare capacity %d", cap(b)-len(b))
		}
		if _, err := Validate(b); err != nil {
			return err
		}
		got = append(got, b)
		return nil
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("Split: %v, %d batches, want %d", err, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if err := Split(nil, func([]byte) error { t.Fatal("called on empty"); return nil }); err != nil {
		t.Fatal(err)
	}

	last := len(set) - len(want[len(want)-1])
	for _, tt := range []struct {
		name string
		set  []byte
		pos  int
		msg  string
	}{
		{"truncated trailing batch", set[:len(set)-1], last + OffsetLength, "truncated batch"},
		{"trailing length cut", set[:last+5], last, "truncated batch: 5 bytes left"},
		{"length below minimum", edit(set, func(b []byte) { binary.BigEndian.PutUint32(b[last+OffsetLength:], 3) }), last + OffsetLength, "below the minimum"},
	} {
		var calls int
		err := Split(tt.set, func([]byte) error { calls++; return nil })
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindCorrupt || e.Pos != tt.pos || !strings.Contains(e.Msg, tt.msg) {
			t.Fatalf("%s: %v, want KindCorrupt at %d containing %q", tt.name, err, tt.pos, tt.msg)
		}
		if calls != len(want)-1 {
			t.Fatalf("%s: fn called %d times, want %d", tt.name, calls, len(want)-1)
		}
	}

	stop := errors.New("stop")
	if err := Split(set, func([]byte) error { return stop }); err != stop {
		t.Fatalf("Split returned %v, want fn's error", err)
	}
}

func TestNoAllocations(t *testing.T) {
	b := Build(BuildOptions{Records: 100, KeySize: 8, ValueSize: 1024, Headers: 1, ProducerID: 3})
	set := append(bytes.Clone(b), b...)
	countBatches := func([]byte) error { return nil }
	for name, fn := range map[string]func(){
		"Validate":    func() { _, _ = Validate(b) },
		"ParseHeader": func() { _, _ = ParseHeader(b) },
		"SetBaseOffset": func() {
			SetBaseOffset(b, 77)
		},
		"SetPartitionLeaderEpoch": func() { SetPartitionLeaderEpoch(b, 2) },
		"SetLogAppendTime":        func() { SetLogAppendTime(b, 1234) },
		"CRC":                     func() { _ = CRC(b) },
		"Split":                   func() { _ = Split(set, countBatches) },
	} {
		if allocs := testing.AllocsPerRun(100, fn); allocs != 0 {
			t.Errorf("%s allocates %.1f times per call", name, allocs)
		}
	}
	if _, err := Validate(b); err != nil {
		t.Fatal(err) // the patches above must leave b valid
	}
}

func TestVarints(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, -64, 64, 1 << 20, -(1 << 27), 1<<31 - 1, -1 << 31} {
		enc := binary.AppendVarint(nil, v)
		got, pos, ok := readVarint(enc, 0, len(enc))
		if !ok || int64(got) != v || pos != len(enc) {
			t.Errorf("readVarint(% x) = %d, %d, %v; want %d", enc, got, pos, ok, v)
		}
		if _, _, ok := readVarint(enc, 0, len(enc)-1); ok {
			t.Errorf("readVarint accepted % x cut short", enc)
		}
	}
	for _, v := range []int64{0, -1, 1 << 40, 1<<63 - 1, -1 << 63} {
		enc := binary.AppendVarint(nil, v)
		got, pos, ok := readVarlong(enc, 0, len(enc))
		if !ok || got != v || pos != len(enc) {
			t.Errorf("readVarlong(% x) = %d, %d, %v; want %d", enc, got, pos, ok, v)
		}
	}
	for _, enc := range [][]byte{
		binary.AppendVarint(nil, 1<<31),      // wider than 32 bits
		binary.AppendVarint(nil, -1<<31-1),   // wider than 32 bits
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, // six bytes
	} {
		if v, _, ok := readVarint(enc, 0, len(enc)); ok {
			t.Errorf("readVarint accepted % x as %d", enc, v)
		}
	}
	for _, enc := range [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},       // wider than 64 bits
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, // eleven bytes
	} {
		if v, _, ok := readVarlong(enc, 0, len(enc)); ok {
			t.Errorf("readVarlong accepted % x as %d", enc, v)
		}
	}
}

// TestBuildRecords: the broker's own batches validate, and ForEachKeyValue
// gives back every key and value, null and empty told apart.
func TestBuildRecords(t *testing.T) {
	in := []KeyValue{{Key: []byte("k0"), Value: []byte("v0")}, {Key: []byte("k1"), Value: nil}, {Key: nil, Value: []byte{}}}
	b := BuildRecords(in, 42, 1700000000000)
	h, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 42 || h.NumRecords != 3 || h.ProducerID != -1 || h.BaseTimestamp != 1700000000000 {
		t.Fatalf("header %+v", h)
	}
	var got []KeyValue
	if err := ForEachKeyValue(b, func(delta int32, k, v []byte) error {
		if int(delta) != len(got) {
			t.Fatalf("offsetDelta %d for record %d", delta, len(got))
		}
		got = append(got, KeyValue{k, v})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if (got[i].Key == nil) != (in[i].Key == nil) || (got[i].Value == nil) != (in[i].Value == nil) ||
			string(got[i].Key) != string(in[i].Key) || string(got[i].Value) != string(in[i].Value) {
			t.Fatalf("record %d: got %q/%q, want %q/%q", i, got[i].Key, got[i].Value, in[i].Key, in[i].Value)
		}
	}
	b[len(b)-1] ^= 1
	if err := ForEachKeyValue(b, func(int32, []byte, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped bit: %v", err)
	}
}
