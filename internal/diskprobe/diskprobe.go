// Package diskprobe measures the physical limits of the disk under a
// directory, to be stated next to storage figures (MEASURING.md rule 9):
//
//   - sequential write bandwidth: WriteBytes written in 1 MiB writes, then
//     one fdatasync, timed together;
//   - fdatasync latency: a loop of 4 KiB append + fdatasync on a second
//     file (the first pair is a discarded warm-up), with percentiles;
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
	return o
}

func (o Options) validate() error {
	if o.WriteBytes < 0 || o.SyncIterations < 0 || o.SyncDuration < 0 {
		return fmt.Errorf("diskprobe: negative option in %+v", o)
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
	return fmt.Sprintf("# disk raw: dir %s; write %d B in %v (final fdatasync %v); "+
		"%d append+fdatasync in %v (max %v); read %d B in %v, resident before read %.1f%%",
		r.Dir, r.WriteBytes, r.WriteDuration, r.WriteSync,
		r.SyncCount, r.SyncTotal, r.SyncLatencyMax,
		r.ReadBytes, r.ReadDuration, 100*r.ResidentBeforeRead)
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
	block := make([]byte, syncAppendBytes)
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
	if _, err := appendSync(); err != nil { // warm-up: allocation, first journal commit
		return err
	}
	samples := make([]time.Duration, 0, iterations)
	loopStart := time.Now()
	for len(samples) < iterations && time.Since(loopStart) < maxDuration {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := appendSync()
		if err != nil {
			return err
		}
		samples = append(samples, d)
	}
	r.SyncTotal = time.Since(loopStart)
	r.SyncCount = len(samples)
	if len(samples) == 0 {
		return nil
	}
	slices.Sort(samples)
	r.SyncLatencyP50 = percentile(samples, 0.50)
	r.SyncLatencyP90 = percentile(samples, 0.90)
	r.SyncLatencyP99 = percentile(samples, 0.99)
	r.SyncLatencyMax = samples[len(samples)-1]
	return nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
