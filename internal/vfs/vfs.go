// Package vfs is the filesystem seen by Sushka's storage packages.
//
// Core packages (internal/log, internal/group) never call os.* directly: they
// take an FS, so tests can run them on an in-memory filesystem that forgets
// unsynced data at a simulated crash (NewMem, (*MemFS).Crash) or on one that
// injects I/O errors by operation (NewErrorFS).
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
