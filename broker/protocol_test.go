package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawConn is a hand-driven Kafka connection for protocol edge cases.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// request encodes req (header v1/v2 by flexibility) and returns the frame.
func encodeRequest(req kmsg.Request, corr int32) []byte {
	buf := make([]byte, 4)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	buf = binary.BigEndian.AppendUint16(buf, 4)
	buf = append(buf, "test"...)
	if req.IsFlexible() {
		buf = append(buf, 0)
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

func (c *rawConn) send(frame []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(frame); err != nil {
		c.t.Fatal(err)
	}
}

// readResponse returns the body after the correlation ID (header v0).
func (c *rawConn) readResponse() ([]byte, int32, error) {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, 0, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return nil, 0, err
	}
	return body[4:], int32(binary.BigEndian.Uint32(body)), nil
}

// expectClosed checks that the broker closed the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := c.nc.Read(b[:]); err == nil {
		c.t.Fatal("connection still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatal("connection not closed within 5s")
	}
}

func TestApiVersionsKIP511(t *testing.T) {
	tb := startBroker(t, Config{})
	c := dialRaw(t, tb.AdvertisedAddr())
	// A version from the future with a body we cannot know.
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 99
	frame := encodeRequest(req, 7)
	frame = append(frame, 0xde, 0xad, 0xbe, 0xef)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	c.send(frame)
	body, corr, err := c.readResponse()
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.ApiVersionsResponse{Version: 0}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if corr != 7 || resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != 5 {
		t.Fatalf("corr %d, response %+v", corr, resp)
	}
	// The connection stays usable: ask again at a served version.
	ok := kmsg.NewPtrApiVersionsRequest()
	ok.Version = 3
	ok.ClientSoftwareName, ok.ClientSoftwareVersion = "test", "1"
	c.send(encodeRequest(ok, 8))
	body, _, err = c.readResponse()
	if err != nil {
		t.Fatal(err)
	}
	full := kmsg.ApiVersionsResponse{Version: 3}
	if err := full.ReadFrom(body); err != nil || full.ErrorCode != 0 || len(full.ApiKeys) < 10 {
		t.Fatalf("err %v, response %+v", err, full)
	}
}

// TestBadFramesCloseOnlyTheirConnection: a malformed frame, an oversized
// frame, an unknown key and an unsupported version each close their own
// connection while another client keeps producing and consuming.
func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	tb := startBroker(t, Config{MaxRequestBytes: 1 << 20})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "bystander", 10, "before")

	bad := map[string][]byte{
		"oversized":     {0x00, 0x20, 0x00, 0x00}, // 2 MiB > 1 MiB limit
		"negative size": {0xff, 0xff, 0xff, 0xff},
		"short header":  {0, 0, 0, 3, 0, 3, 0},
		"unknown key":   encodeRequest(&kmsg.ProduceRequest{Version: 3}, 1),
		"garbage body":  {0, 0, 0, 12, 0, 3, 0, 5, 0, 0, 0, 1, 0xff, 0xff, 0x7f, 0x7f},
		"bad version":   encodeRequest(&kmsg.MetadataRequest{Version: 99}, 2),
	}
	binary.BigEndian.PutUint16(bad["unknown key"][4:], 999)
	for name, frame := range bad {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, tb.AdvertisedAddr())
			c.send(frame)
			c.expectClosed()
			produceN(t, cl, "bystander", 5, name)
		})
	}
	consumeAll(t, tb, "bystander", 10+5*len(bad))
}

// TestPipelinedResponsesInOrder sends many requests without waiting and
// checks responses come back in request order.
func TestPipelinedResponsesInOrder(t *testing.T) {
	tb := startBroker(t, Config{})
	c := dialRaw(t, tb.AdvertisedAddr())
	var frames []byte
	const n = 50
	for i := range n {
		var req kmsg.Request
		if i%2 == 0 {
			r := kmsg.NewPtrMetadataRequest()
			r.Version = 12
			req = r
		} else {
			r := kmsg.NewPtrApiVersionsRequest()
			r.Version = 0
			req = r
		}
		frames = append(frames, encodeRequest(req, int32(1000+i))...)
	}
	c.send(frames)
	for i := range n {
		_, corr, err := c.readResponse()
		if err != nil {
			t.Fatal(err)
		}
		if corr != int32(1000+i) {
			t.Fatalf("response %d has correlation id %d", i, corr)
		}
	}
}

func topicID(t *testing.T, adm *kadm.Client, topic string) [16]byte {
	t.Helper()
	md, err := adm.Metadata(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		t.Fatalf("topic %s: %v", topic, td.Err)
	}
	return td.ID
}

// TestLongPollWokenByAppend: a fetch waiting at the end of the log returns
// within milliseconds of an append, long before its MaxWait.
func TestLongPollWokenByAppend(t *testing.T) {
	tb := startBroker(t, Config{})
	adm := tb.admin()
	if _, err := adm.CreateTopic(ctxT(t, 10*time.Second), 1, 1, nil, "lp"); err != nil {
		t.Fatal(err)
	}
	id := topicID(t, adm, "lp")
	fetcher := tb.client()
	producer := tb.client()

	for round := range 3 {
		end, err := adm.ListEndOffsets(ctxT(t, 10*time.Second), "lp")
		if err != nil {
			t.Fatal(err)
		}
		off, _ := end.Lookup("lp", 0)

		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 5000
		req.MinBytes = 1
		req.MaxBytes = 1 << 20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "lp", id
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, off.Offset, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)

		type result struct {
			resp *kmsg.FetchResponse
			err  error
			at   time.Time
		}
		done := make(chan result, 1)
		sent := time.Now()
		go func() {
			r, err := req.RequestWith(context.Background(), fetcher)
			done <- result{r, err, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond) // let the fetch start waiting
		select {
		case r := <-done:
			t.Fatalf("round %d: fetch returned before any append (after %v): %+v %v", round, r.at.Sub(sent), r.resp, r.err)
		default:
		}
		if err := producer.ProduceSync(ctxT(t, 10*time.Second), &kgo.Record{Topic: "lp", Value: []byte("wake")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		acked := time.Now()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		wake := r.at.Sub(acked)
		t.Logf("round %d: fetch returned %v after the produce was acknowledged", round, wake)
		if wake > 100*time.Millisecond {
			t.Fatalf("round %d: fetch returned %v after the append; want < 100ms", round, wake)
		}
		p := r.resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
			t.Fatalf("round %d: partition %+v", round, p)
		}
	}
}

// TestIdleConsumerIsQuiet: a caught-up consumer sends one fetch per MaxWait,
// not a stream of them.
func TestIdleConsumerIsQuiet(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "idle", 5, "x")
	consumer := tb.client(kgo.ConsumeTopics("idle"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))
	got := 0
	for got < 5 {
		got += len(consumer.PollFetches(ctxT(t, 10*time.Second)).Records())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); consumer.PollFetches(ctx) }()
	time.Sleep(500 * time.Millisecond)
	before := tb.RequestCount(1)
	const window = 3 * time.Second
	time.Sleep(window)
	fetches := tb.RequestCount(1) - before
	cancel()
	wg.Wait()
	t.Logf("%d fetch requests in %v with FetchMaxWait 1s", fetches, window)
	if fetches > 4 {
		t.Fatalf("an idle consumer sent %d fetches in %v with a 1s MaxWait", fetches, window)
	}
}

// TestFetchFromEveryPosition fetches from each offset of a partition and
// checks the first record is the one asked for and the rest follow.
func TestFetchFromEveryPosition(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(7))
	var produced []*kgo.Record
	for batchN := range 6 { // batches of varying sizes
		produced = append(produced, produceN(t, cl, "pos", 3+batchN, fmt.Sprintf("b%d", batchN))...)
	}
	n := int64(len(produced))
	id := topicID(t, tb.admin(), "pos")
	for _, maxBytes := range []int32{1, 1 << 20} {
		for off := int64(0); off <= n; off++ {
			req := kmsg.NewPtrFetchRequest()
			req.MaxBytes = maxBytes
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = "pos", id
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.FetchOffset, fp.PartitionMaxBytes = off, maxBytes
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl)
			if err != nil {
				t.Fatal(err)
			}
			rp := &resp.Topics[0].Partitions[0]
			if rp.ErrorCode != 0 || rp.HighWatermark != n {
				t.Fatalf("offset %d: error %d, hwm %d", off, rp.ErrorCode, rp.HighWatermark)
			}
			part, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: off, Topic: "pos"}, rp, kgo.DefaultDecompressor(), nil)
			if off == n {
				if len(part.Records) != 0 {
					t.Fatalf("at the end: %d records", len(part.Records))
				}
				continue
			}
			if len(part.Records) == 0 || part.Records[0].Offset != off {
				t.Fatalf("offset %d (max bytes %d): got %d records", off, maxBytes, len(part.Records))
			}
			if maxBytes > 1 && int64(len(part.Records)) != n-off {
				t.Fatalf("offset %d: %d records, want %d", off, len(part.Records), n-off)
			}
			for i, r := range part.Records {
				want := produced[off+int64(i)]
				if r.Offset != off+int64(i) || string(r.Value) != string(want.Value) {
					t.Fatalf("offset %d: record %d is %d=%q, want %d=%q", off, i, r.Offset, r.Value, want.Offset, want.Value)
				}
			}
		}
	}
	// Past the end: OFFSET_OUT_OF_RANGE.
	req := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "pos", id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = n+1, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("past the end: error %d", code)
	}
}
