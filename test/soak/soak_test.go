// Package soak runs the sushka binary under a long mixed load with a hostile
// client among the well-behaved ones, and checks that the broker's memory
// and goroutines stay flat after warm-up and that every acknowledged record
// is consumed. It is skipped unless -soak is given:
//
//	go test ./test/soak -run TestSoak -v -timeout 30m -args -soak 5m
//
// Every second it prints the broker's RSS (/proc/PID/status) and goroutines
// (go_goroutines on the admin /metrics), and the load's counters.
package soak

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

var soakFor = flag.Duration("soak", 0, "run TestSoak for this long (0 skips it)")

func TestMain(m *testing.M) { testbroker.Main(m) }

const (
	topic      = "soak"
	partitions = 4
	group      = "soak-group"
)

// counters are the load's progress, shared by its goroutines.
type counters struct {
	produced, consumed, fetched atomic.Int64 // acknowledged, group-consumed, plain-fetched records
	produceErrors               atomic.Int64
	hostile                     atomic.Int64 // hostile connections made
	churn                       atomic.Int64 // short-lived client connections
}

type sample struct {
	at         time.Duration
	rssBytes   int64
	goroutines int64
}

func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("soak test: run with -args -soak DURATION")
	}
	p := testbroker.Start(t, testbroker.Binary(t))
	admin := newClient(t, p.Addr)
	adm := kadm.NewClient(admin)
	ctx0, cancel0 := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := adm.CreateTopic(ctx0, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	cancel0()

	ctx, cancel := context.WithTimeout(context.Background(), *soakFor)
	defer cancel()
	var c counters
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	for i, acks := range []kgo.Acks{kgo.AllISRAcks(), kgo.AllISRAcks(), kgo.LeaderAck()} {
		codec := []kgo.CompressionCodec{kgo.NoCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}[i]
		opts := []kgo.Opt{kgo.RequiredAcks(acks), kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(topic)}
		if acks != kgo.AllISRAcks() {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl := newClient(t, p.Addr, opts...)
		run(func() { produce(ctx, cl, &c, 2000) })
	}
	for i := 0; i < 2; i++ {
		cl := newClient(t, p.Addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		run(func() { consume(ctx, cl, &c.consumed) })
	}
	fetcher := newClient(t, p.Addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	run(func() { consume(ctx, fetcher, &c.fetched) })
	run(func() { churn(ctx, p.Addr, &c) })
	run(func() { hostile(ctx, p.Addr, &c) })

	var samples []sample
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-ctx.Done():
			break sampling
		case <-tick.C:
		}
		s := sample{at: time.Since(start).Round(time.Second), rssBytes: rss(t, p.Pid()), goroutines: goroutines(p.Admin)}
		samples = append(samples, s)
		t.Logf("%4s rss %6.1f MiB goroutines %5d produced %d consumed %d fetched %d errors %d hostile %d churn %d",
			s.at, float64(s.rssBytes)/(1<<20), s.goroutines, c.produced.Load(), c.consumed.Load(),
			c.fetched.Load(), c.produceErrors.Load(), c.hostile.Load(), c.churn.Load())
	}
	wg.Wait()

	// Drain: every acknowledged record reaches the plain fetcher.
	produced := c.produced.Load()
	drain, cancelDrain := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelDrain()
	consume(drainUntil(drain, func() bool { return c.fetched.Load() >= produced }), fetcher, &c.fetched)
	if got := c.fetched.Load(); got < produced {
		t.Errorf("plain fetcher read %d records, %d were acknowledged", got, produced)
	}
	if produced == 0 || c.consumed.Load() == 0 {
		t.Errorf("no load: produced %d, group-consumed %d", produced, c.consumed.Load())
	}
	if c.hostile.Load() == 0 {
		t.Error("the hostile client made no connection")
	}
	checkFlat(t, samples)
}

// checkFlat fails when RSS or goroutines after warm-up (the first third)
// grow past 1.5x the warm-up's peak plus a small constant: a leak grows
// without bound, a working set does not.
func checkFlat(t *testing.T, samples []sample) {
	t.Helper()
	if len(samples) < 6 {
		t.Fatalf("only %d samples; run the soak for at least 6 s", len(samples))
	}
	warm := samples[:len(samples)/3]
	var warmRSS, warmG int64
	for _, s := range warm {
		warmRSS, warmG = max(warmRSS, s.rssBytes), max(warmG, s.goroutines)
	}
	limitRSS, limitG := warmRSS*3/2+64<<20, warmG*3/2+50
	for _, s := range samples[len(warm):] {
		if s.rssBytes > limitRSS {
			t.Errorf("at %s RSS %d MiB > %d MiB (1.5x warm-up peak %d MiB + 64)", s.at, s.rssBytes>>20, limitRSS>>20, warmRSS>>20)
			return
		}
		if s.goroutines > limitG {
			t.Errorf("at %s %d goroutines > %d (1.5x warm-up peak %d + 50)", s.at, s.goroutines, limitG, warmG)
			return
		}
	}
	last := samples[len(samples)-1]
	t.Logf("flat: warm-up peak RSS %d MiB, %d goroutines; last %d MiB, %d goroutines", warmRSS>>20, warmG, last.rssBytes>>20, last.goroutines)
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce sends 1 KiB records at ratePerSecond (open loop by tick) until
// ctx ends, counting acknowledgements and errors.
func produce(ctx context.Context, cl *kgo.Client, c *counters, ratePerSecond int) {
	value := make([]byte, 1024)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick := ratePerSecond / 100
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = cl.Flush(flush)
			cancel()
			return
		case <-tick.C:
		}
		for i := 0; i < perTick; i++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					c.produceErrors.Add(1)
					return
				}
				c.produced.Add(1)
			})
		}
	}
}

// consume polls until ctx ends, counting records.
func consume(ctx context.Context, cl *kgo.Client, n *atomic.Int64) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		n.Add(int64(fs.NumRecords()))
	}
}

// drainUntil is a context that ends with parent or once done() holds.
func drainUntil(parent context.Context, done func() bool) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		defer cancel()
		for ctx.Err() == nil && !done() {
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return ctx
}

// churn opens a short-lived client every 200 ms: metadata, one produce, close.
func churn(ctx context.Context, addr string, c *counters) {
	for ctx.Err() == nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if cl.ProduceSync(pctx, &kgo.Record{Value: []byte("churn")}).FirstErr() == nil {
				c.produced.Add(1)
			}
			cancel()
			cl.Close()
			c.churn.Add(1)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// hostile cycles through what a careless or malicious client does: frames
// announced but never sent, garbage, a corrupt produce, pipelined fetches
// from a client that never reads its responses, and a connection that
// disconnects in the middle of a long poll.
func hostile(ctx context.Context, addr string, c *counters) {
	rng := rand.New(rand.NewPCG(1, 2))
	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		c.hostile.Add(1)
		switch i % 5 {
		case 0: // a 100 MiB frame announced, a few bytes sent, held open
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], 100<<20)
			_, _ = conn.Write(append(hdr[:], 0, 0, 0, 9))
			held = append(held, conn)
		case 1: // garbage
			junk := make([]byte, 64+rng.IntN(4096))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
			_, _ = conn.Write(junk)
			conn.Close()
		case 2: // a produce whose batch CRC is wrong
			req := kmsg.NewPtrProduceRequest()
			req.Acks, req.TimeoutMillis = -1, 5000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = corruptBatch()
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			writeRequest(conn, req, 1)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = bufio.NewReader(conn).Peek(4)
			conn.Close()
		case 3: // pipelined fetches from the start, responses never read
			for j := 0; j < 16; j++ {
				writeRequest(conn, fetchFromStart(), int32(j))
			}
			held = append(held, conn)
		case 4: // a long poll at the end, abandoned mid-wait
			req := fetchFromStart()
			req.Topics[0].Partitions[0].FetchOffset = 1 << 40
			writeRequest(conn, req, 1)
			sleep(ctx, 50*time.Millisecond)
			conn.Close()
		}
		if len(held) > 20 { // keep a bounded number open, oldest first
			held[0].Close()
			held = held[1:]
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func fetchFromStart() *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.MaxWaitMillis, req.MaxBytes = 5000, 50<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < partitions; p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 10<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// corruptBatch is a one-record uncompressed RecordBatch v2 whose CRC does
// not match its bytes.
func corruptBatch() []byte {
	b := make([]byte, 61+8)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12)) // batch length
	b[16] = 2                                            // magic
	binary.BigEndian.PutUint32(b[17:], 0xdeadbeef)       // wrong CRC
	binary.BigEndian.PutUint32(b[57:], 1)                // one record
	return b
}

// writeRequest frames req with a request header (v1: client id "hostile").
func writeRequest(conn net.Conn, req kmsg.Request, correlationID int32) {
	body := req.AppendTo(nil)
	clientID := "hostile"
	frame := make([]byte, 4, 4+8+2+len(clientID)+len(body))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, uint32(correlationID))
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(clientID)))
	frame = append(frame, clientID...)
	if req.IsFlexible() {
		frame = append(frame, 0) // empty tagged fields of header v2
	}
	frame = append(frame, body...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = conn.Write(frame)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// rss is the resident set of process pid in bytes.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("broker process: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return -1
}

// goroutines scrapes go_goroutines from the admin listener, -1 when it
// cannot.
func goroutines(admin string) int64 {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return int64(n)
			}
		}
	}
	return -1
}
