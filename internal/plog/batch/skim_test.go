package batch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// walkRecords is checkRecords without the skim: every record through next
// (recordReader.walk, the path of compressed records), the reference the
// skim must agree with.
func walkRecords(b []byte, numRecords int32) error {
	r := recordReader{b: b, pos: OffsetRecords, end: len(b)}
	return r.walk(numRecords, true, nil)
}

// TestSkimAgreesWithNext: checkRecords (skim first) accepts exactly what the
// walk through next accepts and fails with the same error, on valid batches
// of many shapes (long varints, null keys, headers) and on 20,000
// deterministic mutations of them (bytes changed, dropped, inserted).
func TestSkimAgreesWithNext(t *testing.T) {
	shapes := []BuildOptions{
		{Records: 50, ValueSize: 100},
		{Records: 20, KeySize: 16, ValueSize: 1024, Headers: 2},
		{Records: 3, KeySize: 5000, ValueSize: 9000, Headers: 1}, // three-byte varints: next's
		{Records: 200, KeySize: 0, ValueSize: 0},
		{Records: 70, KeySize: 1, ValueSize: 60, Headers: 70},
	}
	rng := rand.New(rand.NewPCG(12, 3))
	var batches [][]byte
	for _, o := range shapes {
		o.ProducerID, o.BaseTimestamp, o.TimestampStep = 1, 1700000000000, 3
		b := Build(o)
		if err := checkRecords(b, int32(o.Records)); err != nil {
			t.Fatalf("%+v: valid batch refused: %v", o, err)
		}
		batches = append(batches, b)
	}
	skimmed := 0
	for trial := range 20000 {
		src := batches[trial%len(batches)]
		b := bytes.Clone(src)
		pos := OffsetRecords + rng.IntN(len(b)-OffsetRecords)
		switch trial % 3 {
		case 0:
			b[pos] = byte(rng.Uint32())
		case 1:
			b = append(b[:pos], b[pos+1:]...)
		case 2:
			b = append(b[:pos], append([]byte{byte(rng.Uint32())}, b[pos:]...)...)
		}
		h, _ := ParseHeader(src)
		got, want := checkRecords(b, h.NumRecords), walkRecords(b, h.NumRecords)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("trial %d (byte %d): checkRecords says %v, the walk through next %v", trial, pos, got, want)
		}
		if _, ok := skimRecord(b, OffsetRecords, len(b), 0); ok {
			skimmed++
		}
	}
	if skimmed == 0 {
		t.Fatal("the skim accepted no first record: it is not being exercised")
	}
}

// BenchmarkCheckRecords: the uncompressed append path's record walk, with
// the skim and through next alone (the walk before issue 12's skim).
func BenchmarkCheckRecords(b *testing.B) {
	for _, size := range []int{128, 1024} {
		data := Build(BuildOptions{Records: (256 << 10) / size, ValueSize: size, ProducerID: 1, BaseTimestamp: 1700000000000})
		h, _ := ParseHeader(data)
		for _, walk := range []struct {
			name string
			fn   func([]byte, int32) error
		}{{"skim", checkRecords}, {"next", walkRecords}} {
			b.Run(fmt.Sprintf("value=%d/%s", size, walk.name), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := walk.fn(data, h.NumRecords); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
