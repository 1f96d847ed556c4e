// Package scale measures one broker holding many partitions (issue 12,
// item 5): the sushka binary with one topic of -scale.partitions
// partitions, a record in each, then idle; what it holds (RSS, goroutines,
// open descriptors by kind), the latency of Metadata and of Fetch (one
// partition; every partition through a fetch session), and a restart. It
// is a measurement, skipped unless -scale.partitions is given:
//
//	go test ./test/scale -run TestScale -v -timeout 60m -args -scale.partitions 100000 \
//	    -scale.dir /work/benchdata/fetch100k -scale.listen 127.0.0.1:41500 -scale.admin 127.0.0.1:41501
//
// Each figure is printed on a line of its own starting with "RESULT".
package scale

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	sushka "github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/test/testbroker"
)

var (
	partitions = flag.Int("scale.partitions", 0, "run TestScale with one topic of this many partitions (0 skips it)")
	dataDir    = flag.String("scale.dir", "", "data directory of the broker (default: a temporary directory); emptied first")
	listenAddr = flag.String("scale.listen", "", "Kafka listener host:port (default: a free 127.0.0.1 port)")
	adminAddr  = flag.String("scale.admin", "", "admin listener host:port (default: a free 127.0.0.1 port)")
	samples    = flag.Int("scale.samples", 200, "requests per latency figure")
	reuse      = flag.Bool("scale.reuse", false, "measure the topic a previous run left in -scale.dir: no create, no writes, no restart")
	idleFiles  = flag.Duration("scale.idle", 32*time.Second, "how long to leave the broker idle before counting its descriptors again")
)

func TestMain(m *testing.M) { testbroker.Main(m) }

// broker is the sushka serve child process.
type broker struct {
	bin, dir, addr, admin string
	cmd                   *exec.Cmd
	out                   *testbroker.SyncBuffer
	done                  chan struct{}
}

func (b *broker) start(t *testing.T, n int) time.Duration {
	t.Helper()
	return b.startWith(t, n, nil)
}

// startWith is start, calling started with the process once it runs (to
// attach strace to it).
func (b *broker) startWith(t *testing.T, n int, started func(pid int)) time.Duration {
	t.Helper()
	b.out, b.done = &testbroker.SyncBuffer{}, make(chan struct{})
	b.cmd = exec.Command(b.bin, "serve", "--data-dir", b.dir, "--listen", b.addr, "--admin-listen", b.admin,
		"--log-level", "warn", "--max-partitions-per-topic", strconv.Itoa(n), "--max-partitions", strconv.Itoa(n+1000))
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	began := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if started != nil {
		started(b.cmd.Process.Pid)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	// Healthy: the admin listener answers, which it does once every
	// partition is open (the broker opens its logs before it serves).
	for {
		select {
		case <-b.done:
			t.Fatalf("sushka serve exited: %v\n%s", b.cmd.ProcessState, b.out.String())
		default:
		}
		if resp, err := http.Get("http://" + b.admin + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(began)
			}
		}
		if time.Since(began) > 20*time.Minute {
			t.Fatal("not healthy after 20 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *broker) stop(t *testing.T) time.Duration {
	began := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Minute):
		_ = b.cmd.Process.Kill()
		<-b.done
		t.Errorf("not stopped 5 minutes after SIGTERM: killed")
	}
	return time.Since(began)
}

// held is what the broker process holds: RSS, goroutines, descriptors.
type held struct {
	rss        int64
	goroutines int64
	fds        map[string]int // by kind: segment, directory, socket, other files
}

func (h held) String() string {
	kinds := make([]string, 0, len(h.fds))
	total := 0
	for k, v := range h.fds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(kinds)
	return fmt.Sprintf("RSS %.1f MB, %d goroutines, %d descriptors (%s)", float64(h.rss)/1e6, h.goroutines, total, strings.Join(kinds, ", "))
}

func (b *broker) held(t *testing.T) held {
	t.Helper()
	pid := b.cmd.Process.Pid
	h := held{fds: map[string]int{}}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			h.rss = kb << 10
		}
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		kind := "other"
		switch {
		case strings.HasPrefix(target, "socket:"):
			kind = "socket"
		case strings.HasPrefix(target, filepath.Join(b.dir, "meta")+"/"):
			kind = "metadata log"
		case strings.HasPrefix(target, filepath.Join(b.dir, "__")):
			kind = "internal topics"
		case strings.HasSuffix(target, ".log") && strings.HasPrefix(target, b.dir):
			kind = "segment"
		case strings.HasPrefix(target, b.dir):
			if fi, err := os.Stat(target); err == nil && fi.IsDir() {
				kind = "directory"
			} else {
				kind = "data file " + filepath.Base(target)
			}
		}
		h.fds[kind]++
	}
	resp, err := http.Get("http://" + b.admin + "/metrics")
	if err == nil {
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		for _, line := range strings.Split(sb.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
				g, _ := strconv.ParseFloat(v, 64)
				h.goroutines = int64(g)
			}
		}
	}
	return h
}

// latencies prints best, p50, p99 and worst of ds.
func latencies(ds []time.Duration) string {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(f float64) time.Duration { return ds[min(len(ds)-1, int(f*float64(len(ds))))] }
	return fmt.Sprintf("best %v p50 %v p99 %v worst %v (%d requests)", ds[0], q(0.50), q(0.99), ds[len(ds)-1], len(ds))
}

// wire records the time of each response on the wire (from the request
// written to the response read, client decoding excluded) and its bytes.
type wire struct {
	mu    sync.Mutex
	last  time.Duration
	bytes int
}

func (w *wire) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, n int, readWait, timeToRead time.Duration, err error) {
	if err == nil {
		w.mu.Lock()
		w.last, w.bytes = readWait+timeToRead, n
		w.mu.Unlock()
	}
}

func (w *wire) read() (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.bytes
}

func result(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("RESULT "+format, args...)
}

func TestScale(t *testing.T) {
	n := *partitions
	if n <= 0 {
		t.Skip("a measurement: run with -scale.partitions N")
	}
	b := &broker{bin: testbroker.Binary(t), dir: *dataDir, addr: *listenAddr, admin: *adminAddr}
	if b.dir == "" {
		b.dir = t.TempDir()
	}
	if b.addr == "" {
		b.addr = "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))
	}
	if b.admin == "" {
		b.admin = "127.0.0.1:" + strconv.Itoa(testbroker.FreePort(t))
	}
	if !*reuse {
		if err := os.RemoveAll(b.dir); err != nil {
			t.Fatal(err)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("passport: %s GOMAXPROCS=%d NumCPU=%d loadavg %s, %d partitions, data in %s", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.TrimSpace(string(load)), n, b.dir)
	if *reuse {
		result(t, "start on the kept directory: healthy in %v", b.start(t, n))
	} else {
		result(t, "start (empty): healthy in %v", b.start(t, n))
	}
	defer func() {
		select {
		case <-b.done:
		default:
			b.stop(t)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addr), kgo.RequestTimeoutOverhead(10 * time.Minute)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	const topic = "scale"
	if *reuse {
		result(t, "right after the start: %v", b.held(t))
		measure(ctx, t, b, client, topic, n)
		result(t, "after the measurements: %v", b.held(t))
		return
	}
	admin := kadm.NewClient(client())
	admin.SetTimeoutMillis(int32((10 * time.Minute).Milliseconds()))
	began := time.Now()
	if _, err := admin.CreateTopic(ctx, int32(n), 1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}
	result(t, "CreateTopics of %d partitions: %v", n, time.Since(began))
	result(t, "after create: %v", b.held(t))

	// A record in every partition (acks=all).
	producer := client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(n+1))
	began = time.Now()
	records := make([]*kgo.Record, n)
	for p := range records {
		records[p] = &kgo.Record{Partition: int32(p), Value: []byte("x")}
	}
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	result(t, "a record to each of %d partitions (acks=all, one ProduceSync): %v", n, time.Since(began))
	result(t, "right after the writes: %v", b.held(t))
	time.Sleep(5 * time.Second) // writers stop after 1 s idle
	result(t, "idle 5 s after the writes: %v", b.held(t))
	time.Sleep(*idleFiles)
	result(t, "idle %v more (segment files time out after 30 s): %v", *idleFiles, b.held(t))

	measure(ctx, t, b, client, topic, n)

	result(t, "stop (SIGTERM to exit): %v", b.stop(t))
	result(t, "restart: healthy in %v", b.start(t, n))
	result(t, "right after the restart: %v", b.held(t))
	time.Sleep(3 * time.Second)
	result(t, "idle 3 s after the restart: %v", b.held(t))
	time.Sleep(*idleFiles)
	result(t, "idle %v more: %v", *idleFiles, b.held(t))
	measure(ctx, t, b, client, topic, n)
	result(t, "after the measurements: %v", b.held(t))
	var du int64
	filepath.Walk(b.dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			du += (fi.Sys().(*syscall.Stat_t).Blocks) * 512
		}
		return nil
	})
	result(t, "data directory: %.1f MB on disk", float64(du)/1e6)
}

// measure records Metadata and Fetch latencies on the broker's topic of n
// partitions, each holding at least one record.
func measure(ctx context.Context, t *testing.T, b *broker, client func(...kgo.Opt) *kgo.Client, topic string, n int) {
	var w wire
	cl := client(kgo.WithHooks(&w))
	// Metadata of the topic, and of every topic.
	var topicID [16]byte
	for _, all := range []bool{false, true} {
		var ds []time.Duration
		var bytes int
		for range 5 {
			req := kmsg.NewPtrMetadataRequest()
			if !all {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(topic)
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			d, nb := w.read()
			ds, bytes = append(ds, d), nb
			for _, rt := range resp.Topics {
				if rt.Topic != nil && *rt.Topic == topic {
					topicID = rt.TopicID
					if len(rt.Partitions) != n {
						t.Fatalf("metadata: %d partitions, want %d", len(rt.Partitions), n)
					}
				}
			}
		}
		result(t, "Metadata (all topics %v): %d bytes, on the wire %s", all, bytes, latencies(ds))
	}
	fetcher := client(kgo.WithHooks(&w))
	fetchOne := func(p int32, offset int64, maxWait int32) (*kmsg.FetchResponse, time.Duration, int) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = maxWait, 1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, fetcher)
		if err != nil {
			t.Fatal(err)
		}
		d, nb := w.read()
		return resp, d, nb
	}
	// A fetch that has data: one partition (the same each time), and a
	// different idle partition each time (its segment file closed).
	var same, cold []time.Duration
	for i := range *samples {
		_, d, _ := fetchOne(0, 0, 0)
		same = append(same, d)
		_, d, _ = fetchOne(int32(1 + i*(n-1) / *samples), 0, 0)
		cold = append(cold, d)
	}
	result(t, "Fetch of one partition with data, the same partition: on the wire %s", latencies(same))
	result(t, "Fetch of one partition with data, a different idle partition each time: on the wire %s", latencies(cold))

	// A long poll woken by a produce: the fetch waits at the end of one
	// partition, the produce (acks=all) wakes it; from the produce's start
	// to the fetch's answer read.
	producer := client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	var woken, produced []time.Duration
	const part = 7
	for range *samples {
		resp, _, _ := fetchOne(part, 0, 0)
		hwm := resp.Topics[0].Partitions[0].HighWatermark
		answered := make(chan time.Time, 1)
		go func() {
			fetchOne(part, hwm, 10000)
			answered <- time.Now()
		}()
		time.Sleep(20 * time.Millisecond) // the fetch is waiting
		began := time.Now()
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte("wake")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		produced = append(produced, time.Since(began))
		woken = append(woken, (<-answered).Sub(began))
	}
	result(t, "Produce of one record (acks=all) to the partition: %s", latencies(produced))
	result(t, "Long poll of one partition woken by a produce, from the produce's start to the answer: %s", latencies(woken))

	// A consumer of every partition through a fetch session: the first
	// full fetch (at offset 0: every partition has a record; and at the
	// end), then incremental fetches.
	sessionFetch := func(id, epoch, maxWait int32, offsets map[int32]int64) (*kmsg.FetchResponse, time.Duration, time.Duration, int) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionID, req.SessionEpoch = maxWait, 1, 64<<20, id, epoch
		if len(offsets) > 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = topic, topicID
			ps := make([]int32, 0, len(offsets))
			for p := range offsets {
				ps = append(ps, p)
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			for _, p := range ps {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offsets[p], 1<<20
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		began := time.Now()
		resp, err := req.RequestWith(ctx, fetcher)
		if err != nil {
			t.Fatal(err)
		}
		total := time.Since(began)
		if resp.ErrorCode != 0 {
			t.Fatalf("fetch session %d epoch %d: %v", id, epoch, kerr.ErrorForCode(resp.ErrorCode))
		}
		d, nb := w.read()
		return resp, d, total, nb
	}
	all := make(map[int32]int64, n)
	for p := range n {
		all[int32(p)] = 0
	}
	resp, d, total, nb := sessionFetch(0, -1, 0, all)
	records := 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.RecordBatches) > 0 {
				records++
			}
		}
	}
	result(t, "sessionless full fetch of %d partitions at offset 0: %d bytes, on the wire %v (with the client's encoding and decoding %v), %d partitions with records", n, nb, d, total, records)
	ends := make(map[int32]int64, n)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			ends[rp.Partition] = rp.HighWatermark
		}
	}
	resp, d, total, nb = sessionFetch(0, 0, 0, ends)
	id := resp.SessionID
	if id == 0 {
		t.Fatal("no session")
	}
	result(t, "full fetch of %d partitions at their ends, creating a session: %d bytes, on the wire %v (with the client's %v)", n, nb, d, total)
	epoch := int32(1)
	var nothing, nothingWire, one, oneWire, poll, pollWire []time.Duration
	var nothingBytes, oneBytes int
	for i := range *samples {
		_, d, total, nb = sessionFetch(id, epoch, 0, nil)
		epoch++
		nothing, nothingWire, nothingBytes = append(nothing, total), append(nothingWire, d), nb
		p := int32(1 + i*(n-1) / *samples)
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("one")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		resp, d, total, nb = sessionFetch(id, epoch, 0, nil)
		epoch++
		one, oneWire, oneBytes = append(one, total), append(oneWire, d), nb
		changed := map[int32]int64{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				changed[rp.Partition] = rp.HighWatermark
			}
		}
		if len(changed) != 1 {
			t.Fatalf("incremental fetch after a produce to %d: %d partitions answered", p, len(changed))
		}
		// The new offset goes into the next request; a long poll of
		// 10 ms with nothing new (registering with every partition).
		_, d, total, _ = sessionFetch(id, epoch, 10, changed)
		epoch++
		poll, pollWire = append(poll, total), append(pollWire, d)
	}
	result(t, "incremental fetch, nothing changed (MaxWait 0): %d bytes, on the wire %s; with the client's %s", nothingBytes, latencies(nothingWire), latencies(nothing))
	result(t, "incremental fetch, one partition changed (MaxWait 0): %d bytes, on the wire %s; with the client's %s", oneBytes, latencies(oneWire), latencies(one))
	result(t, "incremental fetch, nothing changed, long poll of 10 ms: on the wire %s; with the client's %s", latencies(pollWire), latencies(poll))

	// A session's long poll woken by a produce to one of its partitions.
	var sessionWoken []time.Duration
	for i := range *samples / 4 {
		p := int32(1 + i*(n-1)/(*samples/4))
		answered := make(chan time.Time, 1)
		var answer *kmsg.FetchResponse
		go func(epoch int32) {
			answer, _, _, _ = sessionFetch(id, epoch, 10000, nil)
			answered <- time.Now()
		}(epoch)
		epoch++
		time.Sleep(50 * time.Millisecond)
		began := time.Now()
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("wake")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		sessionWoken = append(sessionWoken, (<-answered).Sub(began))
		changed := map[int32]int64{}
		for _, rt := range answer.Topics {
			for _, rp := range rt.Partitions {
				changed[rp.Partition] = rp.HighWatermark
			}
		}
		// Tell the session the new offset (answered at once: the
		// partition was just produced to).
		sessionFetch(id, epoch, 0, changed)
		epoch++
	}
	result(t, "incremental long poll of the %d-partition session woken by a produce to one, from the produce's start to the answer: %s", n, latencies(sessionWoken))
}

var startProfile = flag.String("scale.startprofile", "", "run TestStartProfile: open the broker on -scale.dir in this process under the CPU profiler and write the profile here")

// TestStartProfile opens a broker in this process on the data directory a
// TestScale run left (-scale.dir) and profiles its start-up (broker.New:
// the catalogue, every partition's recovery), then shuts it down:
//
//	go test ./test/scale -run TestStartProfile -v -args -scale.dir DIR -scale.startprofile start.prof
func TestStartProfile(t *testing.T) {
	if *startProfile == "" || *dataDir == "" {
		t.Skip("a measurement: run with -scale.dir DIR -scale.startprofile FILE")
	}
	f, err := os.Create(*startProfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	b, err := sushka.New(sushka.Config{DataDir: *dataDir, MaxPartitions: -1, MaxPartitionsPerTopic: 1 << 30,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	opened := time.Since(began)
	pprof.StopCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	result(t, "broker.New on %s: %v; heap in use %.1f MB", *dataDir, opened, float64(ms.HeapInuse)/1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
