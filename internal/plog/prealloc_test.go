package plog

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// allocatedBytes is the disk space the file name holds (st_blocks).
func allocatedBytes(t *testing.T, name string) (size, allocated int64) {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// TestPreallocation: once the active segment holds preallocMinBytes, the
// writer reserves blocks past its end (its size unchanged: recovery reads
// exactly the data), and Close, which seals it, frees the reserve; the log
// reopens with every batch.
func TestPreallocation(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig(vfs.OS(), dir)
	cfg.Logger = quietLogger
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proto := batch.Build(batch.BuildOptions{Records: 256, ValueSize: 1000, ProducerID: -1, BaseTimestamp: time.Now().UnixMilli()})
	const batches = 16 // 4 MiB
	for range batches {
		if _, err := l.Append(bytes.Clone(proto), AckForced); err != nil {
			t.Fatal(err)
		}
	}
	seg := filepath.Join(dir, segmentName(0))
	size, allocated := allocatedBytes(t, seg)
	if size != int64(batches*len(proto)) {
		t.Fatalf("segment size %d, want the data's %d: the reserve must not change the size", size, batches*len(proto))
	}
	if allocated < size+preallocMinBytes {
		t.Fatalf("active segment of %d bytes holds %d bytes of disk: no reserve ahead of the writes", size, allocated)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, allocated := allocatedBytes(t, seg); allocated > size+64<<10 {
		t.Fatalf("sealed segment of %d bytes still holds %d bytes of disk: the reserve was not freed", size, allocated)
	}
	l, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if hwm := l.HighWatermark(); hwm != batches*256 {
		t.Fatalf("reopened: high watermark %d, want %d", hwm, batches*256)
	}
}
