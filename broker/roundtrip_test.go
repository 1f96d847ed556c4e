package broker

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceN produces n records to topic (partition from the key) and returns
// them with their assigned offsets.
func produceN(t *testing.T, cl *kgo.Client, topic string, n int, prefix string) []*kgo.Record {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return recs
}

// consumeAll reads n records of topic from the start.
func consumeAll(t *testing.T, tb *testBroker, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	opts = append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)
	cl := tb.client(opts...)
	defer cl.Close()
	ctx := ctxT(t, 30*time.Second)
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	return got
}

func checkSame(t *testing.T, produced, consumed []*kgo.Record) {
	t.Helper()
	if len(produced) != len(consumed) {
		t.Fatalf("produced %d, consumed %d", len(produced), len(consumed))
	}
	type tp struct {
		p   int32
		off int64
	}
	byPos := map[tp]*kgo.Record{}
	for _, r := range produced {
		byPos[tp{r.Partition, r.Offset}] = r
	}
	for _, r := range consumed {
		p, ok := byPos[tp{r.Partition, r.Offset}]
		if !ok {
			t.Fatalf("consumed unexpected record at %d/%d", r.Partition, r.Offset)
		}
		if !bytes.Equal(p.Key, r.Key) || !bytes.Equal(p.Value, r.Value) {
			t.Fatalf("record %d/%d: produced %q=%q, consumed %q=%q", r.Partition, r.Offset, p.Key, p.Value, r.Key, r.Value)
		}
	}
}

func TestProduceConsumeAcks(t *testing.T) {
	tb := startBroker(t, Config{DefaultPartitions: 3})
	for _, acks := range []struct {
		name string
		acks kgo.Acks
	}{{"all", kgo.AllISRAcks()}, {"leader", kgo.LeaderAck()}, {"none", kgo.NoAck()}} {
		t.Run(acks.name, func(t *testing.T) {
			topic := "acks-" + acks.name
			opts := []kgo.Opt{kgo.RequiredAcks(acks.acks), kgo.AllowAutoTopicCreation()}
			if acks.name != "all" {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			cl := tb.client(opts...)
			produced := produceN(t, cl, topic, 300, acks.name)
			got := consumeAll(t, tb, topic, len(produced))
			if acks.name != "none" { // acks=0 producers learn no offsets
				checkSame(t, produced, got)
			}
		})
	}
}

func TestCodecs(t *testing.T) {
	tb := startBroker(t, Config{})
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(c.name, func(t *testing.T) {
			topic := "codec-" + c.name
			cl := tb.client(kgo.ProducerBatchCompression(c.codec), kgo.AllowAutoTopicCreation())
			produced := produceN(t, cl, topic, 500, c.name)
			checkSame(t, produced, consumeAll(t, tb, topic, len(produced)))
		})
	}
}
