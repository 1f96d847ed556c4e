// Package vfs is the filesystem seen by Sushka's storage packages.
//
// Core packages (internal/plog, internal/group) never call os.* directly: they
// take an FS, so tests can run them on an in-memory filesystem that forgets
// unsynced data at a simulated crash (NewMem, (*MemFS).Crash and
// CrashOutOfOrder) or on one that injects I/O errors by operation
// (NewErrorFS). Default (OS()) is the real one: Sync is fdatasync(2), Writev is writev(2), StartWriteback is
// sync_file_range(2) SYNC_FILE_RANGE_WRITE, Map is mmap(2) MAP_SHARED.
//
// # The crash model of MemFS
//
// A MemFS keeps, for every file, its current contents and its durable
// contents (as of the file's last Sync, which includes stores through a
// mapping), and for every directory its current entries and its durable
// entries (as of the directory's last SyncDir). Creating, removing or
// renaming a file, and creating a directory with MkdirAll, change the entries
// of the parent directory only: they are durable once the parent is synced.
// The root directory always exists.
//
// Crash(rng) builds the filesystem a power loss would leave:
//
//   - Directories. A directory whose entries changed since its last SyncDir
//     comes back with all its current entries or with its durable ones (one
//     coin per directory: the journal committed its changes or it did not).
//     A directory that is not reachable through the chosen entries is gone
//     with everything under it. A node reachable under two names (a rename
//     across directories of which only one was synced) keeps the first in
//     sorted walk order only.
//   - Files. Let D be the durable contents and C the current ones, and let
//     the modified region start at the first byte where they differ. With
//     probability 1/4 the file is exactly D. Otherwise the size is chosen
//     first: when C is longer (appends, or a Truncate that preallocated),
//     the size change was lost (len(D)), kept (len(C)) or kept in part (a
//     uniform size in between), one third each; when C is shorter the
//     truncation was kept or lost, one half each. Then writeback reached the
//     disk up to a byte k of the modified region: k is the size half of the
//     time, otherwise uniform between the start of the modified region and
//     the size, so the data is torn at any byte. The result is C[:k]
//     followed by D[k:] up to the size, and zeros where neither reaches
//     (a size persisted ahead of its data reads as zeros, like a
//     preallocated tail).
//
// So synced data always survives byte for byte, and of the unsynced changes
// only a prefix survives, possibly followed by zeros or by older durable
// bytes.
//
// CrashOutOfOrder(rng) is the same except for the data of files: writeback
// reaches the disk out of order, as the page cache does it. The size is
// chosen as above; then each page (PageSize = 4 KiB, aligned in the file)
// that holds part of the modified region, independently of the others,
// reached the disk (C's bytes), did not (D's bytes, zeros past them) or was
// torn (C's bytes up to a uniform byte of the page, then D's or zeros). Each
// file draws how likely its pages are to have reached the disk (1/4, 1/2 or
// 3/4; one page in eight is torn), and with probability 1/4 the file is
// exactly D. So an invalid region may be followed by valid unsynced data
// (a later page without an earlier one); synced data still survives byte
// for byte.
//
// Crash(nil) and CrashOutOfOrder(nil) are the worst outcome: exactly the
// durable state. The outcome depends only on the state and the rng, so a
// failing seed replays.
package vfs

import (
	"io"
	"os"
)

// File is an open file. Writes go either through Write (appends at the
// file's write position, which starts at the end of the file for OpenAppend
// files), through WriteAt, or through the memory mapping returned by Map.
type File interface {
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer

	// Writev writes the buffers one after another at the write position with
	// one system call where the platform allows it (writev(2)).
	Writev(bufs [][]byte) (int, error)
	// Sync makes everything written to the file durable: data written with
	// Write/WriteAt and data stored through a mapping (fdatasync(2)).
	Sync() error
	// StartWriteback starts writing the dirty pages of [off, off+n) to the
	// disk and returns without waiting for them (sync_file_range(2) with
	// SYNC_FILE_RANGE_WRITE on the OS), so that a later Sync has less left
	// to write. It is a hint, not a durability mechanism: it makes nothing
	// durable (only Sync does), and an I/O error of that writeback is
	// reported by the next Sync too (SYNC_FILE_RANGE_WRITE alone does not
	// consume the file's writeback error, errseq; the WAIT flags would).
	// Filesystems without writeback (MemFS) accept it as a no-op.
	StartWriteback(off, n int64) error
	// Truncate changes the size; growing fills with zeros (preallocation).
	Truncate(size int64) error
	// Size is the current size in bytes.
	Size() (int64, error)
	// Map maps the first size bytes of the file read-write and shared, so
	// stores into the slice become file data (mmap(2)). The file must already
	// be at least size bytes long. Unmap releases it; the slice must not be
	// used afterwards. A file has at most one mapping at a time.
	Map(size int64) ([]byte, error)
	Unmap() error
	// Name is the path the file was opened with.
	Name() string
}

// OSFile is implemented by files backed by the operating system, so the
// server can sendfile(2) from them.
type OSFile interface {
	OS() *os.File
}

// Preallocator is implemented by files that can reserve disk blocks ahead
// of the writes (fallocate(2) with FALLOC_FL_KEEP_SIZE on the OS): the size
// and the contents do not change, the blocks past the end are freed by a
// Truncate. It is a hint: writes work without it.
type Preallocator interface {
	Preallocate(off, n int64) error
}

// FS is a filesystem.
type FS interface {
	// Create creates or truncates a file for reading and writing.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing with the
	// write position at the end of the file.
	OpenReadWrite(name string) (File, error)
	Remove(name string) error
	// RemoveAll removes a directory and all it contains.
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// SyncDir makes creations, removals and renames in dir durable.
	SyncDir(dir string) error
	// Stat reports whether name exists and its size.
	Stat(name string) (os.FileInfo, error)
}

// ReadFile returns the whole current contents of the file name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	n, err := f.ReadAt(data, 0)
	if err == io.EOF && int64(n) == size {
		err = nil
	}
	return data[:n], err
}
