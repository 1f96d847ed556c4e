package broker

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSIGKILLKeepsAcknowledgedCommits runs the real binary, commits group
// offsets (increasing, one committer per partition), SIGKILLs the broker at
// a random moment, restarts it on the same data directory, and checks that
// every commit acknowledged before the kill is there: the committed offset
// is at least the last acknowledged one and never one that was not sent.
func TestSIGKILLKeepsAcknowledgedCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and kills it")
	}
	bin := filepath.Join(t.TempDir(), "sushka")
	build := exec.Command("go", "build", "-o", bin, "github.com/sushka-io/sushka/cmd/sushka")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dataDir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	const partitions = 3
	var acked [partitions]atomic.Int64 // last acknowledged offset, over all rounds
	var next [partitions]int64         // next offset to commit

	for round := range 3 {
		p := startProc(t, bin, dataDir)
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.RetryTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		adm := kadm.NewClient(cl)
		if round == 0 {
			if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, "commits"); err != nil {
				t.Fatal(err)
			}
		} else {
			// Everything acknowledged before the last kill survived.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err := adm.FetchOffsets(ctx, "killed")
			cancel()
			if err != nil {
				t.Fatalf("round %d: fetch offsets: %v\n%s", round, err, p.out)
			}
			for part := range partitions {
				o, _ := got.Lookup("commits", int32(part))
				if o.At < acked[part].Load() {
					t.Fatalf("round %d: commits/%d is at %d after the kill, but %d was acknowledged", round, part, o.At, acked[part].Load())
				}
				if o.At > next[part] {
					t.Fatalf("round %d: commits/%d is at %d, never committed (next was %d)", round, part, o.At, next[part])
				}
				next[part] = max(next[part], o.At)
			}
			t.Logf("round %d: after SIGKILL the committed offsets are intact: %v", round, got)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for part := range partitions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					next[part]++
					off := next[part]
					os := kadm.Offsets{}
					os.Add(kadm.Offset{Topic: "commits", Partition: int32(part), At: off, LeaderEpoch: -1})
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					resp, err := adm.CommitOffsets(ctx, "killed", os)
					cancel()
					if err == nil && resp.Error() == nil {
						acked[part].Store(off)
					}
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		p.kill()
		close(stop)
		wg.Wait()
		cl.Close()
		if acked[0].Load() == 0 {
			t.Fatalf("round %d: no commit was acknowledged before the kill\n%s", round, p.out)
		}
	}
	p := startProc(t, bin, dataDir)
	defer p.kill()
}
