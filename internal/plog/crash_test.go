package plog

import (
	"bytes"
	"encoding/binary"
	"flag"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
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
// writes, in order or page by page out of order), recovers, and checks the
// log's promises:
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
	ops := 1 + rng.IntN(40)
	// From the holdAt-th append on, the first fsync waits, and the crash
	// happens just before it takes effect: everything written since is
	// unsynced, as behind a slow disk, and only partly survives (in order
	// or, half of the time, page by page out of order).
	holdAt := rng.IntN(ops)
	outOfOrder := rng.IntN(2) == 0
	var holding atomic.Bool
	crashNow := make(chan struct{})
	crashedCh := make(chan *vfs.MemFS, 1)
	var crashOnce sync.Once
	fs := vfs.NewErrorFS(mem, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync && holding.Load() {
			// In the goroutine that syncs: the writer's, on WriteMmap, so no
			// store into the mapping races with the crash. The test goroutine
			// uses rng again only once the crash is taken.
			crashOnce.Do(func() {
				<-crashNow
				crashedCh <- crashMem(mem, rng, outOfOrder)
			})
		}
		return nil
	}))
	cfg := DefaultConfig(fs, "/d/t-0")
	cfg.WritePath, cfg.Logger = wp, quietLogger
	cfg.SegmentBytes = int64(1024 + rng.IntN(32<<10))
	cfg.IndexInterval = 256 + rng.IntN(2048)
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("seed %d: open: %v", seed, err)
	}
	byKey := map[int64]*appended{}
	var forced []*appended // acknowledged before the crash
	type later struct {
		a *appended
		b []byte
		p Pending
	}
	var held []later // enqueued after holdAt, waited for after the crash
	stamp := int64(1_700_000_000_000)
	for op := 0; op < ops; op++ {
		stamp++
		b := batch.Build(batch.BuildOptions{Records: 1 + rng.IntN(5), ValueSize: crashValueSize(rng), ProducerID: -1, BaseTimestamp: stamp})
		a := &appended{offset: -1, ack: AckPolicy(rng.IntN(3))}
		byKey[stamp] = a
		if op == holdAt {
			holding.Store(true)
		}
		if holding.Load() {
			// The syncs wait: an append waited for could wait forever.
			p, err := l.Enqueue(b, a.ack)
			if err != nil {
				t.Fatalf("seed %d: enqueue: %v", seed, err)
			}
			held = append(held, later{a: a, b: b, p: p})
			continue
		}
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
	// Crash now, at the first sync since holdAt: AckNone and other held
	// appends may still be in the writer.
	close(crashNow)
	crashed := <-crashedCh
	for _, h := range held {
		res, err := h.p.Wait()
		if err != nil {
			t.Fatalf("seed %d: held append: %v", seed, err)
		}
		if h.a.ack != AckNone {
			h.a.bytes, h.a.offset = append([]byte(nil), h.b...), res.BaseOffset
		}
	}
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
		t.Errorf("seed %d (%v, out of order %v): recovery failed: %v", seed, wp, outOfOrder, err)
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
			t.Errorf("seed %d (%v, out of order %v): forced batch at offset %d lost after crash (hw %d)", seed, wp, outOfOrder, a.offset, l.HighWatermark())
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

// crashMem crashes mem with writeback in order or out of order.
func crashMem(mem *vfs.MemFS, rng *rand.Rand, outOfOrder bool) *vfs.MemFS {
	if outOfOrder {
		return mem.CrashOutOfOrder(rng)
	}
	return mem.Crash(rng)
}

// crashValueSize is the value size of a crash test's records: mostly small,
// and one batch in four larger than a page (vfs.PageSize), so that with
// out-of-order writeback a lost page can be followed by a whole valid batch.
func crashValueSize(rng *rand.Rand) int {
	if rng.IntN(4) == 0 {
		return 1000 + rng.IntN(2000)
	}
	return rng.IntN(400)
}
