package broker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCorruptPartitionRefusesAloneBrokerServesTheRest: a bad batch in the
// middle of one partition's log makes that partition answer
// KAFKA_STORAGE_ERROR after a restart, while the broker starts and its other
// partitions keep serving (instead of the whole broker refusing to start).
func TestCorruptPartitionRefusesAloneBrokerServesTheRest(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, Config{DataDir: dir})
	ctx := ctxT(t, 60*time.Second)
	if _, err := tb.admin().CreateTopics(ctx, 2, 1, nil, "c"); err != nil {
		t.Fatal(err)
	}
	cl := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := 0; i < 10; i++ {
		for p := int32(0); p < 2; p++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "c", Partition: p, Value: []byte("record")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.Close()
	tb.stop()

	// Damage the first batch of partition 0: later batches stay valid, so
	// recovery must call it corruption, not a torn tail.
	seg := filepath.Join(dir, "c-0", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[65] ^= 0xff
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}

	tb = startBroker(t, Config{DataDir: dir})
	cl = tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(0), kgo.RequestRetries(0))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "c", Partition: 1, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("produce to the healthy partition: %v", err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "c", Partition: 0, Value: []byte("after")}).FirstErr()
	if !errors.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("produce to the corrupt partition: %v, want KAFKA_STORAGE_ERROR", err)
	}
	// Fetch says the same for partition 0 and serves partition 1.
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 10, 1<<20
	td, err := tb.admin().ListTopics(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "c", td["c"].ID // kgo sends the newest version: topic IDs
	for p := int32(0); p < 2; p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[0].Partitions {
		want := int16(0)
		if p.Partition == 0 {
			want = kerr.KafkaStorageError.Code
		}
		if p.ErrorCode != want || (want == 0 && len(p.RecordBatches) == 0) {
			t.Fatalf("fetch partition %d: error %d, %d bytes; want error %d", p.Partition, p.ErrorCode, len(p.RecordBatches), want)
		}
	}
}
