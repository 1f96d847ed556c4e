package plog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

var writePaths = []struct {
	name string
	path WritePath
}{{"write", WriteSyscall}, {"mmap", WriteMmap}}

// forEachPath runs the test on both write paths.
func forEachPath(t *testing.T, fn func(t *testing.T, wp WritePath)) {
	for _, p := range writePaths {
		t.Run(p.name, func(t *testing.T) { fn(t, p.path) })
	}
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type fixture struct {
	fs    vfs.FS
	clock *clock.Manual
	cfg   Config
}

func newFixture(t testing.TB, wp WritePath) *fixture {
	f := &fixture{fs: vfs.NewMem(), clock: clock.NewManual(t0)}
	f.cfg = DefaultConfig(f.fs, "/data/topic-0")
	f.cfg.Clock, f.cfg.WritePath, f.cfg.SegmentBytes, f.cfg.IndexInterval, f.cfg.Logger = f.clock, wp, 64<<10, 512, quietLogger
	return f
}

func (f *fixture) open(t testing.TB) *Log {
	t.Helper()
	l, err := Open(f.cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// mkBatch builds a valid batch of n records of valueSize bytes.
func mkBatch(n, valueSize int, ts int64) []byte {
	return batch.Build(batch.BuildOptions{Records: n, ValueSize: valueSize, ProducerID: -1, BaseTimestamp: ts, TimestampStep: 1})
}

func mkIdempotent(n int, pid int64, epoch int16, seq int32) []byte {
	return batch.Build(batch.BuildOptions{Records: n, ValueSize: 16, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, BaseTimestamp: t0.UnixMilli()})
}

// mustAppend appends b and, for AckWritten (acknowledged before its
// fsync), waits until it is visible too, as an AckForced append is on return.
func mustAppend(t testing.TB, l *Log, b []byte, ack AckPolicy) AppendResult {
	t.Helper()
	wait := l.Wait()
	res, err := l.Append(b, ack)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if ack == AckWritten {
		end := lastOffset(b) + 1
		for l.HighWatermark() < end {
			select {
			case <-wait:
				wait = l.Wait()
			case <-time.After(10 * time.Second):
				t.Fatalf("append of offsets up to %d acknowledged, high watermark still %d", end, l.HighWatermark())
			}
		}
	}
	return res
}

// lastOffset is the last offset of the (patched) batches in records.
func lastOffset(records []byte) int64 {
	last := int64(-1)
	for len(records) > 0 {
		h, _ := batch.ParseHeader(records)
		last = h.LastOffset()
		records = records[h.Size():]
	}
	return last
}

// readAll reads the log from offset to the high watermark through Read and
// returns the batches read.
func readAll(t testing.TB, l *Log, from int64) [][]byte {
	t.Helper()
	var out [][]byte
	for off := from; ; {
		res, err := l.Read(off, 1<<20, true)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if len(res.Chunks) == 0 {
			res.Release()
			return out
		}
		for _, c := range res.Chunks {
			buf := make([]byte, c.Len)
			if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
				t.Fatalf("read chunk: %v", err)
			}
			for len(buf) > 0 {
				b := buf[:12+int(int32(beUint32(buf[8:])))]
				h, err := batch.Validate(b)
				if h.Control() && batch.CRC(b) == h.CRC {
					err = nil // a transaction marker: the broker's, not a producer's
				}
				if err != nil {
					t.Fatalf("read returned a bad batch at offset %d: %v", off, err)
				}
				out = append(out, buf[:h.Size()])
				off = h.LastOffset() + 1
				buf = buf[h.Size():]
			}
		}
		res.Release()
	}
}

func beUint32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func TestAppendAssignsOffsets(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		l := f.open(t)
		defer l.Close()
		want := int64(0)
		for i, n := range []int{1, 10, 3, 100, 1} {
			for _, ack := range []AckPolicy{AckWritten, AckForced} {
				res := mustAppend(t, l, mkBatch(n, 32, t0.UnixMilli()), ack)
				if res.BaseOffset != want {
					t.Fatalf("append %d: base offset %d, want %d", i, res.BaseOffset, want)
				}
				want += int64(n)
			}
		}
		if hw := l.HighWatermark(); hw != want {
			t.Fatalf("high watermark %d, want %d", hw, want)
		}
		got := readAll(t, l, 0)
		next := int64(0)
		for _, b := range got {
			h, _ := batch.ParseHeader(b)
			if h.BaseOffset != next {
				t.Fatalf("batch at %d, want %d", h.BaseOffset, next)
			}
			next = h.LastOffset() + 1
		}
		if next != want {
			t.Fatalf("read up to %d, want %d", next, want)
		}
	})
}

func TestAppendRejectsBadBatches(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.MaxBatchBytes = 2000
	l := f.open(t)
	defer l.Close()
	good := mkBatch(2, 16, t0.UnixMilli())
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 0xff
	big := mkBatch(3, 1000, t0.UnixMilli())
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, batch.ErrCorrupt},
		{"crc", flipped, batch.ErrCorrupt},
		{"truncated", good[:len(good)-1], batch.ErrCorrupt},
		{"trailing garbage", append(append([]byte(nil), good...), 1, 2, 3), batch.ErrCorrupt},
		{"too large", big, ErrBatchTooLarge},
	}
	for _, c := range cases {
		_, err := l.Append(c.in, AckForced)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Fatalf("rejected batches moved the high watermark to %d", hw)
	}
	if sz := l.Size(); sz != 0 {
		t.Fatalf("rejected batches wrote %d bytes", sz)
	}
	// Two batches in one append get consecutive offsets.
	two := append(mkBatch(2, 16, 1), mkBatch(3, 16, 1)...)
	if res := mustAppend(t, l, two, AckForced); res.BaseOffset != 0 || l.HighWatermark() != 5 {
		t.Fatalf("two batches: base %d hw %d", res.BaseOffset, l.HighWatermark())
	}
}

func TestReadRanges(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		l := f.open(t)
		defer l.Close()
		// 20 batches of 5 records each, each batch the same size.
		var size int64
		for i := 0; i < 20; i++ {
			b := mkBatch(5, 100, t0.UnixMilli())
			size = int64(len(b))
			mustAppend(t, l, b, AckWritten)
		}
		cases := []struct {
			offset, maxBytes int64
			atLeastOne       bool
			wantPos, wantLen int64
			wantErr          error
		}{
			{offset: 0, maxBytes: 1 << 20, wantPos: 0, wantLen: 20 * size},
			{offset: 7, maxBytes: 1 << 20, wantPos: size, wantLen: 19 * size},        // inside batch 1
			{offset: 10, maxBytes: 3*size + 1, wantPos: 2 * size, wantLen: 3 * size}, // budget cuts at a boundary
			{offset: 10, maxBytes: 10, atLeastOne: true, wantPos: 2 * size, wantLen: size},
			{offset: 10, maxBytes: 10, atLeastOne: false, wantLen: 0},
			{offset: 99, maxBytes: 1 << 20, wantPos: 19 * size, wantLen: size},
			{offset: 100, maxBytes: 1 << 20, wantLen: 0}, // at the high watermark
			{offset: 101, maxBytes: 1 << 20, wantErr: ErrOffsetOutOfRange},
			{offset: -1, maxBytes: 1 << 20, wantErr: ErrOffsetOutOfRange},
		}
		for _, c := range cases {
			res, err := l.Read(c.offset, c.maxBytes, c.atLeastOne)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("read(%d,%d): err %v, want %v", c.offset, c.maxBytes, err, c.wantErr)
			}
			var pos, n int64
			if len(res.Chunks) == 1 {
				pos, n = res.Chunks[0].Pos, res.Chunks[0].Len
			}
			if n != c.wantLen || (n > 0 && pos != c.wantPos) {
				t.Errorf("read(%d,%d,%v) = pos %d len %d, want pos %d len %d", c.offset, c.maxBytes, c.atLeastOne, pos, n, c.wantPos, c.wantLen)
			}
			res.Release()
		}
	})
}

func TestSegmentsRollAndReopen(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		f.cfg.SegmentBytes = 4096
		l := f.open(t)
		var batches [][]byte
		for i := 0; i < 50; i++ {
			b := mkBatch(1+i%7, 200, t0.UnixMilli()+int64(i))
			mustAppend(t, l, b, AckForced)
			batches = append(batches, append([]byte(nil), b...))
		}
		if n := len(l.segments); n < 5 {
			t.Fatalf("%d segments, want several", n)
		}
		for _, s := range l.segments[:len(l.segments)-1] {
			if s.size > 4096 {
				t.Fatalf("sealed segment %s has %d bytes > segment.bytes", s.path, s.size)
			}
		}
		before := readAll(t, l, 0)
		hw := l.HighWatermark()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = f.open(t)
		defer l.Close()
		if l.HighWatermark() != hw {
			t.Fatalf("reopened high watermark %d, want %d", l.HighWatermark(), hw)
		}
		after := readAll(t, l, 0)
		if len(after) != len(batches) || len(before) != len(batches) {
			t.Fatalf("read %d/%d batches, want %d", len(before), len(after), len(batches))
		}
		for i := range after {
			if !bytes.Equal(after[i], batches[i]) || !bytes.Equal(before[i], batches[i]) {
				t.Fatalf("batch %d differs after reopen", i)
			}
		}
		// Appends continue after the last offset.
		if res := mustAppend(t, l, mkBatch(1, 10, 0), AckForced); res.BaseOffset != hw {
			t.Fatalf("append after reopen at %d, want %d", res.BaseOffset, hw)
		}
	})
}

func TestSegmentRollsByAge(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentMaxAge = time.Hour
	l := f.open(t)
	defer l.Close()
	mustAppend(t, l, mkBatch(1, 10, 0), AckWritten)
	f.clock.Advance(30 * time.Minute)
	mustAppend(t, l, mkBatch(1, 10, 0), AckWritten)
	if n := len(l.segments); n != 1 {
		t.Fatalf("%d segments before segment.ms, want 1", n)
	}
	f.clock.Advance(31 * time.Minute)
	mustAppend(t, l, mkBatch(1, 10, 0), AckWritten)
	if n := len(l.segments); n != 2 {
		t.Fatalf("%d segments after segment.ms, want 2", n)
	}
}

func TestRetention(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentBytes = 2048
	f.cfg.RetentionTime = -1
	l := f.open(t)
	defer l.Close()
	for i := 0; i < 40; i++ {
		mustAppend(t, l, mkBatch(2, 200, t0.Add(time.Duration(i)*time.Minute).UnixMilli()), AckWritten)
	}
	segs := len(l.segments)
	total := l.Size()

	// By bytes: keep at most ~half.
	cfg := f.cfg
	cfg.RetentionBytes = total / 2
	l.SetConfig(cfg)
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if l.Size() > total/2 || len(l.segments) >= segs {
		t.Fatalf("retention.bytes %d left %d bytes in %d segments", total/2, l.Size(), len(l.segments))
	}
	start := l.LogStartOffset()
	if start != l.segments[0].base || start == 0 {
		t.Fatalf("log start %d, first segment %d", start, l.segments[0].base)
	}
	if _, err := l.Read(start-1, 100, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below log start: %v", err)
	}
	names, _ := f.fs.List(f.cfg.Dir)
	segFiles := 0
	for _, n := range names {
		if _, ok := parseSegmentName(n); ok {
			segFiles++
		}
	}
	if segFiles != len(l.segments) {
		t.Fatalf("%d segment files for %d segments", segFiles, len(l.segments))
	}

	// By time: records are stamped one minute apart from t0; at t0+40min
	// with retention 10 min only segments with a record newer than
	// t0+30min stay, and the active one always.
	cfg.RetentionBytes = -1
	cfg.RetentionTime = 10 * time.Minute
	l.SetConfig(cfg)
	f.clock.Set(t0.Add(40 * time.Minute))
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.segments[:len(l.segments)-1] {
		if t0.Add(40*time.Minute).UnixMilli()-s.maxTs > (10 * time.Minute).Milliseconds() {
			t.Fatalf("segment %d with max timestamp %d outlived retention", s.base, s.maxTs)
		}
	}
	// The active segment survives even when expired.
	f.clock.Set(t0.Add(24 * time.Hour))
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if len(l.segments) != 1 || l.LogStartOffset() != l.segments[0].base {
		t.Fatalf("after full expiry: %d segments, log start %d", len(l.segments), l.LogStartOffset())
	}
}

func TestDeleteRecordsBefore(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.SegmentBytes = 2048
	l := f.open(t)
	for i := 0; i < 30; i++ {
		mustAppend(t, l, mkBatch(2, 200, t0.UnixMilli()), AckWritten)
	}
	hw := l.HighWatermark()
	if _, err := l.DeleteRecordsBefore(hw + 1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("delete past hw: %v", err)
	}
	start, err := l.DeleteRecordsBefore(31)
	if err != nil || start != 31 {
		t.Fatalf("delete before 31: %d %v", start, err)
	}
	if l.segments[0].base > 31 || (len(l.segments) > 1 && l.segments[1].base <= 31) {
		t.Fatalf("segments not trimmed: first %d", l.segments[0].base)
	}
	// A read at the new start begins at the batch holding offset 31.
	got := readAll(t, l, 31)
	if h, _ := batch.ParseHeader(got[0]); h.BaseOffset != 30 {
		t.Fatalf("first batch read at %d", h.BaseOffset)
	}
	l.Close()
	l = f.open(t)
	defer l.Close()
	if l.LogStartOffset() != 31 {
		t.Fatalf("log start after reopen %d, want 31 (checkpoint)", l.LogStartOffset())
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		f.cfg.SegmentBytes = 4096
		l := f.open(t)
		defer l.Close()
		// Batch i has 4 records stamped base+i*100 + 0,1,2,3 (Build spaces
		// records 1 ms apart).
		base := t0.UnixMilli()
		for i := 0; i < 40; i++ {
			mustAppend(t, l, mkBatch(4, 100, base+int64(i)*100), AckWritten)
		}
		cases := []struct {
			ts         int64
			wantOffset int64
			found      bool
		}{
			{base - 5, 0, true},
			{base, 0, true},
			{base + 2, 2, true},
			{base + 150, 4, true}, // between batches 1 and 2: first record of batch 2 is at +200? no: batch 1 starts at +100
			{base + 3900, 156, true},
			{base + 3903, 159, true},
			{base + 3904, -1, false},
		}
		// base+150: batch 1 covers +100..+103, batch 2 starts at +200 → offset 8.
		cases[3].wantOffset = 8
		for _, c := range cases {
			off, _, found, err := l.OffsetForTimestamp(c.ts)
			if err != nil || found != c.found || (found && off != c.wantOffset) {
				t.Errorf("OffsetForTimestamp(base%+d) = %d %v %v, want %d %v", c.ts-base, off, found, err, c.wantOffset, c.found)
			}
		}
		off, ts := l.MaxTimestamp()
		if off != 159 || ts != base+3903 {
			t.Fatalf("MaxTimestamp = %d, %d; want 159, base+3903", off, ts-base)
		}
	})
}

func TestLogAppendTime(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	f.cfg.TimestampType = LogAppendTime
	l := f.open(t)
	defer l.Close()
	res := mustAppend(t, l, mkBatch(3, 10, 12345), AckForced)
	if res.LogAppendTime != t0.UnixMilli() {
		t.Fatalf("log append time %d, want %d", res.LogAppendTime, t0.UnixMilli())
	}
	got := readAll(t, l, 0)
	h, err := batch.Validate(got[0])
	if err != nil || !h.LogAppendTime() || h.MaxTimestamp != t0.UnixMilli() {
		t.Fatalf("stored batch: %+v %v", h, err)
	}
}

func TestIdempotentProducer(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	const pid = 7
	mustAppend(t, l, mkIdempotent(3, pid, 0, 0), AckForced) // offsets 0-2, seq 0-2
	mustAppend(t, l, mkIdempotent(2, pid, 0, 3), AckForced) // offsets 3-4, seq 3-4

	// A retried duplicate gets its original offset back and writes nothing.
	res, err := l.Append(mkIdempotent(3, pid, 0, 0), AckForced)
	if !errors.Is(err, ErrDuplicateSequence) || res.BaseOffset != 0 {
		t.Fatalf("duplicate: %+v %v", res, err)
	}
	if l.HighWatermark() != 5 {
		t.Fatalf("duplicate was written: hw %d", l.HighWatermark())
	}
	// A gap is refused.
	if _, err := l.Append(mkIdempotent(1, pid, 0, 9), AckForced); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	// A new epoch must start at 0; an old epoch is fenced afterwards.
	if _, err := l.Append(mkIdempotent(1, pid, 1, 5), AckForced); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("new epoch at seq 5: %v", err)
	}
	mustAppend(t, l, mkIdempotent(1, pid, 1, 0), AckForced)
	if _, err := l.Append(mkIdempotent(1, pid, 0, 5), AckForced); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old epoch: %v", err)
	}
	// State is rebuilt from the log on reopen.
	l.Close()
	l = f.open(t)
	defer l.Close()
	res, err = l.Append(mkIdempotent(1, pid, 1, 0), AckForced)
	if !errors.Is(err, ErrDuplicateSequence) || res.BaseOffset != 5 {
		t.Fatalf("duplicate after reopen: %+v %v", res, err)
	}
	if res := mustAppend(t, l, mkIdempotent(1, pid, 1, 1), AckForced); res.BaseOffset != 6 {
		t.Fatalf("next after reopen at %d", res.BaseOffset)
	}
}

func TestStickyIOError(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		var mu sync.Mutex
		failSync := false
		f.cfg.FS = vfs.NewErrorFS(f.fs, vfs.InjectorFunc(func(op vfs.Op, p string) error {
			mu.Lock()
			defer mu.Unlock()
			if failSync && op == vfs.OpSync {
				return vfs.ErrInjected
			}
			return nil
		}))
		l := f.open(t)
		defer l.Close()
		mustAppend(t, l, mkBatch(1, 10, 0), AckForced)
		mu.Lock()
		failSync = true
		mu.Unlock()
		_, err := l.Append(mkBatch(1, 10, 0), AckForced)
		var ioErr *IOError
		if !errors.As(err, &ioErr) {
			t.Fatalf("append with failing fsync: %v", err)
		}
		mu.Lock()
		failSync = false // the disk "recovers": the log must not
		mu.Unlock()
		for _, ack := range []AckPolicy{AckWritten, AckForced} {
			if _, err := l.Append(mkBatch(1, 10, 0), ack); !errors.As(err, &ioErr) {
				t.Fatalf("append after failure (ack %d): %v, want the sticky error", ack, err)
			}
		}
		if l.Err() == nil {
			t.Fatal("Err() is nil after a failed fsync")
		}
		// Reads of what was published still work.
		if got := readAll(t, l, 0); len(got) < 1 {
			t.Fatal("published data unreadable after failure")
		}
	})
}

func TestRecoveryTruncatesTornTail(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		l := f.open(t)
		for i := 0; i < 5; i++ {
			mustAppend(t, l, mkBatch(3, 50, 0), AckForced)
		}
		l.Close()
		name := path.Join(f.cfg.Dir, segmentName(0))
		file, _ := f.fs.OpenReadWrite(name)
		size, _ := file.Size()
		// Append half a batch (a torn write) and then zeros (preallocation).
		half := mkBatch(3, 50, 0)
		batch.SetBaseOffset(half, 15)
		file.WriteAt(half[:len(half)/2], size)
		file.Truncate(size + 10000)
		file.Close()

		l = f.open(t)
		defer l.Close()
		if l.HighWatermark() != 15 {
			t.Fatalf("hw after torn tail %d, want 15", l.HighWatermark())
		}
		if res := mustAppend(t, l, mkBatch(1, 50, 0), AckForced); res.BaseOffset != 15 {
			t.Fatalf("append after truncation at %d", res.BaseOffset)
		}
		if n := len(readAll(t, l, 0)); n != 6 {
			t.Fatalf("%d batches after recovery, want 6", n)
		}
	})
}

func TestRecoveryRefusesMidLogCorruption(t *testing.T) {
	for _, where := range []string{"sealed segment", "last segment"} {
		t.Run(where, func(t *testing.T) {
			f := newFixture(t, WriteSyscall)
			f.cfg.SegmentBytes = 2048
			l := f.open(t)
			for i := 0; i < 20; i++ {
				mustAppend(t, l, mkBatch(2, 200, 0), AckForced)
			}
			victim := l.segments[0]
			if where == "last segment" {
				victim = l.segments[len(l.segments)-1]
				if victim.size < 2*int64(len(mkBatch(2, 200, 0))) {
					mustAppend(t, l, mkBatch(2, 200, 0), AckForced)
				}
			}
			name := victim.path
			l.Close()
			file, _ := f.fs.OpenReadWrite(name)
			// Flip a byte inside the first batch's records.
			b := []byte{0}
			file.ReadAt(b, 100)
			b[0] ^= 0x55
			file.WriteAt(b, 100)
			file.Close()
			_, err := Open(f.cfg)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.File != name || ce.Pos != 0 {
				t.Fatalf("open over a corrupt batch: %v", err)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestConcurrentAppendsGroupCommit(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		f := newFixture(t, wp)
		mem := f.fs.(*vfs.MemFS)
		l := f.open(t)
		defer l.Close()
		const producers, each = 16, 50
		var wg sync.WaitGroup
		offsets := make([][]int64, producers)
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					res, err := l.Append(mkBatch(2, 20, 0), AckForced)
					if err != nil {
						t.Error(err)
						return
					}
					offsets[p] = append(offsets[p], res.BaseOffset)
				}
			}(p)
		}
		wg.Wait()
		seen := map[int64]bool{}
		for _, offs := range offsets {
			for i, o := range offs {
				if seen[o] || o%2 != 0 || (i > 0 && o <= offs[i-1]) {
					t.Fatalf("offset %d reused, misaligned or out of order", o)
				}
				seen[o] = true
			}
		}
		if l.HighWatermark() != producers*each*2 {
			t.Fatalf("hw %d", l.HighWatermark())
		}
		t.Logf("%d appends, %d fsyncs", producers*each, mem.SyncCount())
	})
}

func TestWaitWakesOnAppend(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	defer l.Close()
	ch := l.Wait()
	select {
	case <-ch:
		t.Fatal("woken before any append")
	default:
	}
	mustAppend(t, l, mkBatch(1, 1, 0), AckWritten)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by the append")
	}
}

func TestAppendAfterClose(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	l.Close()
	if _, err := l.Append(mkBatch(1, 1, 0), AckForced); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// TestAppendAllocations: an append allocates at most once, compressed
// batches included (their records are decompressed and walked with pooled
// decoders and buffers).
func TestAppendAllocations(t *testing.T) {
	forEachPath(t, func(t *testing.T, wp WritePath) {
		for _, codec := range []batch.Codec{batch.CodecNone, batch.CodecGzip, batch.CodecSnappy, batch.CodecLZ4, batch.CodecZstd} {
			f := newFixture(t, wp)
			f.cfg.SegmentBytes = 1 << 30
			f.cfg.FS = vfs.OS()
			f.cfg.Dir = t.TempDir()
			l := f.open(t)
			b := batch.Build(batch.BuildOptions{Records: 10, ValueSize: 100, Codec: codec, ProducerID: -1, TimestampStep: 1})
			for i := 0; i < 100; i++ { // warm up pools and slices
				mustAppend(t, l, b, AckWritten)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				if _, err := l.Append(b, AckWritten); err != nil {
					t.Fatal(err)
				}
			})
			l.Close()
			if allocs > 1 && !(raceEnabled && codec != batch.CodecNone) { // the lz4 package's pools
				t.Fatalf("%v: append allocates %.2f objects, the floor is 1", codec, allocs)
			}
			t.Logf("%v: %.2f allocs per append", codec, allocs)
		}
	})
}

func ExampleLog() {
	l, err := Open(DefaultConfig(vfs.NewMem(), "/data/orders-0"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	res, err := l.Append(batch.Build(batch.BuildOptions{Records: 3, ValueSize: 8, ProducerID: -1}), AckForced)
	fmt.Println(res.BaseOffset, err, l.HighWatermark())
	// Output: 0 <nil> 3
}

func TestReadAfterClose(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	l := f.open(t)
	mustAppend(t, l, mkBatch(2, 10, 0), AckForced)
	res, err := l.Read(0, 1<<20, true)
	if err != nil || len(res.Chunks) != 1 {
		t.Fatalf("read: %v", err)
	}
	l.Close()
	// A range taken before Close stays readable until released.
	buf := make([]byte, res.Chunks[0].Len)
	if _, err := res.Chunks[0].File.ReadAt(buf, res.Chunks[0].Pos); err != nil {
		t.Fatalf("reading a held range after close: %v", err)
	}
	res.Release()
	if _, err := l.Read(0, 1<<20, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

func TestEnqueuePipelinesInOrder(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	mem := f.fs.(*vfs.MemFS)
	l := f.open(t)
	defer l.Close()
	const pid, n = 3, 50
	syncsBefore := mem.SyncCount()
	var pending []Pending
	for i := 0; i < n; i++ {
		p, err := l.Enqueue(mkIdempotent(2, pid, 0, int32(2*i)), AckForced)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		res, err := p.Wait()
		if err != nil || res.BaseOffset != int64(2*i) {
			t.Fatalf("pipelined append %d: offset %d, %v", i, res.BaseOffset, err)
		}
	}
	syncs := mem.SyncCount() - syncsBefore
	if syncs >= n {
		t.Fatalf("%d pipelined forced appends took %d fsyncs: no group commit", n, syncs)
	}
	t.Logf("%d pipelined forced appends, %d fsyncs", n, syncs)
}

func TestFailedLogRefusesEverything(t *testing.T) {
	f := newFixture(t, WriteSyscall)
	cause := &CorruptionError{File: "/data/topic-0/00000000000000000000.log", Pos: 61, Reason: "crc mismatch"}
	l := Failed(f.cfg, cause)
	if _, err := l.Append(mkBatch(1, 1, 0), AckForced); err != cause {
		t.Fatalf("append: %v", err)
	}
	if _, err := l.Read(0, 100, true); err != cause {
		t.Fatalf("read: %v", err)
	}
	if _, err := l.DeleteRecordsBefore(0); err != cause {
		t.Fatalf("delete records: %v", err)
	}
	if _, _, _, err := l.OffsetForTimestamp(0); err != cause {
		t.Fatalf("offset for timestamp: %v", err)
	}
	if l.Err() != cause || l.Size() != 0 || l.EnforceRetention() != nil {
		t.Fatal("failed log state")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := f.fs.List(f.cfg.Dir); len(names) != 0 {
		t.Fatalf("a failed log touched its directory: %v", names)
	}
}
