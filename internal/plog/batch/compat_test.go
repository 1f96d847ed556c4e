package batch_test

// Compatibility with a real client library: franz-go decodes what Build
// makes (and what the broker's patches make of it), and Validate and
// ForEachRecord accept what franz-go makes, both by hand with kmsg and from
// a real producer.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

var codecs = []batch.Codec{batch.CodecNone, batch.CodecGzip, batch.CodecSnappy, batch.CodecLZ4, batch.CodecZstd}

// pattern is Build's fill: size bytes seeded by seed.
func pattern(seed, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = 'a' + byte((seed+j)%26)
	}
	return b
}

// TestBuildDecodesWithKmsg parses Build's output field by field with
// franz-go's kmsg, decompressing with kgo's decompressor, and checks the
// CRC the way franz-go's consumer does.
func TestBuildDecodesWithKmsg(t *testing.T) {
	crc32c := crc32.MakeTable(crc32.Castagnoli)
	for _, codec := range codecs {
		for _, xerial := range []bool{false, true} {
			if xerial && codec != batch.CodecSnappy {
				continue
			}
			const n = 50
			opts := batch.BuildOptions{Records: n, KeySize: 7, ValueSize: 900, Headers: 2, Codec: codec, Xerial: xerial,
				BaseTimestamp: 1_700_000_000_000, TimestampStep: 2, ProducerID: 77, ProducerEpoch: 2, BaseSequence: 1000}
			b := batch.Build(opts)

			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(b); err != nil {
				t.Fatalf("%v: kmsg ReadFrom: %v", codec, err)
			}
			if got := int32(crc32.Checksum(b[21:], crc32c)); got != rb.CRC {
				t.Fatalf("%v: crc %x, kmsg read %x", codec, got, rb.CRC)
			}
			if rb.Magic != 2 || int(rb.Length) != len(b)-12 || rb.Attributes != int16(codec) || rb.LastOffsetDelta != n-1 ||
				rb.FirstTimestamp != opts.BaseTimestamp || rb.MaxTimestamp != opts.BaseTimestamp+2*(n-1) ||
				rb.ProducerID != 77 || rb.ProducerEpoch != 2 || rb.FirstSequence != 1000 || rb.NumRecords != n {
				t.Fatalf("%v: kmsg header %+v", codec, rb)
			}
			records, err := kgo.DefaultDecompressor().Decompress(rb.Records, kgo.CompressionCodecType(codec))
			if err != nil {
				t.Fatalf("%v xerial=%v: kgo Decompress: %v", codec, xerial, err)
			}
			for i := range n {
				var r kmsg.Record
				if err := r.ReadFrom(records); err != nil {
					t.Fatalf("%v: record %d: kmsg ReadFrom: %v", codec, i, err)
				}
				if r.OffsetDelta != int32(i) || r.TimestampDelta64 != int64(2*i) ||
					!bytes.Equal(r.Key, pattern(i, 7)) || !bytes.Equal(r.Value, pattern(i+1, 900)) || len(r.Headers) != 2 ||
					r.Headers[1].Key != string(pattern(1, 4)) || !bytes.Equal(r.Headers[1].Value, pattern(i+1, 8)) {
					t.Fatalf("%v: record %d decoded as %+v", codec, i, r)
				}
				size := len(binary.AppendVarint(nil, int64(r.Length))) + int(r.Length)
				records = records[size:]
			}
			if len(records) != 0 {
				t.Fatalf("%v: %d bytes after the records", codec, len(records))
			}
		}
	}
}

// TestConsumerReadsPatchedBatches feeds patched batches of every codec, back
// to back, through franz-go's consumer decoding (ProcessFetchPartition), as
// a fetch response would carry them.
func TestConsumerReadsPatchedBatches(t *testing.T) {
	var fetched []byte
	offset := int64(100)
	for i, codec := range codecs {
		b := batch.Build(batch.BuildOptions{Records: 3, KeySize: 3, ValueSize: 50, Codec: codec, Xerial: i%2 == 0,
			BaseTimestamp: 5000, TimestampStep: 1, ProducerID: -1})
		batch.SetBaseOffset(b, offset)
		batch.SetPartitionLeaderEpoch(b, 9)
		if codec == batch.CodecLZ4 {
			batch.SetLogAppendTime(b, 777_000)
		}
		fetched = append(fetched, b...)
		offset += 3
	}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t"},
		&kmsg.FetchResponseTopicPartition{RecordBatches: fetched, HighWatermark: offset}, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("franz-go consumer: %v", fp.Err)
	}
	if len(fp.Records) != 3*len(codecs) {
		t.Fatalf("franz-go consumer read %d records, want %d", len(fp.Records), 3*len(codecs))
	}
	for i, r := range fp.Records {
		codec := codecs[i/3]
		wantTS := int64(5000 + i%3)
		if codec == batch.CodecLZ4 {
			wantTS = 777_000
		}
		if r.Offset != int64(100+i) || r.LeaderEpoch != 9 || r.Timestamp.UnixMilli() != wantTS ||
			r.Attrs.CompressionType() != uint8(codec) || r.ProducerID != -1 ||
			!bytes.Equal(r.Key, pattern(i%3, 3)) || !bytes.Equal(r.Value, pattern(i%3+1, 50)) {
			t.Fatalf("record %d (%v): offset %d epoch %d ts %d attrs %v key %q", i, codec, r.Offset, r.LeaderEpoch,
				r.Timestamp.UnixMilli(), r.Attrs, r.Key)
		}
	}
}

// TestValidateKmsgBatches builds batches with kmsg and kgo's compressor,
// computing the CRC as franz-go's producer does, and checks that Validate and
// ForEachRecord accept them.
func TestValidateKmsgBatches(t *testing.T) {
	crc32c := crc32.MakeTable(crc32.Castagnoli)
	kgoCodecs := map[batch.Codec]kgo.CompressionCodec{
		batch.CodecGzip: kgo.GzipCompression(), batch.CodecSnappy: kgo.SnappyCompression(),
		batch.CodecLZ4: kgo.Lz4Compression(), batch.CodecZstd: kgo.ZstdCompression(),
	}
	for _, codec := range codecs {
		const n = 20
		var records []byte
		for i := range n {
			r := kmsg.Record{TimestampDelta64: int64(10 * i), OffsetDelta: int32(i), Key: []byte(fmt.Sprint("k", i)),
				Value: bytes.Repeat([]byte{'v'}, 100+i), Headers: []kmsg.Header{{Key: "h", Value: nil}}}
			body := r.AppendTo(nil)[1:] // Length 0 encodes as one byte; the rest is the body
			r.Length = int32(len(body))
			records = r.AppendTo(records)
		}
		if codec != batch.CodecNone {
			compressor, err := kgo.DefaultCompressor(kgoCodecs[codec])
			if err != nil {
				t.Fatal(err)
			}
			compressed, used := compressor.Compress(new(bytes.Buffer), records)
			if used != kgo.CompressionCodecType(codec) {
				t.Fatalf("kgo compressed with %v, want %v", used, codec)
			}
			records = bytes.Clone(compressed)
		}
		rb := kmsg.RecordBatch{FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(codec), LastOffsetDelta: n - 1,
			FirstTimestamp: 1000, MaxTimestamp: 1000 + 10*(n-1), ProducerID: 5, ProducerEpoch: 0, FirstSequence: 0,
			NumRecords: n, Records: records}
		rb.Length = int32(49 + len(records))
		b := rb.AppendTo(nil)
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32c)) // as kgo's sink does

		h, err := batch.Validate(b)
		if err != nil {
			t.Fatalf("%v: Validate: %v", codec, err)
		}
		if h.NumRecords != n || h.ProducerID != 5 || h.Compression() != codec {
			t.Fatalf("%v: header %+v", codec, h)
		}
		var got int32
		err = batch.ForEachRecord(b, func(offsetDelta int32, ts int64) bool {
			if offsetDelta != got || ts != 1000+10*int64(got) {
				t.Fatalf("%v: record %d: offsetDelta %d ts %d", codec, got, offsetDelta, ts)
			}
			got++
			return true
		})
		if err != nil || got != n {
			t.Fatalf("%v: ForEachRecord: %v after %d records", codec, err, got)
		}
	}
}

// TestValidateProducedBatches runs a real franz-go producer (idempotent, as
// by default) against an in-process fake cluster, captures the record
// batches of its produce requests and validates them.
func TestValidateProducedBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fake cluster")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()

	var mu sync.Mutex
	var captured [][]byte
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, topic := range req.(*kmsg.ProduceRequest).Topics {
			for _, partition := range topic.Partitions {
				mu.Lock()
				captured = append(captured, bytes.Clone(partition.Records))
				mu.Unlock()
			}
		}
		return nil, nil, false // observe only: the cluster handles the request
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()} {
		client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("t"),
			kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		var records []*kgo.Record
		for i := range 40 {
			records = append(records, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: bytes.Repeat([]byte("value "), 50),
				Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}})
		}
		if err := client.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		client.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	seen := map[batch.Codec]bool{}
	for _, set := range captured {
		err := batch.Split(set, func(b []byte) error {
			h, err := batch.Validate(b)
			if err != nil {
				return err
			}
			if h.ProducerID < 0 {
				return fmt.Errorf("franz-go produced without a producer id: %+v", h)
			}
			seen[h.Compression()] = true
			var got int32
			if err := batch.ForEachRecord(b, func(offsetDelta int32, ts int64) bool {
				got++
				return ts >= h.BaseTimestamp && ts <= h.MaxTimestamp
			}); err != nil {
				return err
			}
			if got != h.NumRecords {
				return fmt.Errorf("ForEachRecord saw %d records, header says %d (or a timestamp out of range)", got, h.NumRecords)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("captured batch: %v", err)
		}
	}
	for _, codec := range codecs {
		if !seen[codec] {
			t.Errorf("no %v batch was captured (captured %d record sets)", codec, len(captured))
		}
	}
}
