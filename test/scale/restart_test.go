package scale

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	restartBinaries = flag.String("scale.binaries", "", "TestStopStart: comma-separated NAME=PATH of sushka binaries to compare, interleaved (each on a data directory of its own under -scale.dir)")
	restartRounds   = flag.Int("scale.rounds", 3, "TestStopStart: rounds per binary")
	restartStrace   = flag.Bool("scale.strace", false, "TestStopStart: count the system calls of each stop and start with strace -c -f (slows both down: counts only)")
)

// TestStopStart measures the stop and the start of brokers holding
// -scale.partitions partitions written since their last start: for each
// binary of -scale.binaries in turn (A B A B …), a record produced to every
// partition (acks=all), 5 s idle (the writers stop), SIGTERM timed to the
// exit, then a start timed to healthy. Run with -scale.strace, each stop and
// start is counted by strace instead (system calls per partition).
//
//	go test ./test/scale -run TestStopStart -v -timeout 120m -args -scale.partitions 10000 \
//	    -scale.binaries main=/tmp/sushka-main,new=/tmp/sushka-new -scale.dir /work/benchdata/ckpt \
//	    -scale.listen 127.0.0.1:20000 -scale.admin 127.0.0.1:20001
func TestStopStart(t *testing.T) {
	n := *partitions
	if n <= 0 || *restartBinaries == "" {
		t.Skip("a measurement: run with -scale.partitions N -scale.binaries NAME=PATH,...")
	}
	if *dataDir == "" || *listenAddr == "" || *adminAddr == "" {
		t.Fatal("give -scale.dir, -scale.listen and -scale.admin")
	}
	type subject struct {
		name string
		b    *broker
		stop []time.Duration
		up   []time.Duration
	}
	var subjects []*subject
	for _, spec := range strings.Split(*restartBinaries, ",") {
		name, bin, ok := strings.Cut(spec, "=")
		if !ok {
			t.Fatalf("-scale.binaries: %q is not NAME=PATH", spec)
		}
		dir := filepath.Join(*dataDir, fmt.Sprintf("p%d-%s", n, name))
		subjects = append(subjects, &subject{name: name, b: &broker{bin: bin, dir: dir, addr: *listenAddr, admin: *adminAddr}})
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("passport: %s GOMAXPROCS=%d NumCPU=%d loadavg %s, %d partitions", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.TrimSpace(string(load)), n)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Minute)
	defer cancel()
	const topic = "scale"
	writeAll := func(b *broker) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RequestTimeoutOverhead(10*time.Minute),
			kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(n+1))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := os.Stat(filepath.Join(b.dir, topic+"-0")); err != nil {
			admin := kadm.NewClient(cl)
			admin.SetTimeoutMillis(int32((10 * time.Minute).Milliseconds()))
			began := time.Now()
			if _, err := admin.CreateTopic(ctx, int32(n), 1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				t.Fatal(err)
			}
			t.Logf("%s: CreateTopics of %d partitions: %v", b.bin, n, time.Since(began))
		}
		records := make([]*kgo.Record, n)
		for p := range records {
			records[p] = &kgo.Record{Partition: int32(p), Value: []byte("x")}
		}
		if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range *restartRounds {
		for _, s := range subjects {
			s.b.start(t, n)
			writeAll(s.b)
			time.Sleep(5 * time.Second) // the writers stop after 1 s idle
			if *restartStrace {
				out := filepath.Join(*dataDir, fmt.Sprintf("strace-%s-p%d-round%d-stop.txt", s.name, n, round))
				tracer := attachStrace(t, s.b.cmd.Process.Pid, out)
				s.stop = append(s.stop, s.b.stop(t))
				tracer.Wait() // ends with its tracee
				t.Logf("RESULT %s round %d stop under strace (%v): %s", s.name, round, s.stop[len(s.stop)-1], straceSummary(t, out, n))
				out = filepath.Join(*dataDir, fmt.Sprintf("strace-%s-p%d-round%d-start.txt", s.name, n, round))
				tracer = nil
				s.up = append(s.up, s.b.startWith(t, n, func(pid int) { tracer = attachStrace(t, pid, out) }))
				tracer.Process.Signal(os.Interrupt) // detach: the summary is written
				tracer.Wait()
				s.b.stop(t)
				t.Logf("RESULT %s round %d start under strace (%v): %s", s.name, round, s.up[len(s.up)-1], straceSummary(t, out, n))
				continue
			}
			s.stop = append(s.stop, s.b.stop(t))
			s.up = append(s.up, s.b.start(t, n))
			s.b.stop(t)
			t.Logf("RESULT %s round %d: stop %v, start to healthy %v", s.name, round, s.stop[len(s.stop)-1], s.up[len(s.up)-1])
		}
	}
	for _, s := range subjects {
		t.Logf("RESULT %s, %d partitions: stop %s; start %s", s.name, n, spread(s.stop), spread(s.up))
	}
}

// attachStrace counts the system calls of process pid and its threads
// into out until it exits or the tracer is interrupted.
func attachStrace(t *testing.T, pid int, out string) *exec.Cmd {
	t.Helper()
	tracer := exec.Command("strace", "-c", "-f", "-o", out, "-p", strconv.Itoa(pid))
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // attached to the threads there are
	return tracer
}

// spread prints best, median and worst.
func spread(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("best %v median %v worst %v (%d rounds)", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// straceSummary reads strace -c's table: total calls, per partition, and
// the five most frequent.
func straceSummary(t *testing.T, file string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name  string
		calls int
	}
	var rows []row
	total := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || strings.HasPrefix(line, "%") || strings.HasPrefix(line, "-") {
			continue
		}
		// % time, seconds, usecs/call, calls, [errors], syscall
		calls, err := strconv.Atoi(f[3])
		if err != nil {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			total = calls
			continue
		}
		rows = append(rows, row{name, calls})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].calls > rows[j].calls })
	var top []string
	for _, r := range rows[:min(8, len(rows))] {
		top = append(top, fmt.Sprintf("%s %d", r.name, r.calls))
	}
	return fmt.Sprintf("%d system calls, %.1f per partition (%s)", total, float64(total)/float64(n), strings.Join(top, ", "))
}
