package broker

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// benchBroker starts a broker for a benchmark with one record in topic.
func benchBroker(b *testing.B, topic string) (*testBroker, net.Conn) {
	cfg := Config{DataDir: b.TempDir(), Logger: testLogger()}
	br, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tb := &testBroker{Broker: br, dir: cfg.DataDir, done: make(chan error, 1)}
	go func() { tb.done <- br.Serve(l) }()
	for br.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	b.Cleanup(func() { br.Shutdown(b.Context()); <-tb.done })
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.AdvertisedAddr()), kgo.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	if err := cl.ProduceSync(b.Context(), &kgo.Record{Topic: topic, Value: make([]byte, 1000)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	nc, err := net.Dial("tcp", br.AdvertisedAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	return tb, nc
}

// roundTrip writes frame and reads one response into buf.
func roundTrip(b *testing.B, nc net.Conn, frame []byte, buf []byte) []byte {
	if _, err := nc.Write(frame); err != nil {
		b.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		b.Fatal(err)
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	if _, err := io.ReadFull(nc, buf[:n]); err != nil {
		b.Fatal(err)
	}
	return buf
}

// BenchmarkConnProduce: one acks=1 produce of a 16 KiB batch at a time
// through a real connection (allocations are the whole process's: client
// and broker).
func BenchmarkConnProduce(b *testing.B) {
	_, nc := benchBroker(b, "bench-produce")
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, 1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "bench-produce"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch.Build(batch.BuildOptions{Records: 16, ValueSize: 1000, ProducerID: -1})
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	frame := encodeRequest(req, 1)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		buf = roundTrip(b, nc, frame, buf)
	}
}

// BenchmarkConnFetch: one flexible (v12) fetch of a 1 kB record at a time
// through a real connection.
func BenchmarkConnFetch(b *testing.B) {
	_, nc := benchBroker(b, "bench-fetch")
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes = 12, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "bench-fetch"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	frame := encodeRequest(req, 1)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = roundTrip(b, nc, frame, buf)
	}
}
