package plog

import (
	"bytes"
	"encoding/binary"
	"flag"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

const debugCrash = false

var crashPoints = flag.Int("crash-points", 1000, "simulated crashes in TestSimulatedCrashes")

// contentKey identifies a batch by its content, whatever base offset it was
// given: every batch a crash test appends has a unique base timestamp.
func contentKey(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b[batch.OffsetBaseTimestamp:]))
}

// TestSimulatedCrashes appends with random acks, crashes the in-memory
// filesystem at a random point (keeping a random, torn part of the unsynced
// writes), recovers, and checks the log's promises:
//   - every AckForced-acknowledged batch is there byte for byte at its offset;
//   - nothing that was never appended is returned, and every batch read is
//     valid, at the offset it was given, with offsets contiguous;
//   - appends continue at the high watermark.
func TestSimulatedCrashes(t *testing.T) {
	points := *crashPoints
	if testing.Short() {
		points = 200
	}
	var st crashStats
	defer func() {
		t.Logf("%d crashes: %d batches appended, %d forced, %d recovered, %d lost (never forced)",
			points, st.appended, st.forced, st.recovered, st.appended-st.recovered)
	}()
	for i := 0; i < points; i++ {
		seed := uint64(i)
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		wp := WriteSyscall
		if rng.IntN(2) == 1 {
			wp = WriteMmap
		}
		if !crashOnce(t, seed, rng, wp, &st) {
			return
		}
	}
}

// appended is what the test knows of one appended batch.
type appended struct {
	bytes  []byte // as written (base offset patched) when the offset is known
	offset int64  // -1 for AckNone
	ack    AckPolicy
}

type crashStats struct{ appended, forced, recovered int }

func crashOnce(t *testing.T, seed uint64, rng *rand.Rand, wp WritePath, st *crashStats) bool {
	mem := vfs.NewMem()
	cfg := DefaultConfig(mem, "/d/t-0")
	cfg.WritePath, cfg.Logger = wp, quietLogger
	cfg.SegmentBytes = int64(1024 + rng.IntN(8192))
	cfg.IndexInterval = 256 + rng.IntN(2048)
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("seed %d: open: %v", seed, err)
	}
	byKey := map[int64]*appended{}
	var forced []*appended
	stamp := int64(1_700_000_000_000)
	ops := 1 + rng.IntN(40)
	for op := 0; op < ops; op++ {
		stamp++
		b := batch.Build(batch.BuildOptions{Records: 1 + rng.IntN(5), ValueSize: rng.IntN(400), ProducerID: -1, BaseTimestamp: stamp})
		a := &appended{offset: -1, ack: AckPolicy(rng.IntN(3))}
		if wp == WriteMmap && a.ack == AckNone {
			a.ack = AckWritten // stores into a mapping may not race with Crash
		}
		byKey[stamp] = a
		res, err := l.Append(b, a.ack)
		if err != nil {
			t.Fatalf("seed %d: append: %v", seed, err)
		}
		if a.ack != AckNone {
			a.bytes, a.offset = append([]byte(nil), b...), res.BaseOffset
		}
		if a.ack == AckForced {
			forced = append(forced, a)
		}
	}
	// Crash now: AckNone appends may still be in the writer.
	crashed := mem.Crash(rng)
	l.Close()

	cfg.FS = crashed
	if rng.IntN(4) == 0 { // recovery must not depend on the write path
		cfg.WritePath = 1 - wp
	}
	if debugCrash {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		names, _ := crashed.List(cfg.Dir)
		for _, n := range names {
			fi, _ := crashed.Stat(cfg.Dir + "/" + n)
			t.Logf("after crash: %s %d bytes", n, fi.Size())
		}
	}
	l, err = Open(cfg)
	if err != nil {
		t.Errorf("seed %d (%v): recovery failed: %v", seed, wp, err)
		return false
	}
	defer l.Close()
	got := readAll(t, l, l.LogStartOffset())
	next := l.LogStartOffset()
	readAt := map[int64][]byte{}
	for _, b := range got {
		h, _ := batch.ParseHeader(b)
		if h.BaseOffset != next {
			t.Errorf("seed %d: batch at offset %d, want %d (gap or overlap)", seed, h.BaseOffset, next)
			return false
		}
		a := byKey[contentKey(b)]
		if a == nil {
			t.Errorf("seed %d: recovered a batch that was never appended at offset %d", seed, h.BaseOffset)
			return false
		}
		if a.offset >= 0 && (a.offset != h.BaseOffset || !bytes.Equal(a.bytes, b)) {
			t.Errorf("seed %d: batch appended at %d recovered at %d or changed", seed, a.offset, h.BaseOffset)
			return false
		}
		readAt[h.BaseOffset] = b
		next = h.LastOffset() + 1
	}
	if next != l.HighWatermark() {
		t.Errorf("seed %d: read up to %d, high watermark %d", seed, next, l.HighWatermark())
		return false
	}
	for _, a := range forced {
		if !bytes.Equal(readAt[a.offset], a.bytes) {
			t.Errorf("seed %d (%v): forced batch at offset %d lost after crash (hw %d)", seed, wp, a.offset, l.HighWatermark())
			return false
		}
	}
	st.appended += ops
	st.forced += len(forced)
	st.recovered += len(got)
	hw := l.HighWatermark()
	res, err := l.Append(batch.Build(batch.BuildOptions{Records: 1, ProducerID: -1, BaseTimestamp: stamp + 1}), AckForced)
	if err != nil || res.BaseOffset != hw {
		t.Errorf("seed %d: append after recovery at %d (%v), want %d", seed, res.BaseOffset, err, hw)
		return false
	}
	return true
}
