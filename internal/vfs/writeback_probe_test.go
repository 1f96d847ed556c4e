package vfs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The mechanism of early writeback measured alone, behind a flag (it
// measures a disk, not code):
//
//	go test ./internal/vfs -run TestWritebackProbe -writeback-probe DIR -v
//
// Interleaved, pair by pair: a group of writes (-writeback-group bytes in
// -writeback-chunk writes, -writeback-gap apart, as a partition's writer
// writes while the fdatasync before runs) then one fdatasync, timed alone;
// "started": each write followed by StartWriteback of its whole pages.
var (
	writebackProbeDir = flag.String("writeback-probe", "", "directory on the disk to measure early writeback on (off: empty)")
	writebackGroup    = flag.Int("writeback-group", 1<<20, "bytes written between two fdatasyncs")
	writebackChunk    = flag.Int("writeback-chunk", 256<<10, "bytes per write")
	writebackGap      = flag.Duration("writeback-gap", 500*time.Microsecond, "pause between two writes")
	writebackPairs    = flag.Int("writeback-pairs", 200, "groups of each kind (interleaved), bounded to 60 s")
)

func TestWritebackProbe(t *testing.T) {
	if *writebackProbeDir == "" {
		t.Skip("-writeback-probe DIR not given")
	}
	f, err := Default.Create(filepath.Join(*writebackProbeDir, fmt.Sprintf(".writeback-probe-%d", os.Getpid())))
	must(t, err)
	defer func() { f.Close(); os.Remove(f.Name()) }()
	chunk := make([]byte, *writebackChunk)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>9)
	}
	var pos int64
	var hints []time.Duration // per started group: time in StartWriteback (the writer's cost)
	group := func(started bool) time.Duration {
		var hint time.Duration
		for n := 0; n < *writebackGroup; n += len(chunk) {
			if n > 0 {
				time.Sleep(*writebackGap)
			}
			_, err := f.Write(chunk)
			must(t, err)
			if started {
				from := pos &^ 4095
				pos += int64(len(chunk))
				h := time.Now()
				must(t, f.StartWriteback(from, (pos&^4095)-from))
				hint += time.Since(h)
			} else {
				pos += int64(len(chunk))
			}
		}
		if started {
			hints = append(hints, hint)
		}
		start := time.Now()
		must(t, f.Sync())
		return time.Since(start)
	}
	group(false) // warm-up
	var plain, started []time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < *writebackPairs && time.Now().Before(deadline); i++ {
		plain = append(plain, group(false))
		started = append(started, group(true))
	}
	report := func(name string, d []time.Duration) {
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(int(p*float64(len(d))), len(d)-1)] }
		t.Logf("%-26s n=%d p50 %v p90 %v p99 %v max %v", name, len(d), q(0.5), q(0.9), q(0.99), d[len(d)-1])
	}
	t.Logf("group %d B in writes of %d B, %v apart", *writebackGroup, *writebackChunk, *writebackGap)
	report("fdatasync, plain", plain)
	report("fdatasync, started", started)
	report("StartWriteback per group", hints)
}
