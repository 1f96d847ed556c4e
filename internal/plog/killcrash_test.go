package plog

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// killChildEnv makes the test binary an appender that the parent SIGKILLs.
const killChildEnv = "SUSHKA_LOG_KILL_CHILD"

// killBatch is the batch the child appends for key: a pure function of key,
// so the parent can rebuild what was acknowledged.
func killBatch(key int64) []byte {
	return batch.Build(batch.BuildOptions{
		Records: 1 + int(key%7), ValueSize: int(key % 900), ProducerID: -1,
		BaseTimestamp: 1_700_000_000_000 + key,
	})
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(killChildEnv); spec != "" {
		runKillChild(spec)
		return
	}
	if spec := os.Getenv(killTxnChildEnv); spec != "" {
		runKillTxnChild(spec)
		return
	}
	os.Exit(m.Run())
}

// runKillChild appends AckForced batches from several goroutines forever,
// printing "ack KEY OFFSET" after each acknowledgement. spec is
// "dir,writePath,firstKey".
func runKillChild(spec string) {
	parts := strings.Split(spec, ",")
	wp, _ := strconv.Atoi(parts[1])
	first, _ := strconv.ParseInt(parts[2], 10, 64)
	cfg := DefaultConfig(vfs.OS(), parts[0])
	cfg.WritePath, cfg.SegmentBytes, cfg.Logger = WritePath(wp), 256<<10, quietLogger
	l, err := Open(cfg)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	var mu sync.Mutex
	next := first
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				key := next
				next++
				mu.Unlock()
				res, err := l.Append(killBatch(key), AckForced)
				mu.Lock()
				if err != nil {
					fmt.Fprintln(out, "error", err)
				} else {
					fmt.Fprintln(out, "ack", key, res.BaseOffset)
				}
				out.Flush() // the ack is only "given" once the parent can see it
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestKillDuringForcedAppends SIGKILLs a child process appending with
// AckForced on the OS filesystem at random moments, for several rounds on
// the same directory, and checks after each that every acknowledged batch is
// there, intact, at its offset, and that offsets continue without gap.
func TestKillDuringForcedAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	acked := map[int64]int64{} // key -> offset
	nextKey := int64(0)
	for round := 0; round < 6; round++ {
		wp := WritePath(round % 2)
		cmd, lines := startKillChild(t, fmt.Sprintf("%s=%s,%d,%d", killChildEnv, dir, wp, nextKey))
		kill := time.After(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		roundAcks := 0
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				roundAcks += recordAck(t, line, acked)
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			}
		}
		cmd.Wait()
		for k := range acked {
			nextKey = max(nextKey, k+1)
		}
		nextKey += 10_000 // keys the killed child took but never acknowledged

		cfg := DefaultConfig(vfs.OS(), dir)
		cfg.Logger = quietLogger
		l, err := Open(cfg)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		got := readAll(t, l, 0)
		byOffset := map[int64][]byte{}
		next := int64(0)
		for _, b := range got {
			h, _ := batch.ParseHeader(b)
			if h.BaseOffset != next {
				t.Fatalf("round %d: batch at %d, want %d", round, h.BaseOffset, next)
			}
			byOffset[h.BaseOffset] = b
			next = h.LastOffset() + 1
		}
		for key, off := range acked {
			want := killBatch(key)
			batch.SetBaseOffset(want, off)
			if !bytes.Equal(byOffset[off], want) {
				t.Fatalf("round %d: acknowledged batch %d at offset %d lost or changed", round, key, off)
			}
		}
		l.Close()
		t.Logf("round %d (%v path): %d acks this round, %d in all, log holds %d batches up to offset %d",
			round, []string{"write", "mmap"}[wp], roundAcks, len(acked), len(got), next)
	}
	if len(acked) == 0 {
		t.Fatal("no append was acknowledged in any round")
	}
}

func recordAck(t *testing.T, line string, acked map[int64]int64) int {
	var key, off int64
	if _, err := fmt.Sscanf(line, "ack %d %d", &key, &off); err != nil {
		if strings.HasPrefix(line, "error") {
			t.Fatalf("child append failed: %s", line)
		}
		return 0 // a line torn by the kill
	}
	acked[key] = off
	return 1
}

// startKillChild starts this test binary as a child with env added (which
// makes it the writing child, not a test run), streams its stdout lines,
// and returns once the child has printed "ready".
func startKillChild(t *testing.T, env string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if first := <-lines; first != "ready" {
		t.Fatalf("child: %q", first)
	}
	return cmd, lines
}
