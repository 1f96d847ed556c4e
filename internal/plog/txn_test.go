package plog

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// mkTxn builds a transactional batch of n records of producer pid.
func mkTxn(n int, pid int64, epoch int16, seq int32) []byte {
	return batch.Build(batch.BuildOptions{Records: n, ValueSize: 16, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
		BaseTimestamp: t0.UnixMilli(), Attributes: batch.AttrTransactional})
}

func marker(t testing.TB, l *Log, pid int64, epoch int16, commit bool) int64 {
	t.Helper()
	off, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: pid, ProducerEpoch: epoch, Commit: commit})
	if err != nil {
		t.Fatalf("marker (pid %d, commit %v): %v", pid, commit, err)
	}
	return off
}

// readCommittedAll reads as a read_committed consumer from offset: the
// batches below the LSO and the aborted transactions reported with them.
func readCommittedAll(t testing.TB, l *Log, from int64) (batches []batch.Header, aborted []AbortedTxn) {
	t.Helper()
	for off := from; ; {
		res, err := l.ReadCommitted(off, 1<<20, true)
		if err != nil {
			t.Fatalf("read committed %d: %v", off, err)
		}
		if res.LastStableOffset > res.HighWatermark {
			t.Fatalf("LSO %d above the high watermark %d", res.LastStableOffset, res.HighWatermark)
		}
		if len(res.Chunks) == 0 {
			res.Release()
			return batches, aborted
		}
		for _, a := range res.Aborted {
			if !slices.Contains(aborted, a) {
				aborted = append(aborted, a)
			}
		}
		for _, c := range res.Chunks {
			buf := make([]byte, c.Len)
			if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
				t.Fatal(err)
			}
			for len(buf) > 0 {
				h, _ := batch.ParseHeader(buf)
				if h.LastOffset() >= res.LastStableOffset {
					t.Fatalf("read_committed returned offsets %d-%d at or past the LSO %d", h.BaseOffset, h.LastOffset(), res.LastStableOffset)
				}
				batches = append(batches, h)
				off = h.LastOffset() + 1
				buf = buf[h.Size():]
			}
		}
		res.Release()
	}
}

func TestTxnLastStableOffsetAndMarkers(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		l := f.open(t)
		defer l.Close()
		mustAppend(t, l, mkBatch(3, 10, t0.UnixMilli()), AckForced) // 0-2
		if lso := l.LastStableOffset(); lso != 3 {
			t.Fatalf("LSO without transactions %d, want the high watermark 3", lso)
		}
		mustAppend(t, l, mkTxn(2, 7, 0, 0), AckForced)              // 3-4: pid 7 begins
		mustAppend(t, l, mkBatch(1, 10, t0.UnixMilli()), AckForced) // 5
		mustAppend(t, l, mkTxn(2, 8, 0, 0), AckForced)              // 6-7: pid 8 begins
		mustAppend(t, l, mkTxn(1, 7, 0, 2), AckForced)              // 8
		if lso, hw := l.LastStableOffset(), l.HighWatermark(); lso != 3 || hw != 9 {
			t.Fatalf("LSO %d HW %d, want 3 and 9", lso, hw)
		}
		// A read_committed consumer stops at the LSO; read_uncommitted
		// does not, and both are told the LSO.
		got, _ := readCommittedAll(t, l, 0)
		if len(got) != 1 || got[0].LastOffset() != 2 {
			t.Fatalf("read_committed returned %+v, want the batch 0-2 only", got)
		}
		if res, err := l.Read(3, 1<<20, true); err != nil || len(res.Chunks) == 0 || res.LastStableOffset != 3 {
			t.Fatalf("read_uncommitted at 3: %v chunks %d LSO %d", err, len(res.Chunks), res.LastStableOffset)
		} else {
			res.Release()
		}
		// A producer with a transaction in progress may not write outside it.
		if _, err := l.Append(mkIdempotent(1, 7, 0, 3), AckForced); !errors.Is(err, ErrInvalidTxnState) {
			t.Fatalf("non-transactional batch during a transaction: %v, want ErrInvalidTxnState", err)
		}

		if off := marker(t, l, 7, 0, true); off != 9 { // commits 3-8 of pid 7
			t.Fatalf("commit marker at %d, want 9", off)
		}
		if lso := l.LastStableOffset(); lso != 6 {
			t.Fatalf("LSO after pid 7's commit %d, want 6 (pid 8 is in progress)", lso)
		}
		if off := marker(t, l, 8, 0, false); off != 10 {
			t.Fatalf("abort marker at %d, want 10", off)
		}
		if lso, hw := l.LastStableOffset(), l.HighWatermark(); lso != 11 || hw != 11 {
			t.Fatalf("after both markers LSO %d HW %d, want 11 and 11", lso, hw)
		}
		got, aborted := readCommittedAll(t, l, 0)
		if n := len(got); n != 7 {
			t.Fatalf("read_committed returned %d batches, want all 7", n)
		}
		if !got[6].Control() || got[6].BaseOffset != 10 {
			t.Fatalf("last batch %+v, want the abort marker at 10", got[6])
		}
		want := []AbortedTxn{{ProducerID: 8, FirstOffset: 6, LastOffset: 10, LastStableOffset: 11}}
		if !slices.Equal(aborted, want) {
			t.Fatalf("aborted %+v, want %+v", aborted, want)
		}
		// Reading past the aborted transaction reports it no more.
		if _, aborted := readCommittedAll(t, l, 11); len(aborted) != 0 {
			t.Fatalf("aborted past the marker: %+v", aborted)
		}

		// A marker for a producer with no transaction here is written all
		// the same; an abort of it is indexed from itself to itself.
		if off := marker(t, l, 9, 0, false); off != 11 {
			t.Fatalf("marker without a transaction at %d, want 11", off)
		}
		if _, aborted := readCommittedAll(t, l, 11); !slices.Equal(aborted, []AbortedTxn{{ProducerID: 9, FirstOffset: 11, LastOffset: 11, LastStableOffset: 12}}) {
			t.Fatalf("aborted %+v", aborted)
		}
	})
}

func TestTxnFencing(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	defer l.Close()
	mustAppend(t, l, mkTxn(1, 7, 2, 0), AckForced)
	if _, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: 7, ProducerEpoch: 1, Commit: true}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("marker of an older epoch: %v, want ErrInvalidProducerEpoch", err)
	}
	if _, err := l.Append(mkTxn(1, 7, 1, 1), AckForced); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("batch of an older epoch: %v, want ErrInvalidProducerEpoch", err)
	}
	// The coordinator aborts with a bumped epoch (KIP-890: an epoch per
	// transaction) at coordinator epoch 5.
	if _, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: 7, ProducerEpoch: 3, CoordinatorEpoch: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(mkTxn(1, 7, 2, 1), AckForced); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("batch of the epoch the marker fenced: %v, want ErrInvalidProducerEpoch", err)
	}
	if _, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: 7, ProducerEpoch: 3, CoordinatorEpoch: 4}); !errors.Is(err, ErrCoordinatorFenced) {
		t.Fatalf("marker of an older coordinator: %v, want ErrCoordinatorFenced", err)
	}
	// The new epoch starts its sequences at 0.
	mustAppend(t, l, mkTxn(1, 7, 3, 0), AckForced)
	ps, err := l.Producers()
	if err != nil {
		t.Fatal(err)
	}
	want := []ProducerInfo{{ProducerID: 7, ProducerEpoch: 3, LastSequence: 0, LastTimestamp: t0.UnixMilli(), CoordinatorEpoch: 5, CurrentTxnStartOffset: 2}}
	if !slices.Equal(ps, want) {
		t.Fatalf("producers %+v, want %+v", ps, want)
	}
}

// txnWorkload writes, over several segments, committed, aborted and
// in-progress transactions of several producers, interleaved with plain
// batches, and returns the aborted index a reader must see.
func txnWorkload(t testing.TB, l *Log) {
	t.Helper()
	seq := map[int64]int32{}
	txn := func(pid int64, n int) {
		mustAppend(t, l, mkTxn(n, pid, 0, seq[pid]), AckForced)
		seq[pid] += int32(n)
	}
	for round := range 20 {
		txn(1, 3)
		mustAppend(t, l, mkBatch(2, 300, t0.UnixMilli()), AckForced)
		txn(2, 2)
		txn(1, 1)
		marker(t, l, 1, 0, round%3 != 0) // every third aborted
		txn(3, 4)
		marker(t, l, 2, 0, round%2 == 0)
		marker(t, l, 3, 0, false)
	}
	txn(4, 2) // still in progress
	txn(1, 1) // still in progress
}

func TestTxnRecoveryRebuildsState(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		f.cfg.SegmentBytes = 2 << 10 // many segments: aborts span them
		l := f.open(t)
		txnWorkload(t, l)
		lso, hw := l.LastStableOffset(), l.HighWatermark()
		_, aborted := readCommittedAll(t, l, 0)
		producers, err := l.Producers()
		if err != nil {
			t.Fatal(err)
		}
		if len(l.segments) < 5 || len(aborted) < 30 || lso >= hw {
			t.Fatalf("workload too small: %d segments, %d aborted, LSO %d HW %d", len(l.segments), len(aborted), lso, hw)
		}
		l.Close()

		l = f.open(t)
		defer l.Close()
		if got := l.LastStableOffset(); got != lso {
			t.Fatalf("LSO after recovery %d, want %d", got, lso)
		}
		if _, got := readCommittedAll(t, l, 0); !slices.Equal(got, aborted) {
			t.Fatalf("aborted after recovery\n%+v\nwant\n%+v", got, aborted)
		}
		if got, _ := l.Producers(); !slices.Equal(got, producers) {
			t.Fatalf("producers after recovery\n%+v\nwant\n%+v", got, producers)
		}
		// The transactions in progress before the restart are in progress
		// now: their markers end them.
		marker(t, l, 4, 0, false)
		marker(t, l, 1, 0, true)
		if got, hw := l.LastStableOffset(), l.HighWatermark(); got != hw {
			t.Fatalf("LSO %d after the last markers, want the high watermark %d", got, hw)
		}
	})
}

// TestTxnCrashKeepsDecidedTransactions crashes the filesystem (unsynced
// data torn or lost, as crash_test.go) after markers were acknowledged:
// every acknowledged marker survives, so every decided transaction stays
// decided, and a transaction whose marker never became durable is in
// progress again after recovery (the LSO stays at its first offset).
func TestTxnCrashKeepsDecidedTransactions(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 0x7a))
		mem := vfs.NewMem()
		cfg := DefaultConfig(mem, "/d/t-0")
		cfg.Logger, cfg.SegmentBytes = quietLogger, int64(1024+rng.IntN(4096))
		l, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		decided := map[int64]bool{} // marker offset -> aborted
		undecided := []int64{99}    // producers with no marker
		for i := range 10 + rng.IntN(20) {
			// One producer id per transaction: its sequences start at 0.
			// Data acks=1: only the marker's fsync makes it durable.
			pid := int64(1 + i)
			if _, err := l.Append(mkTxn(1+rng.IntN(3), pid, 0, 0), AckWritten); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) > 0 {
				abort := rng.IntN(2) == 0
				off, err := l.WriteTxnMarker(context.Background(), TxnMarker{ProducerID: pid, Commit: !abort})
				if err != nil {
					t.Fatal(err)
				}
				decided[off] = abort
				continue
			}
			undecided = append(undecided, pid)
		}
		// A last transaction whose data is durable (AckForced) but whose
		// marker is never written.
		res, err := l.Append(mkTxn(2, 99, 0, 0), AckForced)
		if err != nil {
			t.Fatal(err)
		}
		inProgressFrom := res.BaseOffset
		crashed := mem.Crash(rng)
		l.Close()

		cfg.FS = crashed
		l, err = Open(cfg)
		if err != nil {
			t.Fatalf("seed %d: recovery: %v", seed, err)
		}
		if lso := l.LastStableOffset(); lso > inProgressFrom {
			t.Fatalf("seed %d: LSO %d past the transaction in progress at %d", seed, lso, inProgressFrom)
		}
		// Every acknowledged marker is there, and every acknowledged abort
		// is in the index.
		indexed := map[int64]bool{}
		l.mu.RLock()
		for _, s := range l.segments {
			for _, a := range s.aborted {
				indexed[a.LastOffset] = true
			}
		}
		l.mu.RUnlock()
		checkTxnIndexFiles(t, l)
		for off, abort := range decided {
			if indexed[off] != abort {
				t.Fatalf("seed %d: marker at %d (abort %v) indexed %v after the crash", seed, off, abort, indexed[off])
			}
		}
		for _, pid := range undecided {
			marker(t, l, pid, 0, false) // the coordinator's timeout
		}
		if lso, hw := l.LastStableOffset(), l.HighWatermark(); lso != hw {
			t.Fatalf("seed %d: LSO %d after the last marker, HW %d", seed, lso, hw)
		}
		l.Close()
	}
}

func TestTxnAbortedIndexGoesWithRetention(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentBytes = 1 << 10
	l := f.open(t)
	defer l.Close()
	txnWorkload(t, l)
	marker(t, l, 4, 0, true)
	marker(t, l, 1, 0, true)
	_, before := readCommittedAll(t, l, 0)
	cfg := l.config()
	cfg.RetentionBytes = 4 << 10
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	start := l.LogStartOffset()
	if start == 0 {
		t.Fatal("retention deleted nothing")
	}
	_, after := readCommittedAll(t, l, start)
	l.mu.RLock()
	entries, counted := 0, l.abortedEntries
	for _, s := range l.segments {
		entries += len(s.aborted)
	}
	l.mu.RUnlock()
	if entries != counted || entries >= len(before) {
		t.Fatalf("%d entries in the segments left, %d counted, %d before retention", entries, counted, len(before))
	}
	checkTxnIndexFiles(t, l) // the deleted segments' index files went with them
	for _, a := range after {
		if a.LastOffset < start {
			t.Fatalf("aborted transaction %+v of a deleted segment still reported", a)
		}
	}
}

// txnIndexFiles decodes every aborted-transactions index file of dir, by
// segment base offset.
func txnIndexFiles(t testing.TB, fs vfs.FS, dir string) map[int64][]AbortedTxn {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]AbortedTxn{}
	for _, name := range names {
		if !strings.HasSuffix(name, txnIndexSuffix) {
			continue
		}
		base, err := strconv.ParseInt(strings.TrimSuffix(name, txnIndexSuffix), 10, 64)
		if err != nil {
			t.Fatalf("index file %s", name)
		}
		f, err := fs.Open(path.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		size, _ := f.Size()
		b := make([]byte, size)
		f.ReadAt(b, 0)
		f.Close()
		if len(b)%txnIndexEntrySize != 0 {
			t.Fatalf("%s: %d bytes, not whole entries", name, len(b))
		}
		for ; len(b) > 0; b = b[txnIndexEntrySize:] {
			if v := binary.BigEndian.Uint16(b); v != txnIndexVersion {
				t.Fatalf("%s: version %d", name, v)
			}
			out[base] = append(out[base], AbortedTxn{
				ProducerID: int64(binary.BigEndian.Uint64(b[2:])), FirstOffset: int64(binary.BigEndian.Uint64(b[10:])),
				LastOffset: int64(binary.BigEndian.Uint64(b[18:])), LastStableOffset: int64(binary.BigEndian.Uint64(b[26:]))})
		}
	}
	return out
}

// checkTxnIndexFiles checks that the index files hold exactly the
// segments' aborted-transaction entries.
func checkTxnIndexFiles(t testing.TB, l *Log) {
	t.Helper()
	files := txnIndexFiles(t, l.cfg.FS, l.dir)
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, s := range l.segments {
		if !slices.Equal(files[s.base], s.aborted) {
			t.Fatalf("segment %d: index file %+v, in memory %+v", s.base, files[s.base], s.aborted)
		}
		delete(files, s.base)
	}
	if len(files) > 0 {
		t.Fatalf("index files of no segment: %v", files)
	}
}

func TestTxnIndexFiles(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		f.cfg.SegmentBytes = 2 << 10
		l := f.open(t)
		txnWorkload(t, l)
		checkTxnIndexFiles(t, l)
		l.Close()

		// Damage: one index torn, one removed, one left for a segment
		// that is gone. Recovery rebuilds them from the markers.
		files := txnIndexFiles(t, f.fs, f.cfg.Dir)
		var bases []int64
		for base := range files {
			bases = append(bases, base)
		}
		slices.Sort(bases)
		if len(bases) < 3 {
			t.Fatalf("only %d index files", len(bases))
		}
		torn, err := f.fs.OpenReadWrite(path.Join(f.cfg.Dir, txnIndexName(bases[0])))
		if err != nil {
			t.Fatal(err)
		}
		torn.Truncate(txnIndexEntrySize + 5)
		torn.Close()
		if err := f.fs.Remove(path.Join(f.cfg.Dir, txnIndexName(bases[1]))); err != nil {
			t.Fatal(err)
		}
		orphan, _ := f.fs.Create(path.Join(f.cfg.Dir, txnIndexName(999999)))
		orphan.Write(make([]byte, txnIndexEntrySize))
		orphan.Close()

		l = f.open(t)
		defer l.Close()
		checkTxnIndexFiles(t, l)
		if got := txnIndexFiles(t, f.fs, f.cfg.Dir); len(got) != len(files) {
			t.Fatalf("%d index files after recovery, want %d", len(got), len(files))
		}
	})
}

// TestTxnAbortedMatchesDefinition checks every read_committed read's
// Aborted against Kafka's definition computed by brute force over all
// entries: lastOffset >= the read's offset and firstOffset below the offset
// after its last batch, whatever the offset and size of the read.
func TestTxnAbortedMatchesDefinition(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentBytes = 3 << 10
	l := f.open(t)
	defer l.Close()
	txnWorkload(t, l)
	l.mu.RLock()
	var all []AbortedTxn
	for _, s := range l.segments {
		all = append(all, s.aborted...)
	}
	l.mu.RUnlock()
	rng := rand.New(rand.NewPCG(1, 2))
	lso := l.LastStableOffset()
	checked := 0
	for range 2000 {
		off := rng.Int64N(lso)
		res, err := l.ReadCommitted(off, int64(rng.IntN(4<<10)), rng.IntN(2) == 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Chunks) == 0 {
			res.Release()
			continue
		}
		c := res.Chunks[0]
		buf := make([]byte, c.Len)
		c.File.ReadAt(buf, c.Pos)
		next := lastOffset(buf) + 1
		var want []AbortedTxn
		for _, a := range all {
			if a.LastOffset >= off && a.FirstOffset < next {
				want = append(want, a)
			}
		}
		if !slices.Equal(res.Aborted, want) {
			t.Fatalf("read at %d returning up to %d: aborted\n%+v\nwant\n%+v", off, next, res.Aborted, want)
		}
		checked += len(want)
		res.Release()
	}
	if checked == 0 {
		t.Fatal("no read overlapped an aborted transaction")
	}
}
