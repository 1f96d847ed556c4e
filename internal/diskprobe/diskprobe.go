// Package diskprobe measures the physical limits of the disk under a
// directory, to be stated next to storage figures (MEASURING.md rule 9):
//
//   - sequential write bandwidth: WriteBytes written in 1 MiB writes, then
//     one fdatasync, timed together;
//   - fdatasync latency: a loop of 4 KiB append + fdatasync on a second
//     file (the first pair is a discarded warm-up), with percentiles;
//   - fdatasync latency of larger flushes (Options.FlushSizes: 64 KiB,
//     256 KiB and 1 MiB appends + fdatasync by default), the sizes a
//     broker's group commit flushes at load: the 4 KiB figure is what one
//     small record costs, these what a group of them costs;
//   - sequential read bandwidth: the first file read back in 1 MiB reads
//     after asking the kernel to drop it from the page cache
//     (posix_fadvise DONTNEED) and checking with mincore(2) that it did.
//
// It also describes the storage (Describe: "ext4 on /dev/vda") and refuses a
// filesystem in memory unless told otherwise (rule 11). A number that cannot
// be true is not dropped but flagged in Result.Suspect (rule 10), and the raw
// counts stay in the Result.
//
// The probe works on the OS directly, not through internal/vfs: it measures
// the disk, not the code above it.
package diskprobe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	writeChunkBytes = 1 << 20
	syncAppendBytes = 4 << 10

	// Bounds outside which a figure is not believed.
	minBelievableSync      = time.Microsecond
	maxBelievableBandwidth = 100e9 // bytes per second
)

// ErrVolatile is returned by Probe for a directory on a filesystem in
// memory when Options.AllowVolatile is not set.
var ErrVolatile = errors.New("diskprobe: directory is on a filesystem in memory (tmpfs/ramfs): its figures would measure memory, not a disk")

// Options says how much to measure. The zero value means the defaults.
type Options struct {
	// WriteBytes is the size of the sequential write (and read); 1 GiB by
	// default.
	WriteBytes int64
	// SyncIterations bounds the append+fdatasync loop; 2000 by default.
	SyncIterations int
	// SyncDuration bounds the same loop in time; 5 s by default.
	SyncDuration time.Duration
	// FlushSizes are the append sizes of the larger append+fdatasync loops
	// (DefaultFlushSizes when nil; empty: none). Each loop runs
	// SyncIterations times but writes at most WriteBytes (at least
	// minFlushIterations appends) and for at most FlushDuration.
	FlushSizes []int64
	// FlushDuration bounds each of those loops in time; 2 s by default.
	FlushDuration time.Duration
	// AllowVolatile measures a tmpfs/ramfs directory anyway; the result is
	// then labelled suspect.
	AllowVolatile bool
}

func (o Options) withDefaults() Options {
	if o.WriteBytes == 0 {
		o.WriteBytes = 1 << 30
	}
	if o.SyncIterations == 0 {
		o.SyncIterations = 2000
	}
	if o.SyncDuration == 0 {
		o.SyncDuration = 5 * time.Second
	}
	if o.FlushSizes == nil {
		o.FlushSizes = DefaultFlushSizes
	}
	if o.FlushDuration == 0 {
		o.FlushDuration = 2 * time.Second
	}
	return o
}

// DefaultFlushSizes are Options.FlushSizes' default: around the ~1 MiB a
// partition's group commit flushes at 150,000 records/s of 1 KiB, and a
// quarter and a sixteenth of it.
var DefaultFlushSizes = []int64{64 << 10, 256 << 10, 1 << 20}

// minFlushIterations is the fewest appends of a flush loop, whatever
// WriteBytes allows.
const minFlushIterations = 10

func (o Options) validate() error {
	if o.WriteBytes < 0 || o.SyncIterations < 0 || o.SyncDuration < 0 || o.FlushDuration < 0 {
		return fmt.Errorf("diskprobe: negative option in %+v", o)
	}
	for _, size := range o.FlushSizes {
		if size <= 0 || size > 64<<20 {
			return fmt.Errorf("diskprobe: flush size %d outside (0, 64 MiB]", size)
		}
	}
	return nil
}

// Result is what Probe measured. Durations and byte counts are the raw
// figures; the bandwidth methods derive from them.
type Result struct {
	Dir     string
	Storage Storage

	// Sequential write, including the final fdatasync (WriteSync alone).
	WriteBytes    int64
	WriteDuration time.Duration
	WriteSync     time.Duration

	// append 4 KiB + fdatasync, one sample per pair (warm-up excluded).
	SyncCount      int
	SyncTotal      time.Duration
	SyncLatencyP50 time.Duration
	SyncLatencyP90 time.Duration
	SyncLatencyP99 time.Duration
	SyncLatencyMax time.Duration

	// The larger appends + fdatasync, one entry per Options.FlushSizes.
	Flushes []FlushLatency

	// Sequential read of the written file.
	ReadBytes    int64
	ReadDuration time.Duration
	// CacheDropped says the file was (almost) out of the page cache when
	// the read began: posix_fadvise(DONTNEED) succeeded and mincore(2)
	// found at most 10% of its pages resident (ResidentBeforeRead). When
	// false, the read figure is the page cache's.
	CacheDropped       bool
	ResidentBeforeRead float64 // fraction of the file's pages, 0..1; -1 if unknown

	// Suspect lists the figures that cannot describe a disk (rule 10).
	Suspect []string
}

// FlushLatency is the latency of an append of Bytes + fdatasync, one
// sample per pair (warm-up excluded).
type FlushLatency struct {
	Bytes              int64
	Count              int
	Total              time.Duration
	P50, P90, P99, Max time.Duration
}

// Flush returns the flush loop of size bytes, if measured.
func (r Result) Flush(size int64) (FlushLatency, bool) {
	for _, f := range r.Flushes {
		if f.Bytes == size {
			return f, true
		}
	}
	return FlushLatency{}, false
}

// WriteBandwidth is the sequential write rate in bytes per second.
func (r Result) WriteBandwidth() float64 { return rate(r.WriteBytes, r.WriteDuration) }

// ReadBandwidth is the sequential read rate in bytes per second.
func (r Result) ReadBandwidth() float64 { return rate(r.ReadBytes, r.ReadDuration) }

func rate(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds()
}

// String is a one-line summary for a benchmark header:
//
//	# disk: ext4 on /dev/vda — seq write 650 MB/s, fdatasync 4KiB p50 0.40ms p99 0.80ms, seq read 1.2 GB/s
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# disk: %s — seq write %s, fdatasync 4KiB p50 %s p99 %s, seq read %s",
		r.Storage, formatRate(r.WriteBandwidth()), formatLatency(r.SyncLatencyP50),
		formatLatency(r.SyncLatencyP99), formatRate(r.ReadBandwidth()))
	for _, f := range r.Flushes {
		fmt.Fprintf(&b, "; fdatasync %s p50 %s p99 %s", FormatSize(f.Bytes), formatLatency(f.P50), formatLatency(f.P99))
	}
	if !r.CacheDropped {
		b.WriteString(" (page cache not dropped)")
	}
	if len(r.Suspect) > 0 {
		b.WriteString(" — SUSPECT: " + strings.Join(r.Suspect, "; "))
	}
	return b.String()
}

// Raw prints the raw counts behind String, so an impossible figure can be
// traced to its measurement.
func (r Result) Raw() string {
	s := fmt.Sprintf("# disk raw: dir %s; write %d B in %v (final fdatasync %v); "+
		"%d append+fdatasync in %v (max %v); read %d B in %v, resident before read %.1f%%",
		r.Dir, r.WriteBytes, r.WriteDuration, r.WriteSync,
		r.SyncCount, r.SyncTotal, r.SyncLatencyMax,
		r.ReadBytes, r.ReadDuration, 100*r.ResidentBeforeRead)
	for _, f := range r.Flushes {
		s += fmt.Sprintf("; %d appends of %d B + fdatasync in %v (max %v)", f.Count, f.Bytes, f.Total, f.Max)
	}
	return s
}

// FormatSize names a flush size: "4KiB", "256KiB", "1MiB".
func FormatSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func formatRate(bytesPerSecond float64) string {
	if bytesPerSecond >= 1e9 {
		return fmt.Sprintf("%.1f GB/s", bytesPerSecond/1e9)
	}
	return fmt.Sprintf("%.0f MB/s", bytesPerSecond/1e6)
}

func formatLatency(d time.Duration) string {
	if d < 10*time.Microsecond {
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// checkBelievable fills Suspect with the figures that cannot describe a
// disk.
func (r *Result) checkBelievable() {
	r.Suspect = nil
	flag := func(format string, args ...any) { r.Suspect = append(r.Suspect, fmt.Sprintf(format, args...)) }
	if r.Storage.Volatile {
		flag("%s is in memory, not a disk", r.Storage.FSType)
	}
	for _, bw := range []struct {
		what     string
		bytes    int64
		duration time.Duration
	}{
		{"seq write", r.WriteBytes, r.WriteDuration},
		{"seq read", r.ReadBytes, r.ReadDuration},
	} {
		switch {
		case bw.bytes <= 0 || bw.duration <= 0:
			flag("%s measured nothing (%d B in %v)", bw.what, bw.bytes, bw.duration)
		case rate(bw.bytes, bw.duration) > maxBelievableBandwidth:
			flag("%s %s is above %s (%d B in %v)", bw.what, formatRate(rate(bw.bytes, bw.duration)),
				formatRate(maxBelievableBandwidth), bw.bytes, bw.duration)
		}
	}
	switch {
	case r.SyncCount <= 0:
		flag("no fdatasync measured")
	case r.SyncLatencyP50 < minBelievableSync:
		flag("fdatasync p50 %v is faster than %v: it does not reach a disk", r.SyncLatencyP50, minBelievableSync)
	case !(r.SyncLatencyP50 <= r.SyncLatencyP90 && r.SyncLatencyP90 <= r.SyncLatencyP99 && r.SyncLatencyP99 <= r.SyncLatencyMax):
		flag("fdatasync percentiles out of order")
	}
	for _, f := range r.Flushes {
		switch {
		case f.Count <= 0:
			flag("no fdatasync of %s measured", FormatSize(f.Bytes))
		case rate(f.Bytes, f.P50) > maxBelievableBandwidth:
			flag("fdatasync of %s p50 %v: %s, faster than any disk", FormatSize(f.Bytes), f.P50, formatRate(rate(f.Bytes, f.P50)))
		case !(f.P50 <= f.P90 && f.P90 <= f.P99 && f.P99 <= f.Max):
			flag("fdatasync of %s percentiles out of order", FormatSize(f.Bytes))
		}
	}
	if r.WriteSync < 0 || r.WriteSync > r.WriteDuration {
		flag("final fdatasync %v outside the write's %v", r.WriteSync, r.WriteDuration)
	}
}

// Probe measures the disk under dir (see the package doc). It writes two
// files in dir and removes them, also on error. It stops early with ctx's
// error when ctx is done.
func Probe(ctx context.Context, dir string, opts Options) (Result, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return Result{}, err
	}
	storage, err := Describe(dir)
	if err != nil {
		return Result{}, err
	}
	if storage.Volatile && !opts.AllowVolatile {
		return Result{}, fmt.Errorf("%w: %s is %s", ErrVolatile, dir, storage)
	}
	r := Result{Dir: dir, Storage: storage, ResidentBeforeRead: -1}

	f, cleanup, err := createProbeFile(dir)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	if err := measureWrite(ctx, f, opts.WriteBytes, &r); err != nil {
		return Result{}, err
	}
	if err := measureRead(ctx, f, &r); err != nil {
		return Result{}, err
	}

	g, cleanupSync, err := createProbeFile(dir)
	if err != nil {
		return Result{}, err
	}
	defer cleanupSync()
	if err := measureSync(ctx, g, opts.SyncIterations, opts.SyncDuration, &r); err != nil {
		return Result{}, err
	}
	for _, size := range opts.FlushSizes {
		iterations := opts.SyncIterations
		if bound := opts.WriteBytes / size; int64(iterations) > bound {
			iterations = min(iterations, int(max(bound, minFlushIterations)))
		}
		fl, err := measureFlush(ctx, dir, size, iterations, opts.FlushDuration)
		if err != nil {
			return Result{}, err
		}
		r.Flushes = append(r.Flushes, fl)
	}
	r.checkBelievable()
	return r, nil
}

// createProbeFile creates a hidden file in dir and returns the function
// that closes and removes it.
func createProbeFile(dir string) (*os.File, func(), error) {
	f, err := os.CreateTemp(dir, ".sushka-diskprobe-*")
	if err != nil {
		return nil, nil, err
	}
	return f, func() {
		f.Close()
		os.Remove(f.Name())
	}, nil
}

func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// measureWrite writes size bytes of random data (so a compressing
// filesystem cannot cheat) in 1 MiB writes, then fdatasyncs.
func measureWrite(ctx context.Context, f *os.File, size int64, r *Result) error {
	chunk := make([]byte, min(size, writeChunkBytes))
	rand.Read(chunk)
	start := time.Now()
	for written := int64(0); written < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Write(chunk[:min(int64(len(chunk)), size-written)])
		written += int64(n)
		if err != nil {
			return err
		}
	}
	syncStart := time.Now()
	if err := fdatasync(f); err != nil {
		return err
	}
	end := time.Now()
	r.WriteBytes = size
	r.WriteDuration = end.Sub(start)
	r.WriteSync = end.Sub(syncStart)
	return nil
}

// measureRead drops f (synced, so its pages are clean) from the page cache
// and reads it back sequentially.
func measureRead(ctx context.Context, f *os.File, r *Result) error {
	fadviseErr := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	resident, err := residentFraction(f, r.WriteBytes)
	if err == nil {
		r.ResidentBeforeRead = resident
	}
	r.CacheDropped = fadviseErr == nil && err == nil && resident <= 0.1
	buf := make([]byte, writeChunkBytes)
	start := time.Now()
	var offset int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.ReadAt(buf, offset)
		offset += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	r.ReadDuration = time.Since(start)
	r.ReadBytes = offset
	return nil
}

// residentFraction is the part of the first size bytes of f that is in the
// page cache, by mincore(2) on a read-only mapping.
func residentFraction(f *os.File, size int64) (float64, error) {
	if size <= 0 || size != int64(int(size)) {
		return 0, fmt.Errorf("diskprobe: cannot map %d bytes", size)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	pageSize := os.Getpagesize()
	pages := make([]byte, (len(m)+pageSize-1)/pageSize)
	if err := mincore(m, pages); err != nil {
		return 0, err
	}
	resident := 0
	for _, p := range pages {
		resident += int(p & 1)
	}
	return float64(resident) / float64(len(pages)), nil
}

// mincore is mincore(2), which golang.org/x/sys/unix does not wrap on
// Linux: one byte per page of mapping, bit 0 set when resident.
func mincore(mapping, pages []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mapping[0])),
		uintptr(len(mapping)), uintptr(unsafe.Pointer(&pages[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// measureSync appends 4 KiB and fdatasyncs, iterations times or for at most
// maxDuration, after one discarded warm-up pair.
func measureSync(ctx context.Context, f *os.File, iterations int, maxDuration time.Duration, r *Result) error {
	l, err := appendSyncLoop(ctx, f, syncAppendBytes, iterations, maxDuration)
	if err != nil {
		return err
	}
	r.SyncTotal, r.SyncCount = l.Total, l.Count
	r.SyncLatencyP50, r.SyncLatencyP90, r.SyncLatencyP99, r.SyncLatencyMax = l.P50, l.P90, l.P99, l.Max
	return nil
}

// measureFlush is the loop of size-byte appends on a file of its own in
// dir, removed after.
func measureFlush(ctx context.Context, dir string, size int64, iterations int, maxDuration time.Duration) (FlushLatency, error) {
	f, cleanup, err := createProbeFile(dir)
	if err != nil {
		return FlushLatency{}, err
	}
	defer cleanup()
	return appendSyncLoop(ctx, f, size, iterations, maxDuration)
}

// appendSyncLoop appends blockBytes of random data and fdatasyncs,
// iterations times or for at most maxDuration, after one discarded warm-up
// pair (block allocation, the first journal commit).
func appendSyncLoop(ctx context.Context, f *os.File, blockBytes int64, iterations int, maxDuration time.Duration) (FlushLatency, error) {
	l := FlushLatency{Bytes: blockBytes}
	block := make([]byte, blockBytes)
	rand.Read(block)
	appendSync := func() (time.Duration, error) {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, err
		}
		if err := fdatasync(f); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if _, err := appendSync(); err != nil {
		return l, err
	}
	samples := make([]time.Duration, 0, iterations)
	loopStart := time.Now()
	for len(samples) < iterations && time.Since(loopStart) < maxDuration {
		if err := ctx.Err(); err != nil {
			return l, err
		}
		d, err := appendSync()
		if err != nil {
			return l, err
		}
		samples = append(samples, d)
	}
	l.Total = time.Since(loopStart)
	l.Count = len(samples)
	if len(samples) == 0 {
		return l, nil
	}
	slices.Sort(samples)
	l.P50 = percentile(samples, 0.50)
	l.P90 = percentile(samples, 0.90)
	l.P99 = percentile(samples, 0.99)
	l.Max = samples[len(samples)-1]
	return l, nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
