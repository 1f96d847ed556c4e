package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/api"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/server"
)

// fuzzSeeds are valid requests of every served key (and a few broken
// frames), so the fuzzer starts from frames that reach the handlers.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	add := func(r kmsg.Request) {
		frame := encodeRequest(r, 1)
		seeds = append(seeds, frame[4:]) // without the size prefix
	}
	topic := "fuzz"
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = &topic
	md.Topics = append(md.Topics, mt)
	md.AllowAutoTopicCreation = true
	add(md)

	pr := kmsg.NewPtrProduceRequest()
	pr.Version, pr.Acks = 9, -1
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = topic
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = batch.Build(batch.BuildOptions{Records: 2, ValueSize: 5, ProducerID: -1})
	pt.Partitions = append(pt.Partitions, pp)
	pr.Topics = append(pr.Topics, pt)
	add(pr)

	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxWaitMillis = 11, 10
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	add(fr)

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -3
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	add(lo)

	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 7
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "fuzz2", 2, 1
	ct.Topics = append(ct.Topics, ctt)
	add(ct)

	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 4
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	dc.Resources = append(dc.Resources, dr)
	add(dc)

	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ia.Version = 1
	ir := kmsg.NewIncrementalAlterConfigsRequestResource()
	ir.ResourceType, ir.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	ic := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	ic.Name, ic.Op, ic.Value = "cleanup.policy", kmsg.IncrementalAlterConfigOpAppend, kmsg.StringPtr("delete")
	ir.Configs = append(ir.Configs, ic)
	ia.Resources = append(ia.Resources, ir)
	add(ia)

	for _, r := range []kmsg.Request{
		&kmsg.ApiVersionsRequest{Version: 3, ClientSoftwareName: "a", ClientSoftwareVersion: "1"},
		&kmsg.ApiVersionsRequest{Version: 9},
		&kmsg.InitProducerIDRequest{Version: 4, TransactionTimeoutMillis: 1000, ProducerID: -1, ProducerEpoch: -1},
		&kmsg.DescribeClusterRequest{Version: 1},
		&kmsg.DescribeLogDirsRequest{Version: 4},
		&kmsg.OffsetForLeaderEpochRequest{Version: 4, ReplicaID: -1},
		&kmsg.DeleteRecordsRequest{Version: 2},
		&kmsg.CreatePartitionsRequest{Version: 3},
		&kmsg.DeleteTopicsRequest{Version: 6},
		&kmsg.AlterConfigsRequest{Version: 2},
	} {
		add(r)
	}
	seeds = append(seeds, nil, []byte{0, 18}, []byte{0, 1, 0, 18, 0, 0, 0, 1, 0xff, 0xff, 0xff})
	return seeds
}

// FuzzRequest feeds arbitrary frames through the request parser and, when
// they decode, the real handlers of a broker on a temporary data directory.
// Nothing may panic. The seeds run in plain `go test`.
func FuzzRequest(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	b, err := New(Config{DataDir: f.TempDir(), Logger: testLogger(), DefaultPartitions: 2, MaxPartitionsPerTopic: 8})
	if err != nil {
		f.Fatal(err)
	}
	b.handler.SetAdvertised(api.Endpoint{Listener: "PLAINTEXT", Host: "127.0.0.1", Port: 9092})
	f.Cleanup(func() { b.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, err := server.ParseRequest(frame, b.handler)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		resp := b.handler.Handle(ctx, req)
		switch {
		case resp.Body != nil:
			resp.Body.AppendTo(nil)
		case resp.Frame != nil:
			if resp.Frame.Release != nil {
				resp.Frame.Release()
			}
		}
	})
}
