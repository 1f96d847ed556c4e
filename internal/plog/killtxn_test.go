package plog

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

// killTxnChildEnv makes the test binary a transactional producer and
// coordinator that the parent SIGKILLs.
const killTxnChildEnv = "SUSHKA_LOG_KILL_TXN_CHILD"

// runKillTxnChild runs transactions from several goroutines forever: for
// each key, producer id key appends a transactional batch (AckForced) and
// then its marker, an abort for odd keys, and prints "marker KEY OFFSET"
// once the marker is acknowledged. spec is "dir,writePath,firstKey".
func runKillTxnChild(spec string) {
	parts := strings.Split(spec, ",")
	wp, _ := strconv.Atoi(parts[1])
	first, _ := strconv.ParseInt(parts[2], 10, 64)
	cfg := DefaultConfig(vfs.OS(), parts[0])
	cfg.WritePath, cfg.SegmentBytes, cfg.Logger = WritePath(wp), 64<<10, quietLogger
	l, err := Open(cfg)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	var mu sync.Mutex
	next := first
	out := bufio.NewWriter(os.Stdout)
	for range 4 {
		go func() {
			for {
				mu.Lock()
				key := next
				next++
				mu.Unlock()
				_, err := l.Append(mkTxn(1+int(key%5), key, 0, 0), AckForced)
				var off int64
				if err == nil {
					off, err = l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: key, Commit: key%2 == 0})
				}
				mu.Lock()
				if err != nil {
					fmt.Fprintln(out, "error", err)
				} else {
					fmt.Fprintln(out, "marker", key, off)
				}
				out.Flush() // the marker is only "acknowledged" once the parent can see it
				mu.Unlock()
			}
		}()
	}
	select {}
}

// TestKillDuringTransactions SIGKILLs a child running transactions on the
// OS filesystem at random moments, several rounds on one directory, and
// checks after each restart: every acknowledged marker is at its offset,
// every acknowledged abort is in the aborted-transactions index (and its
// file), a transaction whose marker was never acknowledged is either
// decided or in progress (so hidden from read_committed), and once the
// coordinator aborts those (its timeout) the LSO reaches the high
// watermark: nothing is stuck.
func TestKillDuringTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	markers := map[int64]int64{} // key (producer id) -> acknowledged marker offset
	nextKey := int64(1)
	for round := range 4 {
		wp := WritePath(round % 2)
		cmd, lines := startKillChild(t, fmt.Sprintf("%s=%s,%d,%d", killTxnChildEnv, dir, wp, nextKey))
		kill := time.After(time.Duration(50+rng.IntN(300)) * time.Millisecond)
		roundMarkers := 0
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				var key, off int64
				if _, err := fmt.Sscanf(line, "marker %d %d", &key, &off); err == nil {
					markers[key] = off
					roundMarkers++
				} else if strings.HasPrefix(line, "error") {
					t.Fatalf("child: %s", line)
				}
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			}
		}
		cmd.Wait()
		for k := range markers {
			nextKey = max(nextKey, k+1)
		}
		nextKey += 10_000 // keys the killed child took without a marker acknowledged

		cfg := DefaultConfig(vfs.OS(), dir)
		cfg.Logger = quietLogger
		l, err := Open(cfg)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		checkTxnIndexFiles(t, l)
		indexed := map[int64]AbortedTxn{} // by producer id
		l.mu.RLock()
		for _, s := range l.segments {
			for _, a := range s.aborted {
				indexed[a.ProducerID] = a
			}
		}
		l.mu.RUnlock()
		batches := readAll(t, l, l.LogStartOffset())
		at := map[int64]bool{}
		for _, b := range batches {
			at[lastOffset(b)] = true
		}
		for key, off := range markers {
			if !at[off] {
				t.Fatalf("round %d: acknowledged marker of producer %d at %d lost", round, key, off)
			}
			if a, ok := indexed[key]; ok != (key%2 == 1) || ok && a.LastOffset != off {
				t.Fatalf("round %d: producer %d (abort %v, marker %d) indexed %v %+v", round, key, key%2 == 1, off, ok, a)
			}
		}
		// The coordinator's timeout: abort what is still in progress.
		producers, err := l.Producers()
		if err != nil {
			t.Fatal(err)
		}
		hanging := 0
		for _, p := range producers {
			if p.CurrentTxnStartOffset >= 0 {
				if p.CurrentTxnStartOffset < l.LastStableOffset() {
					t.Fatalf("round %d: transaction of %d from %d in progress below the LSO %d", round, p.ProducerID, p.CurrentTxnStartOffset, l.LastStableOffset())
				}
				if _, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: p.ProducerID}); err != nil {
					t.Fatal(err)
				}
				hanging++
			}
		}
		if lso, hw := l.LastStableOffset(), l.HighWatermark(); lso != hw {
			t.Fatalf("round %d: LSO %d stuck below the high watermark %d", round, lso, hw)
		}
		l.Close()
		t.Logf("round %d (%v path): %d markers acknowledged this round, %d in all; %d transactions in progress after the kill, aborted",
			round, []string{"write", "mmap"}[wp], roundMarkers, len(markers), hanging)
	}
	if len(markers) == 0 {
		t.Fatal("no marker was acknowledged in any round")
	}
}
