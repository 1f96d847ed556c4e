package batch

import (
	"fmt"
	"testing"
)

// BenchmarkValidate: the append hot path, 100 records of 1 KiB values,
// uncompressed.
func BenchmarkValidate(b *testing.B) {
	data := Build(BuildOptions{Records: 100, KeySize: 16, ValueSize: 1024, ProducerID: 1, BaseTimestamp: 1})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Validate(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForEachRecord: the ListOffsets-by-timestamp slow path, per codec.
// The records (a repeating pattern) compress very well.
func BenchmarkForEachRecord(b *testing.B) {
	for _, codec := range allCodecs {
		b.Run(fmt.Sprint(codec), func(b *testing.B) {
			opts := BuildOptions{Records: 100, KeySize: 16, ValueSize: 1024, Codec: codec, ProducerID: 1, BaseTimestamp: 1}
			data := Build(opts)
			opts.Codec = CodecNone
			b.SetBytes(int64(len(Build(opts)))) // MB/s of uncompressed records
			b.ReportAllocs()
			for b.Loop() {
				if err := ForEachRecord(data, func(int32, int64) bool { return true }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
