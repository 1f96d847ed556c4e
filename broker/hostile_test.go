package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Hostile clients: raw frames against a real broker on 127.0.0.1:0, each
// checking that what the client makes the broker hold stays bounded and
// that a normal client is still served.

const mib = 1 << 20

// heapInuse is the process's heap in use after a collection.
func heapInuse() int64 {
	// Two collections: the first moves idle pooled frames (sync.Pool) to
	// the victim cache, the second frees them. A pooled frame nobody holds
	// is reusable memory, not memory a request pins.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// peakHeap samples the live heap (HeapInuse right after a collection, so
// garbage not yet collected does not count) until stop is closed and
// returns the peak.
func peakHeap(stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		for {
			peak = max(peak, heapInuse())
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return out
}

// metricValue is the value of a gauge or counter (summed over labels) in
// the broker's registry.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return v
}

// waitFor polls cond every 5 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// waitNoConnections waits until the broker has no client connection (a
// closed client's connections take a moment to go).
func waitNoConnections(t *testing.T, tb *testBroker) {
	t.Helper()
	if !waitFor(5*time.Second, func() bool { return metricValue(t, tb.Registry(), "sushka_connections") == 0 }) {
		t.Fatalf("%v connections still open", metricValue(t, tb.Registry(), "sushka_connections"))
	}
}

// expectServed checks that a fresh connection gets an ApiVersions answer.
func expectServed(t *testing.T, addr string) {
	t.Helper()
	c := dialRaw(t, addr)
	c.send(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 77))
	if _, corr, err := c.readResponse(); err != nil || corr != 77 {
		t.Fatalf("a normal client is not served: correlation id %d, %v", corr, err)
	}
	c.nc.Close()
}

// frameHeader is the start of a frame announcing size bytes: the size and
// a request header (ApiVersions v0), as a client that then stalls sends.
func frameHeader(size int) []byte {
	buf := binary.BigEndian.AppendUint32(nil, uint32(size))
	buf = binary.BigEndian.AppendUint16(buf, 18)
	buf = binary.BigEndian.AppendUint16(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, 1)
	return binary.BigEndian.AppendUint16(buf, 0xffff)
}

// TestHostileAnnouncedFramesCostNothing: connections announcing 100 MiB
// frames and sending nothing more leave the heap about where it was (the
// body is read as it arrives, and only the budget's worth is reserved),
// the reservations show on the gauge, and a normal client is served.
func TestHostileAnnouncedFramesCostNothing(t *testing.T) {
	const budget = 256 * mib
	tb := startBroker(t, withLimits(Config{}, limits{requestMemory: budget}))
	before := heapInuse()
	const conns = 10 // announcing 1000 MiB
	for range conns {
		c := dialRaw(t, tb.AdvertisedAddr())
		c.send(frameHeader(100 * mib))
	}
	waitFor(2*time.Second, func() bool { return requestMemoryInUse(tb) >= 2*100*mib })
	if got := metricValue(t, tb.Registry(), "sushka_request_memory_bytes"); got != 2*100*mib {
		t.Errorf("sushka_request_memory_bytes = %v, want two frames of 100 MiB reserved", got)
	}
	grown := heapInuse() - before
	t.Logf("heap grew by %d KiB for %d announced 100 MiB frames", grown>>10, conns)
	if grown > budget+16*mib {
		t.Fatalf("heap grew by %d MiB for frames that never arrived; the budget is %d MiB", grown/mib, budget/mib)
	}
	if grown > 16*mib {
		t.Fatalf("heap grew by %d MiB for frames whose bodies never arrived", grown/mib)
	}
	expectServed(t, tb.AdvertisedAddr())
}

// TestHostileFrameAboveBudgetRefused: a frame larger than the whole memory
// budget could never be reserved; it is refused like an oversized frame,
// closing only its connection.
func TestHostileFrameAboveBudgetRefused(t *testing.T) {
	tb := startBroker(t, withLimits(Config{}, limits{requestMemory: 1 * mib}))
	c := dialRaw(t, tb.AdvertisedAddr())
	c.send(frameHeader(2 * mib))
	c.expectClosed()
	expectServed(t, tb.AdvertisedAddr())
}

// TestHostileFullFramesWaitForBudget: many connections sending large frames
// at once are read at most a budget's worth at a time; the others wait
// (their sends block) instead of each getting its frame allocated.
func TestHostileFullFramesWaitForBudget(t *testing.T) {
	const budget = 64 * mib
	tb := startBroker(t, withLimits(Config{}, limits{requestMemory: budget}))
	const frameSize = 30 * mib
	frame := frameHeader(frameSize)
	frame = append(frame, make([]byte, frameSize+4-len(frame))...) // a body that does not decode
	before := heapInuse()

	stop := make(chan struct{})
	peak := peakHeap(stop)
	var wg sync.WaitGroup
	const conns = 16
	for range conns {
		c := dialRaw(t, tb.AdvertisedAddr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
			c.nc.Write(frame) // the broker closes the connection after reading it
			var b [1]byte
			c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			c.nc.Read(b[:])
		}()
	}
	wg.Wait()
	close(stop)
	grown := <-peak - before
	t.Logf("peak heap grew by %d MiB for %d frames of %d MiB with a %d MiB budget", grown/mib, conns, frameSize/mib, budget/mib)
	// Live frames are within the budget; the frame pool may keep as much
	// again (what was in use before the last collection) for reuse.
	if grown > 2*budget+32*mib {
		t.Fatalf("peak heap grew by %d MiB; the budget is %d MiB", grown/mib, budget/mib)
	}
	if n := requestMemoryInUse(tb); n != 0 {
		t.Fatalf("%d bytes still reserved after every frame was refused", n)
	}
	expectServed(t, tb.AdvertisedAddr())
}

// paddedFetch is a fetch of topic/0 at offset that waits maxWait, padded
// with trailing bytes (which decoding ignores) to about size bytes.
func paddedFetch(topic string, offset int64, maxWait time.Duration, corr int32, size int) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	req.MaxWaitMillis = int32(maxWait.Milliseconds())
	req.MinBytes, req.MaxBytes = 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = offset, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	frame := encodeRequest(req, corr)
	frame = append(frame, make([]byte, max(0, size-len(frame)))...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// TestHostileLongPollsHoldNoFrames: long-poll fetches padded to 8 MiB do not
// keep their frames while they wait, and when the client goes their waits
// end at once (the connection is gone from the gauge long before MaxWait).
func TestHostileLongPollsHoldNoFrames(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "polled", 1, "x")
	cl.Close()
	waitNoConnections(t, tb)

	c := dialRaw(t, tb.AdvertisedAddr())
	frames := make([][]byte, 16)
	for i := range frames {
		frames[i] = paddedFetch("polled", 1, 20*time.Second, int32(i), 8*mib)
	}
	before := heapInuse()
	for _, f := range frames {
		c.send(f)
	}
	if !waitFor(5*time.Second, func() bool { return tb.RequestCount(1) >= 16 }) {
		t.Fatalf("only %d fetches arrived", tb.RequestCount(1))
	}
	time.Sleep(100 * time.Millisecond)
	grown := heapInuse() - before
	t.Logf("heap grew by %d MiB with 16 long polls of 8 MiB frames waiting", grown/mib)
	if grown > 24*mib {
		t.Fatalf("16 waiting fetches of 8 MiB hold %d MiB", grown/mib)
	}
	runtime.KeepAlive(frames) // the client's copies are not what we measure
	if n := requestMemoryInUse(tb); n != 0 {
		t.Fatalf("waiting fetches hold %d bytes of the request memory budget", n)
	}
	c.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	if _, err := c.nc.Read(b[:]); !isTimeout(err) {
		t.Fatalf("the fetches did not wait: %v", err)
	}

	c.nc.Close()
	start := time.Now()
	if !waitFor(3*time.Second, func() bool { return metricValue(t, tb.Registry(), "sushka_connections") == 0 }) {
		t.Fatalf("the closed connection's long polls still hold it after %v (MaxWait 20s)", time.Since(start))
	}
	t.Logf("connection gone %v after the client closed it", time.Since(start))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// slowWrites makes every write of a partition log take d.
func slowWrites(d time.Duration) vfs.FS {
	return vfs.NewErrorFS(vfs.Default, vfs.InjectorFunc(func(op vfs.Op, path string) error {
		if (op == vfs.OpWrite || op == vfs.OpWritev || op == vfs.OpWriteAt) && strings.HasSuffix(path, ".log") {
			time.Sleep(d)
		}
		return nil
	}))
}

// TestHostileAcksZeroProduceIsBounded: an acks=0 producer on a slow disk
// cannot queue more request bytes than the budget: its requests are held
// (in flight, reserved) until their records are written.
func TestHostileAcksZeroProduceIsBounded(t *testing.T) {
	const budget = 16 * mib
	tb := startBroker(t, withLimits(Config{FS: slowWrites(30 * time.Millisecond)}, limits{requestMemory: budget}))
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "acks0", 1, "x")
	cl.Close()

	var records []byte // 4 batches of 900 KiB, under max.message.bytes
	for range 4 {
		records = append(records, batch.Build(batch.BuildOptions{Records: 1, ValueSize: 900 << 10, ProducerID: -1})...)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, 0, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "acks0"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	frame := encodeRequest(req, 1)
	before := heapInuse()

	c := dialRaw(t, tb.AdvertisedAddr())
	stop := make(chan struct{})
	peak := peakHeap(stop)
	const n = 32 // 112 MiB
	for range n {
		c.send(frame)
	}
	// Responses leave in order: this one comes once every produce before
	// it is done.
	c.send(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 99))
	if _, corr, err := c.readResponse(); err != nil || corr != 99 {
		t.Fatalf("ApiVersions after the produces: %d %v", corr, err)
	}
	close(stop)
	grown := <-peak - before
	t.Logf("peak heap grew by %d MiB for %d acks=0 produces of 3.6 MiB on a slow disk (budget %d MiB)", grown/mib, n, budget/mib)
	if grown > 2*budget+16*mib {
		t.Fatalf("acks=0 produces made the heap grow by %d MiB; the budget is %d MiB", grown/mib, budget/mib)
	}
}

// TestHostileConnectionLimits: connections over the per-IP and the total
// limit are accepted and closed at once, counted by limit, and a slot
// freed is usable again.
func TestHostileConnectionLimits(t *testing.T) {
	tb := startBroker(t, withLimits(Config{}, limits{maxConnections: 5, maxConnectionsPerIP: 3}))
	addr := tb.AdvertisedAddr()
	dialFrom := func(ip string) *rawConn {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return &rawConn{t: t, nc: nc}
	}
	served := func(c *rawConn) bool {
		c.send(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 5))
		_, corr, err := c.readResponse()
		return err == nil && corr == 5
	}
	var open []*rawConn
	for range 3 {
		c := dialFrom("127.0.0.1")
		if !served(c) {
			t.Fatal("a connection within the limits is not served")
		}
		open = append(open, c)
	}
	dialFrom("127.0.0.1").expectClosed() // 4th from one IP
	for range 2 {
		c := dialFrom("127.0.0.2")
		if !served(c) {
			t.Fatal("a connection from another IP within the limits is not served")
		}
		open = append(open, c)
	}
	dialFrom("127.0.0.3").expectClosed() // 6th in total
	if got := metricValue(t, tb.Registry(), "sushka_connections_rejected_total"); got != 2 {
		t.Fatalf("sushka_connections_rejected_total = %v, want 2", got)
	}
	open[0].nc.Close()
	var c *rawConn
	ok := waitFor(3*time.Second, func() bool {
		c = dialFrom("127.0.0.1")
		return served(c)
	})
	if !ok {
		t.Fatal("a freed slot is not usable again")
	}
}

// TestHostileIdleAndStalledConnections: an idle connection is closed after
// the idle timeout (but not while a long poll is in flight), a frame that
// stops arriving after its first bytes is cut after the frame timeout, and
// the budget it reserved is returned.
func TestHostileIdleAndStalledConnections(t *testing.T) {
	tb := startBroker(t, withLimits(Config{}, limits{idle: 300 * time.Millisecond, frame: 300 * time.Millisecond}))
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "idle", 1, "x")
	cl.Close()
	addr := tb.AdvertisedAddr()

	t.Run("idle", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.send(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 1))
		if _, _, err := c.readResponse(); err != nil {
			t.Fatal(err)
		}
		c.expectClosed()
	})
	t.Run("long poll is not idle", func(t *testing.T) {
		c := dialRaw(t, addr)
		start := time.Now()
		c.send(paddedFetch("idle", 1, 900*time.Millisecond, 2, 0))
		if _, corr, err := c.readResponse(); err != nil || corr != 2 {
			t.Fatalf("a long poll longer than the idle timeout was cut: %d %v", corr, err)
		}
		if d := time.Since(start); d < 800*time.Millisecond {
			t.Fatalf("a long poll of 900ms was answered after %v: cut as idle", d)
		}
	})
	for name, prefix := range map[string][]byte{
		"stalled body": frameHeader(1000),
		"stalled size": {0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, addr)
			c.send(prefix)
			start := time.Now()
			c.expectClosed()
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("closed after %v", d)
			}
			if !waitFor(time.Second, func() bool { return requestMemoryInUse(tb) == 0 }) {
				t.Fatalf("%d bytes still reserved", requestMemoryInUse(tb))
			}
		})
	}
	expectServed(t, addr)
}

// TestHostileClientStopsReading: a consumer that sends fetches and never
// reads the responses is cut off after the write timeout, which ends the
// sendfile holding the segment.
func TestHostileClientStopsReading(t *testing.T) {
	tb := startBroker(t, withLimits(Config{}, limits{write: 300 * time.Millisecond}))
	cl := tb.client(kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(1<<20))
	value := make([]byte, 512<<10)
	var recs []*kgo.Record
	for range 64 { // 32 MiB
		recs = append(recs, &kgo.Record{Topic: "unread", Value: value})
	}
	if err := cl.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	waitNoConnections(t, tb)

	nc, err := net.Dial("tcp", tb.AdvertisedAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.(*net.TCPConn).SetReadBuffer(4096)
	for i := range 4 {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 11
		req.MaxBytes = 64 * mib
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "unread"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 64 * mib
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		if _, err := nc.Write(encodeRequest(req, int32(i))); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(5*time.Second, func() bool { return metricValue(t, tb.Registry(), "sushka_connections") == 0 }) {
		t.Fatal("a client that stopped reading still holds its connection")
	}
	expectServed(t, tb.AdvertisedAddr())
}

// failingListener fails its first Accept with a permanent error.
type failingListener struct {
	net.Listener
	once sync.Once
}

func (l *failingListener) Accept() (net.Conn, error) {
	var failed bool
	l.once.Do(func() { failed = true })
	if failed {
		return nil, errors.New("listener broken")
	}
	return l.Listener.Accept()
}

// TestHostileServeFailureFreesThePort: when Serve fails, its listener is
// closed (the port leaves LISTEN) even while a client that stopped reading
// holds a connection, and Shutdown returns by its deadline.
func TestHostileServeFailureFreesThePort(t *testing.T) {
	tb := startBroker(t, Config{})
	cl := tb.client(kgo.AllowAutoTopicCreation())
	produceN(t, cl, "slow", 1, "x")

	// A slow client on the broker's first listener: it sends a request
	// and never reads.
	slow := dialRaw(t, tb.AdvertisedAddr())
	slow.send(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 1))

	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := inner.Addr().String()
	if err := tb.Serve(&failingListener{Listener: inner}); err == nil || errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve on a broken listener returned %v", err)
	}
	if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		nc.Close()
		t.Fatalf("%s is still in LISTEN after Serve failed", addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	tb.Shutdown(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %v with a 300ms deadline", d)
	}
	<-tb.done
	tb.Broker = nil
	if nc, err := net.DialTimeout("tcp", slow.nc.RemoteAddr().String(), time.Second); err == nil {
		nc.Close()
		t.Fatal("the broker's listener is still in LISTEN after Shutdown")
	}
}

// joinGroup sends a JoinGroup v5 for group as memberID and returns the
// response.
func joinGroup(t *testing.T, c *rawConn, group, memberID string, corr int32) *kmsg.JoinGroupResponse {
	t.Helper()
	c.send(encodeRequest(joinGroupRequest(group, memberID), corr))
	body, got, err := c.readResponse()
	if err != nil || got != corr {
		t.Fatalf("JoinGroup: correlation id %d, %v", got, err)
	}
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = 5
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// joinGroupRequest is a consumer's JoinGroup v5 with a 60 s rebalance
// timeout.
func joinGroupRequest(group, memberID string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 5
	req.Group, req.MemberID, req.ProtocolType = group, memberID, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 60000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	req.Protocols = append(req.Protocols, p)
	return req
}

// TestHostileJoinGroupWaitEndsWithConnection: a member whose JoinGroup is
// waiting for a rebalance (the other member never rejoins) and that closes
// its connection does not keep the connection's handler until the rebalance
// times out.
func TestHostileJoinGroupWaitEndsWithConnection(t *testing.T) {
	tb := startBroker(t, Config{})
	a := dialRaw(t, tb.AdvertisedAddr())
	ja := joinGroup(t, a, "hostile-g", "", 1) // MEMBER_ID_REQUIRED
	ja = joinGroup(t, a, "hostile-g", ja.MemberID, 2)
	if ja.ErrorCode != 0 {
		t.Fatalf("first member's join: error %d", ja.ErrorCode)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Version = 3
	sync.Group, sync.Generation, sync.MemberID = "hostile-g", ja.Generation, ja.MemberID
	as := kmsg.NewSyncGroupRequestGroupAssignment()
	as.MemberID = ja.MemberID
	sync.GroupAssignment = append(sync.GroupAssignment, as)
	a.send(encodeRequest(sync, 3))
	if _, _, err := a.readResponse(); err != nil {
		t.Fatal(err)
	}

	b := dialRaw(t, tb.AdvertisedAddr())
	jb := joinGroup(t, b, "hostile-g", "", 4)
	b.send(encodeRequest(joinGroupRequest("hostile-g", jb.MemberID), 5)) // waits: member a has not rejoined
	time.Sleep(200 * time.Millisecond)
	b.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var one [1]byte
	if _, err := b.nc.Read(one[:]); !isTimeout(err) {
		t.Fatalf("the second join did not wait: %v", err)
	}
	if got := metricValue(t, tb.Registry(), "sushka_connections"); got != 2 {
		t.Fatalf("%v connections, want 2", got)
	}
	b.nc.Close()
	start := time.Now()
	if !waitFor(3*time.Second, func() bool { return metricValue(t, tb.Registry(), "sushka_connections") == 1 }) {
		t.Fatalf("the closed connection's JoinGroup still holds it after %v (rebalance timeout 60s)", time.Since(start))
	}
	t.Logf("connection gone %v after the client closed it", time.Since(start))
}

// TestHostileShutdownBoundedBySlowDisk: partition logs that take long to
// sync at close do not keep Shutdown past its deadline.
func TestHostileShutdownBoundedBySlowDisk(t *testing.T) {
	var slow atomic.Bool
	fs := vfs.NewErrorFS(vfs.Default, vfs.InjectorFunc(func(op vfs.Op, path string) error {
		if slow.Load() && (op == vfs.OpSync || op == vfs.OpSyncDir) {
			time.Sleep(time.Second)
		}
		return nil
	}))
	tb := startBroker(t, Config{FS: fs})
	// The logs finish closing in the background: let them before the data
	// directory is removed.
	t.Cleanup(func() { slow.Store(false); time.Sleep(1500 * time.Millisecond) })
	cl := tb.client(kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	produceN(t, cl, "slow-close", 10, "x")
	cl.Close()
	slow.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := tb.Shutdown(ctx)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown with a 200ms deadline took %v (err %v)", d, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline returned %v", err)
	}
	<-tb.done
	tb.Broker = nil
}
