package broker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recPos is a record's place: partition and offset.
type recPos struct {
	partition int32
	offset    int64
}

// brokerProc is `sushka serve` running as a child process.
type brokerProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	out  *syncLines
}

type syncLines struct {
	mu    sync.Mutex
	lines []string
}

func (s *syncLines) add(l string) {
	s.mu.Lock()
	s.lines = append(s.lines, l)
	s.mu.Unlock()
}

func (s *syncLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, l := range s.lines {
		out += l + "\n"
	}
	return out
}

var listenerLine = regexp.MustCompile(`kafka listener\s+(\S+)`)

func startProc(t *testing.T, bin, dataDir string) *brokerProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--admin-listen", "", "--default-partitions", "3")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &brokerProc{cmd: cmd, done: make(chan struct{}), out: &syncLines{}}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.out.add(sc.Text())
			if m := listenerLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { cmd.Wait(); close(p.done) }()
	select {
	case p.addr = <-addrCh:
	case <-p.done:
		t.Fatalf("sushka serve exited at start-up:\n%s", p.out)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("sushka serve did not start within 60s:\n%s", p.out)
	}
	// A broker the test leaves running (the last one of a crash test) is
	// killed with the test, not left behind holding its port and files.
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.kill()
		}
	})
	return p
}

func (p *brokerProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestSIGKILLKeepsAcknowledgedRecords runs the real binary, produces with
// acks=all, SIGKILLs the broker at a random moment, restarts it on the same
// data directory, and checks that every acknowledged record is there,
// intact, at its offset. Several rounds accumulate on one data directory.
func TestSIGKILLKeepsAcknowledgedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and kills it repeatedly")
	}
	bin := filepath.Join(t.TempDir(), "sushka")
	build := exec.Command("go", "build", "-o", bin, "github.com/sushka-io/sushka/cmd/sushka")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dataDir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	acked := map[recPos]string{}
	var ackedMu sync.Mutex

	const rounds = 4
	for round := range rounds {
		p := startProc(t, bin, dataDir)
		verify(t, p.addr, acked, round)

		cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(time.Millisecond), kgo.RecordDeliveryTimeout(5*time.Second), kgo.RecordRetries(3))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		// Produce blocks while the client's buffer is full, as it is once the
		// broker is killed; this context ends with the round so that no
		// producer waits for a record delivery that cannot happen.
		produceCtx, cancelProduce := context.WithCancel(context.Background())
		var producers sync.WaitGroup
		for g := range 4 {
			producers.Add(1)
			go func() {
				defer producers.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					value := fmt.Sprintf("round%d-g%d-%d-%s", round, g, i, string(make([]byte, rand.IntN(200))))
					wg.Add(1)
					cl.Produce(produceCtx, &kgo.Record{Topic: "crash", Value: []byte(value)}, func(r *kgo.Record, err error) {
						defer wg.Done()
						if err != nil {
							return
						}
						ackedMu.Lock()
						if old, dup := acked[recPos{r.Partition, r.Offset}]; dup {
							t.Errorf("offset %d/%d acknowledged twice: %q and %q", r.Partition, r.Offset, old, value)
						}
						acked[recPos{r.Partition, r.Offset}] = value
						ackedMu.Unlock()
					})
					if i%50 == 49 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		p.kill()
		close(stop)
		cancelProduce()
		producers.Wait()
		cl.Close() // fails what is still buffered
		wg.Wait()
		ackedMu.Lock()
		t.Logf("round %d: %d records acknowledged so far", round, len(acked))
		ackedMu.Unlock()
	}
	p := startProc(t, bin, dataDir)
	defer p.kill()
	verify(t, p.addr, acked, rounds)
}

// verify consumes every partition of "crash" to its end and checks each
// acknowledged record.
func verify(t *testing.T, addr string, acked map[recPos]string, round int) {
	t.Helper()
	if len(acked) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("crash"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	stored := map[recPos]string{}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("round %d: consuming: %v (still to read: %v)", round, ctx.Err(), remaining)
		}
		fs.EachRecord(func(r *kgo.Record) {
			stored[recPos{r.Partition, r.Offset}] = string(r.Value)
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
		})
	}
	for k, v := range acked {
		got, ok := stored[k]
		if !ok {
			t.Fatalf("round %d: acknowledged record %+v (%.20q) is missing after SIGKILL and restart", round, k, v)
		}
		if got != v {
			t.Fatalf("round %d: record %+v is %.20q, acknowledged %.20q", round, k, got, v)
		}
	}
	t.Logf("round %d: all %d acknowledged records intact (%d stored)", round, len(acked), len(stored))
}
