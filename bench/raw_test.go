package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/test/testbroker"
)

// startTestBroker runs a broker in this process (the validation of the
// raw engine, not a measurement: MEASURING.md rule 8).
func startTestBroker(t *testing.T) (addr, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	return testbroker.StartInProcessWith(t, broker.Config{DataDir: dataDir}), dataDir
}

// testAdmin is an admin client of addr and a context for one call.
func testAdmin(t *testing.T, addr string) (*kadm.Client, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(func() { cancel(); cl.Close() })
	return kadm.NewClient(cl), ctx
}

func createTestTopic(t *testing.T, addr, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm, ctx := testAdmin(t, addr)
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
}

func endOffsets(t *testing.T, addr, topic string) map[int32]int64 {
	t.Helper()
	adm, ctx := testAdmin(t, addr)
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("%s[%d]: %v", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// TestRawEngineMatchesFranzGo: the same workload through both engines
// (idempotent, acks=all, 2 partitions, batches of 10 records with the same
// values) gives the same acknowledged counts, the same end offsets, and
// segment files of the same size whose batches differ only in the fields
// that must differ (CRC, timestamps, producer id); then each engine's
// consumer reads every record of both topics.
func TestRawEngineMatchesFranzGo(t *testing.T) {
	addr, dataDir := startTestBroker(t)
	const (
		partitions = 2
		batch      = 10
		requests   = 20
		size       = 200
	)
	createTestTopic(t, addr, "raw", partitions, nil)
	payloads := Payloads(4096, size)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	w := Workload{RecordSize: size, Codec: "none", Acks: "all", Partitions: partitions, Clients: 1,
		Rate: requests * partitions * batch, Duration: time.Second, Drain: 10 * time.Second}
	res, err := rawProduce(ctx, addr, "raw", w, RawOptions{Connections: 1, BatchRecords: batch, Idempotent: true}, payloads)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Load
	if l.Issued != requests*partitions*batch || l.Acked != l.Issued || l.Errors != 0 || l.Unfinished != 0 {
		t.Fatalf("raw engine: %+v", l)
	}

	// franz-go: one batch per partition per flush, the raw pool's values
	// in the raw engine's order, one timestamp for every record (so record
	// timestamp deltas are 0, as the raw engine's). Records produced
	// before kgo has the topic's metadata are partitioned when it arrives,
	// and on a loaded machine a flush can then split a partition's records
	// into two batches (CI, once): that run of the client is not the
	// workload, so it is made again on a fresh topic, up to three times.
	franz := ""
	var acked int64
	for attempt := 0; attempt < 3 && franz == ""; attempt++ {
		topic := "franz" + strings.Repeat("-again", attempt)
		createTestTopic(t, addr, topic, partitions, nil)
		acked = produceFranzGo(ctx, t, addr, topic, payloads, requests, partitions, batch)
		franz = topic
		for p := int32(0); p < partitions; p++ {
			if n := batchesIn(readSegment(t, filepath.Join(dataDir, topic+"-"+itoa(p), "00000000000000000000.log"))); n != requests {
				t.Logf("franz-go wrote %d batches to %s[%d], not one per flush (%d): again", n, topic, p, requests)
				franz = ""
			}
		}
	}
	if franz == "" {
		t.Fatal("franz-go never wrote one batch per partition per flush")
	}
	if acked != l.Acked {
		t.Fatalf("acknowledged: franz-go %d, raw %d", acked, l.Acked)
	}
	rawEnds, franzEnds := endOffsets(t, addr, "raw"), endOffsets(t, addr, franz)
	for p := int32(0); p < partitions; p++ {
		if rawEnds[p] != requests*batch || franzEnds[p] != rawEnds[p] {
			t.Fatalf("partition %d end offsets: raw %d, franz-go %d, want %d", p, rawEnds[p], franzEnds[p], requests*batch)
		}
		rawLog := readSegment(t, filepath.Join(dataDir, "raw-"+itoa(p), "00000000000000000000.log"))
		franzLog := readSegment(t, filepath.Join(dataDir, franz+"-"+itoa(p), "00000000000000000000.log"))
		if len(rawLog) != len(franzLog) {
			t.Fatalf("partition %d: raw segment %d bytes, franz-go %d", p, len(rawLog), len(franzLog))
		}
		for n := 0; len(rawLog) > 0; n++ {
			size := int(binary.BigEndian.Uint32(rawLog[8:])) + 12
			a, b := rawLog[:size], franzLog[:size]
			if err := checkRawBatch(a); err != nil {
				t.Fatalf("raw batch %d on disk: %v", n, err)
			}
			if !bytes.Equal(maskBatch(a), maskBatch(b)) {
				t.Fatalf("partition %d batch %d differs beyond CRC, timestamps and producer id:\nraw   %x\nfranz %x", p, n, a[:rawBatchHeaderLen], b[:rawBatchHeaderLen])
			}
			rawLog, franzLog = rawLog[size:], franzLog[size:]
		}
	}

	for _, topic := range []string{"raw", franz} {
		want := int64(requests * partitions * batch)
		rc, err := RawConsume(ctx, addr, topic, want, size, 20*time.Second, RawOptions{Connections: 2})
		if err != nil {
			t.Fatalf("raw consumer of %s: %v", topic, err)
		}
		fc, err := Consume(ctx, addr, topic, want, 20*time.Second)
		if err != nil {
			t.Fatalf("franz-go consumer of %s: %v", topic, err)
		}
		if rc.Records != want || fc.Records != want || rc.Bytes != fc.Bytes || rc.Bytes != want*size {
			t.Fatalf("%s: raw consumer %d records %d B, franz-go %d records %d B", topic, rc.Records, rc.Bytes, fc.Records, fc.Bytes)
		}
	}
}

// produceFranzGo produces the raw engine's workload through franz-go into
// topic: requests flushes, each of batch records to every partition, and
// returns how many were acknowledged.
func produceFranzGo(ctx context.Context, t *testing.T, addr, topic string, payloads [][]byte, requests, partitions, batch int) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ts := time.Now()
	var acked int64
	for r := 0; r < requests; r++ {
		for p := 0; p < partitions; p++ {
			for k := 0; k < batch; k++ {
				i := ((r%rawRequestPool)*partitions+p)*batch + k
				cl.Produce(ctx, &kgo.Record{Partition: int32(p), Value: payloads[i], Timestamp: ts}, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Errorf("franz-go: %v", err)
						return
					}
					acked++
				})
			}
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return acked
}

// batchesIn is the number of record batches in a segment file's bytes.
func batchesIn(log []byte) int {
	n := 0
	for len(log) >= 12 {
		log = log[min(len(log), int(binary.BigEndian.Uint32(log[8:]))+12):]
		n++
	}
	return n
}

func itoa(p int32) string { return string(rune('0' + p)) }

func readSegment(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// maskBatch zeroes the fields two producers of the same records must
// differ in.
func maskBatch(b []byte) []byte {
	m := append([]byte{}, b...)
	clear(m[rawCRCOffset : rawCRCOffset+4])
	clear(m[rawFirstTSOffset : rawMaxTSOffset+8])
	clear(m[rawProducerOffset : rawProducerOffset+8])
	return m
}

// TestRawEngineSurfacesPartitionErrors: a batch the broker refuses
// (MESSAGE_TOO_LARGE) fails its records with the partition's error, named
// as the franz-go engine names it.
func TestRawEngineSurfacesPartitionErrors(t *testing.T) {
	addr, _ := startTestBroker(t)
	limit := "1000"
	createTestTopic(t, addr, "small", 2, map[string]*string{"max.message.bytes": &limit})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := Workload{RecordSize: 200, Codec: "none", Acks: "all", Partitions: 2, Clients: 1, Rate: 200, Duration: 500 * time.Millisecond, Drain: 5 * time.Second}
	res, err := RawProduce(ctx, addr, "small", w, RawOptions{Connections: 1, BatchRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Load
	if l.Issued == 0 || l.Errors != l.Issued || l.Acked != 0 || !strings.Contains(l.FirstError, "small[0]: MESSAGE_TOO_LARGE") {
		t.Fatalf("raw engine: %+v", l)
	}
	fw := w
	fw.RecordSize = 2000
	fres, err := Produce(ctx, addr, "small", fw)
	if err == nil || !strings.Contains(err.Error(), "MESSAGE_TOO_LARGE") {
		t.Fatalf("franz-go engine: %v %+v", err, fres.Load)
	}
}
