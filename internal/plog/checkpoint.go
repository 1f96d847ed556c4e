package plog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// The checkpoints of a data directory (docs/format.md, "Checkpoint
// files"), as Kafka's LogManager keeps them: one file for the recovery
// points of every partition in the directory and one for the log start
// offsets, in Kafka's OffsetCheckpointFile format, replaced atomically
// (temp file, fsync, rename, directory fsync) by one writer at a time:
//
//   - periodically, at most every CheckpointInterval (Kafka's
//     log.flush.offset.checkpoint.interval.ms, 60 s), started by a
//     publication once it is due, and only when the contents changed;
//   - once when the last log of the directory closes (a broker's
//     shutdown), followed by the clean-shutdown marker;
//   - the log start offsets also at every DeleteRecordsBefore, before it
//     returns (a deletion acknowledged is durable);
//   - once after OpenAll (the recovery points recovery moved, the
//     migration of per-partition files, entries of partitions gone).
//
// The recovery point written for a log is its high watermark, below which
// every batch is durable (design D14). A checkpoint older than the logs
// only names lower recovery points: after a crash the partitions past
// theirs fsync their last segment and recover their tail leniently
// (recover.go), which is the whole cost of the interval.
//
// Before this file, each partition had its own recovery-point and
// log-start-offset files (one file, two fsyncs and a rename per partition
// at every close). They are still read when a partition's directory holds
// them (they are newer than any broker-wide entry: only an older Sushka
// writes them), never written, and removed once a broker-wide file holding
// their values is durable.
const (
	recoveryPointsFile = "recovery-point-offset-checkpoint"
	logStartsFile      = "log-start-offset-checkpoint"
	// cleanShutdownFile is Kafka's .kafka_cleanshutdown: written after the
	// last log closed without error and both checkpoints were written,
	// removed (and the removal made durable) when the directory's first
	// log opens, before anything can be appended.
	cleanShutdownFile = ".sushka_cleanshutdown"
	checkpointVersion = 0

	// Per-partition files of earlier versions (read and migrated only).
	legacyLogStartFile      = "log-start-offset"
	legacyRecoveryPointFile = "recovery-point"
)

// checkpointEntry is what the checkpoints say of one partition; -1: nothing.
type checkpointEntry struct {
	recoveryPoint int64
	logStart      int64
}

var noCheckpoint = checkpointEntry{recoveryPoint: -1, logStart: -1}

// checkpoints is one data directory's checkpoint files and what goes into
// them. There is one per (filesystem, directory) in the process, shared by
// every log opened in that directory (acquireCheckpoints) and dropped when
// the last of them closes.
//
// Lock order: writeMu → mu → Log.mu (reading a log's offsets). mu is never
// held during I/O, and nothing takes mu while holding a Log's lock.
type checkpoints struct {
	fs       vfs.FS
	dir      string
	clock    clock.Clock
	logger   *slog.Logger
	interval time.Duration

	refs int // (checkpointsMu) logs holding it: opening or open

	// nextWriteAt is when a publication may start the next periodic write
	// (Unix nanoseconds): an atomic, so a publication pays one load.
	nextWriteAt atomic.Int64
	writing     atomic.Bool // a periodic write is running
	timerArmed  atomic.Bool // a timer will call due once the write is due
	timerMu     sync.Mutex  // a leaf
	timer       *time.Timer // (timerMu)
	stopped     bool        // (timerMu) the last log closed: no more timers

	writeMu sync.Mutex // one write of the files at a time
	written [2][]byte  // (writeMu) the files' contents as last read or written

	mu sync.Mutex
	// logs are the open logs by key; closed the offsets of logs closed
	// while the directory stays in use; loaded what the files said of
	// partitions not opened (yet): kept while their directory exists.
	logs   map[string]*Log            // (mu)
	closed map[string]checkpointEntry // (mu)
	loaded map[string]checkpointEntry // (mu)
	legacy []string                   // (mu) per-partition files to remove after the next write
	clean  bool                       // (mu) the clean-shutdown marker was found at load
	failed bool                       // (mu) a log closed with an error: no marker
}

type checkpointsKey struct {
	fs  vfs.FS
	dir string
}

var (
	checkpointsMu    sync.Mutex
	checkpointsByDir = map[checkpointsKey]*checkpoints{}
)

// checkpointKey is a log's name in the checkpoints: its directory's name,
// TOPIC-PARTITION.
func checkpointKey(dir string) string { return path.Base(path.Clean(dir)) }

// acquireCheckpoints returns the checkpoints of cfg.Dir's parent, loading
// them if no log there holds them; the caller releases them (Close, or a
// failed open).
func acquireCheckpoints(cfg Config) (*checkpoints, error) {
	key := checkpointsKey{cfg.FS, path.Dir(path.Clean(cfg.Dir))}
	checkpointsMu.Lock()
	defer checkpointsMu.Unlock()
	cp := checkpointsByDir[key]
	if cp == nil {
		cp = &checkpoints{fs: cfg.FS, dir: key.dir, clock: cfg.Clock, logger: cfg.Logger, interval: CheckpointInterval,
			logs: map[string]*Log{}, closed: map[string]checkpointEntry{}}
		cp.nextWriteAt.Store(cfg.Clock.Now().Add(cp.interval).UnixNano())
		if err := cp.load(); err != nil {
			return nil, err
		}
		checkpointsByDir[key] = cp
	}
	cp.refs++
	return cp, nil
}

// release drops a log's hold; the last one writes the files and, when
// every log closed cleanly, the clean-shutdown marker.
func (cp *checkpoints) release(failed bool) error {
	checkpointsMu.Lock()
	defer checkpointsMu.Unlock()
	cp.mu.Lock()
	cp.failed = cp.failed || failed
	cp.mu.Unlock()
	if cp.refs--; cp.refs > 0 {
		return nil
	}
	delete(checkpointsByDir, checkpointsKey{cp.fs, cp.dir})
	cp.stopTimer()
	if err := cp.write(); err != nil {
		return err
	}
	cp.mu.Lock()
	failed = cp.failed
	cp.mu.Unlock()
	if failed {
		return nil
	}
	if err := replaceFile(cp.fs, cp.dir, cleanShutdownFile, nil); err != nil {
		return &IOError{Op: "write " + cleanShutdownFile, Err: err}
	}
	return nil
}

// load reads both files and consumes the clean-shutdown marker. An
// unreadable file is logged and ignored, as Kafka does: it only narrows
// what recovery assumes (a lower recovery point is more lenient, never
// less safe). An I/O error other than absence fails the open.
func (cp *checkpoints) load() error {
	cp.loaded = map[string]checkpointEntry{}
	for i, file := range []string{recoveryPointsFile, logStartsFile} {
		data, err := vfs.ReadFile(cp.fs, path.Join(cp.dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return &IOError{Op: "read " + file, Err: err}
		}
		entries, err := parseCheckpoint(data)
		if err != nil {
			cp.logger.Warn("ignoring an unreadable checkpoint file: its partitions recover as if it were absent", "file", path.Join(cp.dir, file), "err", err)
			continue
		}
		cp.written[i] = data
		for k, v := range entries {
			e, ok := cp.loaded[k]
			if !ok {
				e = noCheckpoint
			}
			if i == 0 {
				e.recoveryPoint = v
			} else {
				e.logStart = v
			}
			cp.loaded[k] = e
		}
	}
	marker := path.Join(cp.dir, cleanShutdownFile)
	if _, err := cp.fs.Stat(marker); err == nil {
		cp.clean = true
		// Gone for good before any log can append: a crash from now on is
		// not a clean shutdown.
		if err := cp.fs.Remove(marker); err != nil {
			return &IOError{Op: "remove " + cleanShutdownFile, Err: err}
		}
		if err := cp.fs.SyncDir(cp.dir); err != nil {
			return &IOError{Op: "sync dir " + cp.dir, Err: err}
		}
	}
	return nil
}

// entry returns what the checkpoints say of the partition key: the
// offsets of its log closed earlier in this process, else the files'.
func (cp *checkpoints) entry(key string) checkpointEntry {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if e, ok := cp.closed[key]; ok {
		return e
	}
	if e, ok := cp.loaded[key]; ok {
		return e
	}
	return noCheckpoint
}

// forgetFresh drops every entry of the partition key, whose directory is
// about to be created: a partition of that name deleted earlier must not
// lend its offsets to the new one (a recovery point past the new log's end
// would refuse to open it, a log start past 0 would hide its records). The
// files are rewritten before the directory exists when they named it.
func (cp *checkpoints) forgetFresh(key string) error {
	cp.mu.Lock()
	_, inClosed := cp.closed[key]
	_, inLoaded := cp.loaded[key]
	delete(cp.closed, key)
	delete(cp.loaded, key)
	cp.mu.Unlock()
	if !inClosed && !inLoaded {
		return nil
	}
	return cp.write()
}

// register adds an opened log, with the per-partition files its recovery
// read (removed after the next write).
//
// A log of the same directory still registered was abandoned without Close
// (a test's simulated crash of the process): it is replaced and its hold
// dropped, so the directory's last Close still writes the files.
func (cp *checkpoints) register(l *Log, legacy []string) {
	checkpointsMu.Lock()
	defer checkpointsMu.Unlock()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if old := cp.logs[l.cpKey]; old != nil && old != l {
		old.cpReplaced.Store(true)
		cp.refs--
	}
	cp.logs[l.cpKey] = l
	delete(cp.closed, l.cpKey)
	delete(cp.loaded, l.cpKey)
	cp.legacy = append(cp.legacy, legacy...)
}

// closeLog records the final offsets of l, which is closing.
func (cp *checkpoints) closeLog(l *Log, e checkpointEntry) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.logs[l.cpKey] == l {
		delete(cp.logs, l.cpKey)
		cp.closed[l.cpKey] = e
	}
}

// due starts a periodic write when the interval has passed since the last
// one (from a publication: one atomic load when not due). When it has not,
// a timer makes sure a write follows once it has, so the last publications
// before the directory goes quiet are checkpointed within the interval too
// (one timer per directory at most, stopped by the last Close).
func (cp *checkpoints) due(now time.Time) {
	next := cp.nextWriteAt.Load()
	if now.UnixNano() < next {
		if !cp.timerArmed.Load() && cp.timerArmed.CompareAndSwap(false, true) {
			cp.timerMu.Lock()
			if !cp.stopped {
				cp.timer = time.AfterFunc(time.Duration(next-now.UnixNano()), func() {
					cp.timerArmed.Store(false)
					cp.due(cp.clock.Now())
				})
			}
			cp.timerMu.Unlock()
		}
		return
	}
	if !cp.writing.CompareAndSwap(false, true) {
		return
	}
	cp.nextWriteAt.Store(now.Add(cp.interval).UnixNano())
	go func() {
		defer cp.writing.Store(false)
		if err := cp.write(); err != nil {
			cp.logger.Warn("checkpoints not written; retrying at the next interval", "dir", cp.dir, "err", err)
		}
	}()
}

// stopTimer stops the timer of due for good (the last Close).
func (cp *checkpoints) stopTimer() {
	cp.timerMu.Lock()
	defer cp.timerMu.Unlock()
	cp.stopped = true
	if cp.timer != nil {
		cp.timer.Stop()
	}
}

// entries returns every partition's offsets: the open logs' (read now),
// the closed ones' and the loaded ones'.
func (cp *checkpoints) entries() map[string]checkpointEntry {
	cp.mu.Lock()
	out := make(map[string]checkpointEntry, len(cp.logs)+len(cp.closed)+len(cp.loaded))
	for k, e := range cp.loaded {
		out[k] = e
	}
	for k, e := range cp.closed {
		out[k] = e
	}
	logs := make([]*Log, 0, len(cp.logs))
	for _, l := range cp.logs {
		logs = append(logs, l)
	}
	cp.mu.Unlock()
	for _, l := range logs {
		out[l.cpKey] = l.checkpointEntry()
	}
	return out
}

// write replaces both files with the present offsets (each only if it
// changed), then removes the migrated per-partition files.
func (cp *checkpoints) write() error {
	return cp.writeFiles(true)
}

// writeLogStarts replaces the log start offsets file only.
func (cp *checkpoints) writeLogStarts() error {
	return cp.writeFiles(false)
}

func (cp *checkpoints) writeFiles(recoveryPoints bool) error {
	cp.writeMu.Lock()
	defer cp.writeMu.Unlock()
	cp.mu.Lock()
	legacy := cp.legacy
	cp.mu.Unlock()
	entries := cp.entries()
	files := []string{recoveryPointsFile, logStartsFile}
	for i, file := range files {
		if i == 0 && !recoveryPoints {
			continue
		}
		data := formatCheckpoint(entries, i == 0)
		if bytes.Equal(data, cp.written[i]) {
			continue
		}
		if err := replaceFile(cp.fs, cp.dir, file, data); err != nil {
			return &IOError{Op: "checkpoint " + file, Err: err}
		}
		cp.written[i] = data
	}
	if !recoveryPoints || len(legacy) == 0 {
		return nil
	}
	for _, name := range legacy {
		if err := cp.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &IOError{Op: "remove " + name, Err: err}
		}
	}
	cp.mu.Lock()
	cp.legacy = cp.legacy[len(legacy):]
	cp.mu.Unlock()
	return nil
}

// prune drops the loaded entries of partitions whose directory is gone
// (deleted while the broker was down, or before the last write), so the
// files stop naming them. Called once every partition of the broker is
// open: the others are the internal topics', opened later, and the failed
// ones'.
func (cp *checkpoints) prune() {
	cp.mu.Lock()
	keys := make([]string, 0, len(cp.loaded))
	for k := range cp.loaded {
		keys = append(keys, k)
	}
	cp.mu.Unlock()
	for _, k := range keys {
		if _, err := cp.fs.Stat(path.Join(cp.dir, k)); errors.Is(err, fs.ErrNotExist) {
			cp.mu.Lock()
			delete(cp.loaded, k)
			cp.mu.Unlock()
		}
	}
}

// formatCheckpoint renders Kafka's OffsetCheckpointFile: the version, the
// number of entries, then "topic partition offset" per line, sorted. The
// log start file names only the partitions whose log start is past their
// first segment (what recovery cannot see for itself), as Kafka does.
func formatCheckpoint(entries map[string]checkpointEntry, recoveryPoints bool) []byte {
	keys := make([]string, 0, len(entries))
	for k, e := range entries {
		if v := e.logStart; recoveryPoints {
			v = e.recoveryPoint
			if v >= 0 {
				keys = append(keys, k)
			}
		} else if v >= 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	b := make([]byte, 0, 16+len(keys)*32)
	b = strconv.AppendInt(b, checkpointVersion, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	b = append(b, '\n')
	for _, k := range keys {
		topic, partition := splitCheckpointKey(k)
		v := entries[k].logStart
		if recoveryPoints {
			v = entries[k].recoveryPoint
		}
		b = append(b, topic...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(partition), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
		b = append(b, '\n')
	}
	return b
}

// splitCheckpointKey splits TOPIC-PARTITION; a name without a partition
// suffix (a log directory of a test or tool) is partition -1.
func splitCheckpointKey(k string) (string, int32) {
	if i := strings.LastIndexByte(k, '-'); i > 0 {
		if p, err := strconv.ParseInt(k[i+1:], 10, 32); err == nil && p >= 0 && k[i+1:] == strconv.FormatInt(p, 10) {
			return k[:i], int32(p)
		}
	}
	return k, -1
}

func joinCheckpointKey(topic string, partition int64) string {
	if partition < 0 {
		return topic
	}
	return topic + "-" + strconv.FormatInt(partition, 10)
}

// parseCheckpoint reads formatCheckpoint's output. Anything else (a torn
// or damaged file: the files are replaced atomically, so this is damage)
// is an error for the whole file, never a partial trust.
func parseCheckpoint(data []byte) (map[string]int64, error) {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%d bytes not ending in a newline", len(data))
	}
	lines := strings.Split(string(data[:len(data)-1]), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("%d lines, want a version and a count", len(lines))
	}
	if lines[0] != strconv.Itoa(checkpointVersion) {
		return nil, fmt.Errorf("version %q, want %d", lines[0], checkpointVersion)
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, fmt.Errorf("count %q, but %d entries follow", lines[1], len(lines)-2)
	}
	out := make(map[string]int64, n)
	for i, line := range lines[2:] {
		f := strings.Split(line, " ")
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: %q is not \"topic partition offset\"", i+3, line)
		}
		p, perr := strconv.ParseInt(f[1], 10, 32)
		v, verr := strconv.ParseInt(f[2], 10, 64)
		if f[0] == "" || perr != nil || p < -1 || verr != nil || v < 0 {
			return nil, fmt.Errorf("line %d: %q is not \"topic partition offset\"", i+3, line)
		}
		k := joinCheckpointKey(f[0], p)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: %s named twice", i+3, k)
		}
		out[k] = v
	}
	return out, nil
}

// replaceFile replaces dir's file with data atomically: temp file (removed
// by recovery if left over in a partition directory, ignored elsewhere),
// fsync, rename, directory sync.
func replaceFile(fsys vfs.FS, dir, file string, data []byte) error {
	tmp := path.Join(dir, file+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path.Join(dir, file))
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	return err
}
