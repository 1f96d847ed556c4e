package broker

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// rawBatch frames records (already compressed as codec says) as a batch
// claiming numRecords records, with a CRC that matches: the producer really
// sent these bytes.
func rawBatch(codec batch.Codec, numRecords int32, records []byte) []byte {
	b := make([]byte, batch.HeaderSize, batch.HeaderSize+len(records))
	binary.BigEndian.PutUint32(b[batch.OffsetLength:], uint32(batch.HeaderSize-batch.LengthFieldEnd+len(records)))
	binary.BigEndian.PutUint32(b[batch.OffsetPartitionLeaderEpoch:], 0xffffffff)
	b[batch.OffsetMagic] = batch.Magic
	binary.BigEndian.PutUint16(b[batch.OffsetAttributes:], uint16(codec))
	binary.BigEndian.PutUint32(b[batch.OffsetLastOffsetDelta:], uint32(numRecords-1))
	binary.BigEndian.PutUint64(b[batch.OffsetProducerID:], 0xffffffffffffffff)
	binary.BigEndian.PutUint16(b[batch.OffsetProducerEpoch:], 0xffff)
	binary.BigEndian.PutUint32(b[batch.OffsetBaseSequence:], 0xffffffff)
	binary.BigEndian.PutUint32(b[batch.OffsetNumRecords:], uint32(numRecords))
	b = append(b, records...)
	binary.BigEndian.PutUint32(b[batch.OffsetCRC:], crc32.Checksum(b[batch.OffsetAttributes:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// bigRecord is records of one well-formed record whose value is valueSize
// zeros, compressed as a stream with codec (gzip or zstd): a few KiB that
// inflate to valueSize.
func bigRecord(t *testing.T, codec batch.Codec, valueSize int) []byte {
	var compressed bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case batch.CodecGzip:
		w = gzip.NewWriter(&compressed)
	case batch.CodecZstd:
		zw, err := zstd.NewWriter(&compressed)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("codec %v", codec)
	}
	body := []byte{0}                   // attributes
	body = binary.AppendVarint(body, 0) // timestampDelta
	body = binary.AppendVarint(body, 0) // offsetDelta
	body = binary.AppendVarint(body, -1)
	body = binary.AppendVarint(body, int64(valueSize))
	w.Write(binary.AppendVarint(nil, int64(len(body)+valueSize+1)))
	w.Write(body)
	zeros := make([]byte, 1<<20)
	for left := valueSize; left > 0; left -= len(zeros) {
		w.Write(zeros[:min(left, len(zeros))])
	}
	w.Write([]byte{0}) // no headers
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return compressed.Bytes()
}

func zstdBomb(t *testing.T, valueSize int) []byte { return bigRecord(t, batch.CodecZstd, valueSize) }

// produceRaw sends one produce request (v8, acks=all) of records to
// partition 0 of topic on a raw connection and returns the partition's
// response.
func produceRaw(t *testing.T, c *rawConn, corr int32, topic string, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 8, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	c.send(encodeRequest(req, corr))
	body, gotCorr, err := c.readResponse()
	if err != nil || gotCorr != corr {
		t.Fatalf("produce response: %v (correlation %d, want %d)", err, gotCorr, corr)
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = req.Version
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestHostileCompressedBatches: compressed batches are decompressed and
// checked on append, as Kafka's LogValidator does. A 110-byte batch marked
// gzip that holds garbage and claims 2^31-1 records (once accepted three
// times, high watermark 6,442,450,941, and served to consumers) is refused
// with INVALID_RECORD each time; a zstd batch of a few KiB whose one record
// inflates to 256 MiB is refused within bounded memory; a damaged CRC is
// CORRUPT_MESSAGE. Nothing is stored, and valid batches still pass.
func TestHostileCompressedBatches(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 60*time.Second)
	adm := tb.admin()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "hostile"); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, tb.AdvertisedAddr())
	expect := func(corr int32, records []byte, code int16, text string) {
		t.Helper()
		p := produceRaw(t, c, corr, "hostile", records)
		msg := ""
		if p.ErrorMessage != nil {
			msg = *p.ErrorMessage
		}
		if p.ErrorCode != code || !strings.Contains(msg, text) {
			t.Fatalf("produce: error %v %q, want %v with %q", kerr.ErrorForCode(p.ErrorCode), msg, kerr.ErrorForCode(code), text)
		}
	}

	garbage := append([]byte{0x1f, 0x8b}, bytes.Repeat([]byte{0xa5}, 47)...)
	claims := rawBatch(batch.CodecGzip, 1<<31-1, garbage)
	if len(claims) != 110 {
		t.Fatalf("hostile batch is %d bytes, want 110", len(claims))
	}
	for i := range 3 {
		expect(int32(i), claims, kerr.InvalidRecord.Code, "record count 2147483647 cannot fit")
	}
	// The same garbage claiming one record fails to decompress.
	expect(3, rawBatch(batch.CodecGzip, 1, garbage), kerr.InvalidRecord.Code, "gzip records do not decompress")

	bomb := rawBatch(batch.CodecZstd, 1, zstdBomb(t, 256<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	expect(4, bomb, kerr.InvalidRecord.Code, "exceed")
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Fatalf("refusing a %d-byte batch that inflates to 256 MiB allocated %d MiB", len(bomb), n>>20)
	} else {
		t.Logf("a %d-byte zstd bomb (256 MiB inflated) refused; the broker and client allocated %d KiB", len(bomb), n>>10)
	}

	damaged := bytes.Clone(rawBatch(batch.CodecZstd, 1, zstdBomb(t, 10)))
	damaged[len(damaged)-1] ^= 0xff
	expect(5, damaged, kerr.CorruptMessage.Code, "crc mismatch")

	ends, err := adm.ListEndOffsets(ctx, "hostile")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("hostile", 0); o.Err != nil || o.Offset != 0 {
		t.Fatalf("high watermark %d (%v) after refused batches, want 0", o.Offset, o.Err)
	}
	// A valid compressed batch on the same connection is stored.
	expect(6, rawBatch(batch.CodecZstd, 1, zstdBomb(t, 1000)), 0, "")
}

// TestHostilePipelinedListOffsetsByTimestamp: 16 pipelined ListOffsets by
// timestamp over one stored gzip batch that inflates to 48 MiB (a valid
// batch: within the decompression budget of the default max.message.bytes)
// once peaked at 1.85 GB; the records are now walked as a stream, at most
// batch.DecompressSlots at once, so the 16 allocate a few MiB in all.
func TestHostilePipelinedListOffsetsByTimestamp(t *testing.T) {
	tb := startBroker(t, Config{})
	ctx := ctxT(t, 60*time.Second)
	if _, err := tb.admin().CreateTopic(ctx, 1, 1, nil, "big"); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, tb.AdvertisedAddr())
	if p := produceRaw(t, c, 0, "big", rawBatch(batch.CodecGzip, 1, bigRecord(t, batch.CodecGzip, 48<<20))); p.ErrorCode != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.ReplicaID = 4, -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "big"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, 0, -1 // the batch's records carry timestamp 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	const pipelined = 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range pipelined {
		c.send(encodeRequest(req, int32(100+i)))
	}
	for i := range pipelined {
		body, corr, err := c.readResponse()
		if err != nil || corr != int32(100+i) {
			t.Fatalf("response %d: %v (correlation %d)", i, err, corr)
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.Version = req.Version
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 0 {
			t.Fatalf("ListOffsets: %v offset %d, want 0", kerr.ErrorForCode(p.ErrorCode), p.Offset)
		}
	}
	runtime.ReadMemStats(&after)
	n := after.TotalAlloc - before.TotalAlloc
	if n > 64<<20 {
		t.Fatalf("%d pipelined ListOffsets by timestamp over 48 MiB of records allocated %d MiB", pipelined, n>>20)
	}
	t.Logf("%d pipelined ListOffsets by timestamp over a gzip batch of 48 MiB records: %d KiB allocated", pipelined, n>>10)
}
