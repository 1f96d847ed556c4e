package plog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// ckptFixture is a data directory of partitions t-0 … t-(n-1) on one
// filesystem, opened together as a broker does (OpenAll).
type ckptFixture struct {
	fs    vfs.FS
	clock *clock.Manual
	cfgs  []Config
}

// newFilledFixture is the tests' one setup: partitions partitions on a
// fresh in-memory filesystem, opened together (OpenAll) and each filled
// with batches batches of 3 records (acks=all). The logs are returned
// open: the caller closes them (closeAll, which writes the checkpoints).
func newFilledFixture(t *testing.T, partitions, batches int) (*vfs.MemFS, *ckptFixture, []*Log) {
	t.Helper()
	mem := vfs.NewMem()
	f := &ckptFixture{fs: mem, clock: clock.NewManual(t0)}
	for p := range partitions {
		cfg := DefaultConfig(mem, fmt.Sprintf("/data/t-%d", p))
		cfg.Clock, cfg.WritePath, cfg.SegmentBytes, cfg.Logger = f.clock, WriteSyscall, 64<<10, quietLogger
		cfg.FileCache = NewIdleFileCache(64, 0, f.clock)
		f.cfgs = append(f.cfgs, cfg)
	}
	logs := f.openAll(t)
	fill(t, logs, batches)
	return mem, f, logs
}

// on returns the fixture's configurations on another filesystem (a
// crash's, or one injecting faults).
func (f *ckptFixture) on(fs vfs.FS) *ckptFixture {
	g := &ckptFixture{fs: fs, clock: f.clock}
	for _, cfg := range f.cfgs {
		cfg.FS = fs
		cfg.FileCache = NewIdleFileCache(64, 0, f.clock)
		g.cfgs = append(g.cfgs, cfg)
	}
	return g
}

func (f *ckptFixture) openAll(t *testing.T) []*Log {
	t.Helper()
	logs, errs := OpenAll(f.cfgs, 2)
	for i, err := range errs {
		if err != nil {
			closeAll(logs)
			t.Fatalf("open %s: %v", f.cfgs[i].Dir, err)
		}
	}
	return logs
}

func closeAll(logs []*Log) {
	for _, l := range logs {
		if l != nil {
			l.Close()
		}
	}
}

// fill appends n batches of 3 records to every log (acks=all).
func fill(t *testing.T, logs []*Log, n int) {
	t.Helper()
	for range n {
		for _, l := range logs {
			mustAppend(t, l, mkBatch(3, 50, 0), AckForced)
		}
	}
}

// damageBatch flips a byte of the batch that starts at offset in the log
// of cfg (one segment), so its CRC fails.
func damageBatch(t *testing.T, fs vfs.FS, cfg Config, offset int64) {
	t.Helper()
	name := path.Join(cfg.Dir, segmentName(0))
	file, err := fs.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	size, _ := file.Size()
	for pos := int64(0); pos < size; {
		h, err := readHeaderAt(file, pos)
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset == offset {
			b := []byte{0}
			file.ReadAt(b, pos+int64(h.Size())-1)
			b[0] ^= 0x55
			file.WriteAt(b, pos+int64(h.Size())-1)
			return
		}
		pos += int64(h.Size())
	}
	t.Fatalf("no batch at offset %d", offset)
}

// TestCheckpointKillDuringWrite: a process killed at any step of a
// checkpoint write (between the temp file's write and its rename above
// all) and the machine crashed after it leaves the old checkpoint or the
// new one, whole: never an unreadable one (which would lose the recovery
// points) and never one naming more than was durable. Each step of the
// write is made to fail in turn (the kill), then the filesystem crashes
// with its unsynced changes lost, torn or reordered.
func TestCheckpointKillDuringWrite(t *testing.T) {
	for step := 0; step < 6; step++ { // create, write, sync, close, rename, sync dir
		t.Run(fmt.Sprintf("kill at step %d", step), func(t *testing.T) {
			mem, f, logs := newFilledFixture(t, 3, 2)
			closeAll(logs) // checkpoint: every partition at 6
			old := readCheckpointFile(t, mem, "/data", recoveryPointsFile)

			var armed atomic.Bool
			var ops atomic.Int32
			inject := vfs.InjectorFunc(func(op vfs.Op, name string) error {
				if armed.Load() && (strings.Contains(name, recoveryPointsFile) || op == vfs.OpSyncDir) && int(ops.Add(1)-1) == step {
					return errors.New("killed")
				}
				return nil
			})
			g := f.on(vfs.NewErrorFS(mem, inject))
			logs = g.openAll(t)
			fill(t, logs, 1) // durable up to 9 now
			armed.Store(true)
			err := logs[0].cp.write()
			armed.Store(false)
			if err == nil {
				t.Fatalf("the write at step %d did not fail", step)
			}
			for seed := int64(1); seed <= 20; seed++ {
				crashed := mem.CrashOutOfOrder(rand.New(rand.NewPCG(uint64(seed), 1)))
				got := readCheckpointFile(t, crashed, "/data", recoveryPointsFile)
				for k, v := range old {
					if got[k] != v && got[k] != 9 {
						t.Fatalf("seed %d: %s's recovery point %d after the crash, want %d (old) or 9 (new); file %v", seed, k, got[k], v, got)
					}
				}
				h := f.on(crashed)
				reopened := h.openAll(t)
				for i, l := range reopened {
					if l.HighWatermark() != 9 {
						t.Fatalf("seed %d: %s ends at %d after the crash, want 9 (every batch acknowledged)", seed, h.cfgs[i].Dir, l.HighWatermark())
					}
				}
				closeAll(reopened)
			}
			closeAll(logs)
		})
	}
}

// TestCheckpointTorn: a checkpoint file that is not whole (damage: the
// files are replaced atomically) is ignored as a whole, as Kafka resets
// its recovery points: no line of it is trusted, so a torn number cannot
// name a recovery point past a log's end (which would refuse the
// partition) or past what was durable.
func TestCheckpointTorn(t *testing.T) {
	for _, torn := range []struct{ name, content string }{
		{"no final newline", "0\n2\nt 0 6\nt 1 600"},
		{"count larger than the lines", "0\n3\nt 0 6\nt 1 600\n"},
		{"count smaller than the lines", "0\n1\nt 0 6\nt 1 600\n"},
		{"a line cut short", "0\n2\nt 0 6\nt 1\n"},
		{"old bytes after new ones", "0\n2\nt 0 6\nt 1 600\n0 6\n"},
		{"empty", ""},
	} {
		t.Run(torn.name, func(t *testing.T) {
			mem, f, logs := newFilledFixture(t, 2, 2)
			closeAll(logs)
			writeFile(t, mem, "/data/"+recoveryPointsFile, []byte(torn.content))
			logs, errs := OpenAll(f.cfgs, 2)
			defer closeAll(logs)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%s refused over a torn checkpoint: %v", f.cfgs[i].Dir, err)
				}
				if hw := logs[i].HighWatermark(); hw != 6 {
					t.Fatalf("%s ends at %d, want 6", f.cfgs[i].Dir, hw)
				}
			}
			// Rewritten whole by OpenAll.
			if got := readCheckpointFile(t, mem, "/data", recoveryPointsFile); got["t-0"] != 6 || got["t-1"] != 6 {
				t.Fatalf("checkpoint after OpenAll: %v", got)
			}
		})
	}
}

// TestCheckpointPartitionGone: the checkpoints name a partition whose
// directory is gone (its topic deleted). OpenAll's write drops it; and a
// partition created later under that name starts empty at offset 0, even
// when nothing pruned the entry first: its stale entry is forgotten, and
// the files rewritten, before its directory is created, so no crash after
// it can lend it the deleted partition's offsets.
func TestCheckpointPartitionGone(t *testing.T) {
	setup := func(t *testing.T) (*vfs.MemFS, *ckptFixture) {
		mem, f, logs := newFilledFixture(t, 2, 2)
		if _, err := logs[1].DeleteRecordsBefore(3); err != nil {
			t.Fatal(err)
		}
		closeAll(logs)
		if got := readCheckpointFile(t, mem, "/data", logStartsFile); got["t-1"] != 3 {
			t.Fatalf("log starts %v, want t-1 at 3", got)
		}
		if err := mem.RemoveAll("/data/t-1"); err != nil {
			t.Fatal(err)
		}
		mem.SyncDir("/data")
		return mem, f
	}
	t.Run("pruned by OpenAll", func(t *testing.T) {
		mem, f := setup(t)
		g := &ckptFixture{fs: mem, clock: f.clock, cfgs: f.cfgs[:1]}
		logs := g.openAll(t)
		defer closeAll(logs)
		if got := readCheckpointFile(t, mem, "/data", recoveryPointsFile); len(got) != 1 || got["t-0"] != 6 {
			t.Fatalf("recovery points after OpenAll: %v, want t-0 only", got)
		}
		if got := readCheckpointFile(t, mem, "/data", logStartsFile); len(got) != 0 {
			t.Fatalf("log starts after OpenAll: %v, want none", got)
		}
	})
	t.Run("recreated", func(t *testing.T) {
		mem, f := setup(t)
		l0, err := Open(f.cfgs[0]) // no OpenAll: nothing pruned
		if err != nil {
			t.Fatal(err)
		}
		defer l0.Close()
		l1, err := Open(f.cfgs[1])
		if err != nil {
			t.Fatal(err)
		}
		if l1.HighWatermark() != 0 || l1.LogStartOffset() != 0 {
			t.Fatalf("recreated partition: high watermark %d, log start %d, want 0 and 0", l1.HighWatermark(), l1.LogStartOffset())
		}
		if res := mustAppend(t, l1, mkBatch(1, 50, 0), AckForced); res.BaseOffset != 0 {
			t.Fatalf("first append at %d, want 0", res.BaseOffset)
		}
		// Crash now: the durable state only.
		crashed := mem.Crash(nil)
		g := f.on(crashed)
		reopened, errs := OpenAll(g.cfgs, 2)
		defer closeAll(reopened)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s after the crash: %v", g.cfgs[i].Dir, err)
			}
		}
		if hw, ls := reopened[1].HighWatermark(), reopened[1].LogStartOffset(); hw != 1 || ls != 0 {
			t.Fatalf("recreated partition after the crash: high watermark %d, log start %d, want 1 and 0", hw, ls)
		}
		l1.Close()
	})
}

// TestCheckpointPastLogEnd: a partition whose log is shorter than its
// recovery point lost durable data: it refuses to open (CorruptionError),
// the others open.
func TestCheckpointPastLogEnd(t *testing.T) {
	mem, f, logs := newFilledFixture(t, 2, 2)
	closeAll(logs)
	file, err := mem.OpenReadWrite(path.Join(f.cfgs[1].Dir, segmentName(0)))
	if err != nil {
		t.Fatal(err)
	}
	size, _ := file.Size()
	file.Truncate(size / 2) // the second batch of 3 is gone
	file.Sync()
	file.Close()
	logs, errs := OpenAll(f.cfgs, 2)
	defer closeAll(logs)
	if errs[0] != nil || logs[0].HighWatermark() != 6 {
		t.Fatalf("t-0: %v", errs[0])
	}
	var ce *CorruptionError
	if !errors.As(errs[1], &ce) || !strings.Contains(ce.Reason, "recovery point 6") {
		t.Fatalf("t-1 cut below its recovery point opened: %v", errs[1])
	}
	// The refused partition's entry is kept for when it is repaired.
	if got := readCheckpointFile(t, mem, "/data", recoveryPointsFile); got["t-1"] != 6 {
		t.Fatalf("recovery points after OpenAll: %v, want t-1 kept at 6", got)
	}
}

// TestCheckpointStrictBelow: a batch damaged below its recovery point (as
// the broker-wide checkpoint says) is corruption, refused; past it, the
// unsynced tail of a crash, truncated.
func TestCheckpointStrictBelow(t *testing.T) {
	mem, f, logs := newFilledFixture(t, 1, 3)
	closeAll(logs) // recovery point 9
	damageBatch(t, mem, f.cfgs[0], 6)
	_, errs := OpenAll(f.cfgs, 1)
	var ce *CorruptionError
	if !errors.As(errs[0], &ce) || !strings.Contains(ce.Reason, "below the recovery point 9") {
		t.Fatalf("damage below the recovery point: %v", errs[0])
	}
	forgetRecoveryPoint(t, mem, f.cfgs[0].Dir)
	logs, errs = OpenAll(f.cfgs, 1)
	defer closeAll(logs)
	if errs[0] != nil || logs[0].HighWatermark() != 6 {
		t.Fatalf("damage past an unknown recovery point: %v (want the tail truncated at 6)", errs[0])
	}
}

// TestCheckpointMigration: per-partition recovery-point and
// log-start-offset files of an earlier version are read, their values
// written into the data directory's files, and only then removed.
func TestCheckpointMigration(t *testing.T) {
	mem, f, logs := newFilledFixture(t, 2, 3)
	closeAll(logs)
	// What an earlier version left: its own files per partition, none of
	// the data directory's.
	for _, name := range []string{recoveryPointsFile, logStartsFile, cleanShutdownFile} {
		mem.Remove("/data/" + name)
	}
	for _, cfg := range f.cfgs {
		writeFile(t, mem, path.Join(cfg.Dir, legacyRecoveryPointFile), []byte("9\n"))
	}
	writeFile(t, mem, path.Join(f.cfgs[1].Dir, legacyLogStartFile), []byte("4\n"))

	// The write fails: the per-partition files stay.
	failing := vfs.NewErrorFS(mem, vfs.OnPath(recoveryPointsFile, vfs.OpCreate))
	logs, errs := OpenAll(f.on(failing).cfgs, 2)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ls := logs[1].LogStartOffset(); ls != 4 {
		t.Fatalf("log start %d, want 4 from log-start-offset", ls)
	}
	for _, cfg := range f.cfgs {
		if _, err := mem.Stat(path.Join(cfg.Dir, legacyRecoveryPointFile)); err != nil {
			t.Fatalf("%s's recovery-point removed although nothing holds its value: %v", cfg.Dir, err)
		}
	}
	for _, l := range logs {
		l.cp.mu.Lock()
		l.cp.failed = true // no marker: the abandoned logs below are no shutdown
		l.cp.mu.Unlock()
	}
	crashed := mem.Crash(nil) // the process dies without closing

	logs = f.on(crashed).openAll(t)
	defer closeAll(logs)
	if ls := logs[1].LogStartOffset(); ls != 4 {
		t.Fatalf("log start %d after the second start, want 4", ls)
	}
	if got := readCheckpointFile(t, crashed, "/data", recoveryPointsFile); got["t-0"] != 9 || got["t-1"] != 9 {
		t.Fatalf("recovery points %v", got)
	}
	if got := readCheckpointFile(t, crashed, "/data", logStartsFile); len(got) != 1 || got["t-1"] != 4 {
		t.Fatalf("log starts %v", got)
	}
	for _, cfg := range f.cfgs {
		for _, name := range []string{legacyRecoveryPointFile, legacyLogStartFile} {
			if _, err := crashed.Stat(path.Join(cfg.Dir, name)); err == nil {
				t.Fatalf("%s/%s not removed after the migration", cfg.Dir, name)
			}
		}
	}
}

// TestDeleteRecordsDurable: DeleteRecordsBefore returns once the new log
// start is durable in the data directory's file.
func TestDeleteRecordsDurable(t *testing.T) {
	mem, f, logs := newFilledFixture(t, 2, 3)
	if _, err := logs[0].DeleteRecordsBefore(5); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash(nil)
	closeAll(logs)
	reopened := f.on(crashed).openAll(t)
	defer closeAll(reopened)
	if ls := reopened[0].LogStartOffset(); ls != 5 {
		t.Fatalf("log start %d after a crash, want 5", ls)
	}
	if ls := reopened[1].LogStartOffset(); ls != 0 {
		t.Fatalf("t-1's log start %d, want 0", ls)
	}
}

// opCountingFS counts the operations of an FS, and its syncs.
func opCountingFS(inner vfs.FS) (vfs.FS, *atomic.Int64, *atomic.Int64) {
	var ops, syncs atomic.Int64
	return vfs.NewErrorFS(inner, vfs.InjectorFunc(func(op vfs.Op, _ string) error {
		ops.Add(1)
		if op == vfs.OpSync || op == vfs.OpSyncDir {
			syncs.Add(1)
		}
		return nil
	})), &ops, &syncs
}

// TestCloseAndOpenCostPerPartition: closing idle partitions syncs and
// writes nothing per partition (one checkpoint write for all), and a clean
// start reads no checkpoint per partition. Before the data directory's
// files, 200 partitions cost a checkpoint file, two fsyncs and a rename
// each at Close (an fsync of the segment too), and two checkpoint opens at
// start.
func TestCloseAndOpenCostPerPartition(t *testing.T) {
	const n = 200
	mem, f, logs := newFilledFixture(t, n, 1)
	closeAll(logs)

	fs, ops, syncs := opCountingFS(mem)
	g := f.on(fs)
	logs = g.openAll(t)
	opened := ops.Load()
	ops.Store(0)
	syncs.Store(0)
	closeAll(logs)
	t.Logf("%d partitions: open %d filesystem operations (%.1f each), close %d operations and %d syncs", n, opened, float64(opened)/n, ops.Load(), syncs.Load())
	if s := syncs.Load(); s > 6 {
		t.Fatalf("closing %d idle partitions synced %d times, want the checkpoints' few", n, s)
	}
	if per := float64(opened) / n; per > 7 {
		t.Fatalf("a clean start took %.1f filesystem operations per partition, want at most 7", per)
	}
}
