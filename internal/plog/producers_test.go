package plog

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestProducerExpiry: an idempotent producer idle for
// producer.id.expiration.ms (default one day) is forgotten, by the writer
// and by recovery; its next batch is then accepted whatever its sequence, as
// from a new producer (Kafka accepts any sequence from a producer it has no
// state for).
func TestProducerExpiry(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		l := f.open(t)
		mustAppend(t, l, mkIdempotent(5, 1, 0, 0), AckForced)
		if _, err := l.Append(mkIdempotent(1, 1, 0, 7), AckForced); !errors.Is(err, ErrOutOfOrderSequence) {
			t.Fatalf("gap from a known producer: %v, want ErrOutOfOrderSequence", err)
		}
		f.clock.Advance(23 * time.Hour)
		mustAppend(t, l, mkIdempotent(1, 1, 0, 5), AckForced) // in sequence: still known
		mustAppend(t, l, mkIdempotent(1, 2, 0, 0), AckForced)

		// Idle for a day (and the 10 minutes between checks): forgotten.
		f.clock.Advance(24*time.Hour + producerExpiryCheckInterval)
		if _, err := l.Append(mkIdempotent(1, 1, 0, 9), AckForced); err != nil {
			t.Fatalf("first batch of an expired producer: %v, want it accepted", err)
		}
		l.Close()

		// Recovery knows a producer's last append by its batch's max
		// timestamp: t0 for both (mkIdempotent), two days before this
		// restart, so it restores neither.
		f.clock.Set(t0.Add(2 * 24 * time.Hour))
		l = f.open(t)
		defer l.Close()
		for _, pid := range []int64{1, 2} {
			if _, err := l.Append(mkIdempotent(1, pid, 0, 4), AckForced); err != nil {
				t.Fatalf("after recovery, producer %d expired by its timestamp: %v, want it accepted", pid, err)
			}
		}
	})
}

// TestProducerExpiryRestoresRecent: recovery keeps the producers whose last
// batch is recent.
func TestProducerExpiryRestoresRecent(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	mustAppend(t, l, mkIdempotent(3, 1, 0, 0), AckForced)
	l.Close()
	f.clock.Set(t0.Add(time.Hour))
	l = f.open(t)
	defer l.Close()
	if _, err := l.Append(mkIdempotent(1, 1, 0, 7), AckForced); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap from a producer restored by recovery: %v, want ErrOutOfOrderSequence", err)
	}
}

// TestProducerExpiryReleasesMemory: the state of 100k made-up producer ids
// (one produce each, as a careless or hostile client could send) is
// released once they expire.
func TestProducerExpiryReleasesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a producer table of 100k producers")
	}
	const producers, perAppend = 100_000, 1000
	f := newFixture(t, WriteSyscall)
	f.cfg.FS, f.cfg.Dir = vfs.OS(), t.TempDir() // file bytes off the heap
	f.cfg.SegmentBytes = 1 << 30
	l := f.open(t)
	defer l.Close()
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	one := len(mkIdempotent(1, 0, 0, 0))
	records := make([]byte, 0, perAppend*one)
	before := heap()
	for pid := int64(0); pid < producers; {
		records = records[:0]
		for i := 0; i < perAppend; i++ {
			records = append(records, batch.Build(batch.BuildOptions{Records: 1, ValueSize: 16, ProducerID: 1000 + pid, BaseTimestamp: t0.UnixMilli()})...)
			pid++
		}
		mustAppend(t, l, records, AckWritten)
	}
	full := heap()
	f.clock.Advance(24*time.Hour + producerExpiryCheckInterval)
	mustAppend(t, l, mkBatch(1, 1, t0.UnixMilli()), AckWritten) // the writer looks on an append
	after := heap()
	grown := int64(full) - int64(before)
	released := int64(full) - int64(after)
	t.Logf("%d producers: heap %d -> %d -> %d bytes (%d B per producer; %d released)",
		producers, before, full, after, grown/producers, released)
	if grown < producers*100 {
		t.Fatalf("the producer table grew the heap by only %d bytes: not measuring it", grown)
	}
	if released < grown*9/10 {
		t.Fatalf("expiry released %d of the %d bytes the producers took", released, grown)
	}
}
