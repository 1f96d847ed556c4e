package batch

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
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

// textRecords returns n records of valueSize bytes of text: words drawn at
// random from a vocabulary of 512, like log lines (zstd compresses it about
// 3x, lz4 2x), as producers send them before compression.
func textRecords(n, valueSize int) []byte {
	rng := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng }
	words := make([][]byte, 512)
	for i := range words {
		w := make([]byte, 3+next()%8)
		for j := range w {
			w[j] = 'a' + byte(next()%26)
		}
		words[i] = w
	}
	var records, body []byte
	for i := range n {
		body = append(body[:0], 0)
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, -1)
		body = binary.AppendVarint(body, int64(valueSize))
		value := len(body)
		for len(body)-value < valueSize {
			body = append(body, words[next()%uint64(len(words))]...)
			body = append(body, ' ')
		}
		body = append(body[:value+valueSize], 0)
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}
	return records
}

// BenchmarkValidateCompressed: the cost of validating a produced batch
// (decompress and walk every record) per codec, for 100 records of 1 KiB of
// text. Reported per byte of compressed input (what the producer sent) and
// per byte of records, and as core-seconds per GB of records.
func BenchmarkValidateCompressed(b *testing.B) {
	const n, size = 100, 1024
	records := textRecords(n, size)
	for _, codec := range allCodecs {
		b.Run(fmt.Sprint(codec), func(b *testing.B) {
			data := withCodec(codec, n, records)
			if _, err := Validate(data); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if _, err := Validate(data); err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns/float64(len(data)), "ns/input-byte")
			b.ReportMetric(ns/float64(len(records)), "ns/record-byte")
			b.ReportMetric(ns/float64(len(records)), "core-s/GB-records") // ns per byte = s per GB
		})
	}
}
