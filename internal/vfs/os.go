package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Default is the operating system's filesystem.
var Default FS = osFS{}

// OS returns the operating system's filesystem (the same value as Default).
func OS() FS { return Default }

// ErrMapped is returned (wrapped in an *os.PathError) by an operation that
// would change the size of a file while it is mapped, or map it twice.
var ErrMapped = errors.New("vfs: file is mapped")

// maxIovecs bounds the buffers passed to one writev(2): the kernel refuses
// more than IOV_MAX (1024 on Linux) with EINVAL.
const maxIovecs = 1024

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	// Directories need fsync, not fdatasync: the entries are the "data".
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}

// osFile is a File backed by an *os.File. Reads and writes go through the
// *os.File (which is safe for concurrent use); mu guards only the mapping.
type osFile struct {
	f *os.File

	mu      sync.Mutex
	mapping []byte
}

var _ OSFile = (*osFile)(nil)

func (f *osFile) OS() *os.File                             { return f.f }
func (f *osFile) Name() string                             { return f.f.Name() }
func (f *osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f *osFile) Write(p []byte) (int, error)              { return f.f.Write(p) }
func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f *osFile) Truncate(size int64) error                { return f.f.Truncate(size) }
func (f *osFile) pathError(op string, err error) *os.PathError {
	return &os.PathError{Op: op, Path: f.f.Name(), Err: err}
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Sync is fdatasync(2): data and the metadata needed to read it back (the
// size), not timestamps.
func (f *osFile) Sync() error {
	return f.syscall("fdatasync", func(fd int) error { return unix.Fdatasync(fd) })
}

// StartWriteback is sync_file_range(2) with SYNC_FILE_RANGE_WRITE only:
// the writeback of the range's dirty pages is started (pages already under
// writeback are skipped), nothing is waited for, and no writeback error is
// consumed (the WAIT flags call file_fdatawait_range, which advances the
// file's errseq cursor: a later fdatasync would then miss an error it
// reported).
func (f *osFile) StartWriteback(off, n int64) error {
	return f.syscall("sync_file_range", func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

var _ Preallocator = (*osFile)(nil)

// Preallocate reserves the blocks of [off, off+n) without changing the
// file's size (fallocate(2), FALLOC_FL_KEEP_SIZE).
func (f *osFile) Preallocate(off, n int64) error {
	return f.syscall("fallocate", func(fd int) error {
		return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, n)
	})
}

// syscall runs call with the file descriptor, again while it is
// interrupted (EINTR), and names op and the file in its error.
func (f *osFile) syscall(op string, call func(fd int) error) error {
	var callErr error
	err := f.control(func(fd int) {
		for {
			if callErr = call(fd); callErr != unix.EINTR {
				return
			}
		}
	})
	if err == nil {
		err = callErr
	}
	if err != nil {
		return f.pathError(op, err)
	}
	return nil
}

// Writev writes bufs at the write position with writev(2), looping until
// everything is written or an error occurs (a regular file may accept a
// short write, e.g. near ENOSPC or when interrupted by a signal).
func (f *osFile) Writev(bufs [][]byte) (int, error) {
	iovecs := make([][]byte, 0, min(len(bufs), maxIovecs))
	for _, b := range bufs {
		if len(b) > 0 {
			iovecs = append(iovecs, b)
		}
	}
	total := 0
	var writeErr error
	err := f.writeControl(func(fd int) {
		for len(iovecs) > 0 {
			batch := iovecs[:min(len(iovecs), maxIovecs)]
			n, err := unix.Writev(fd, batch)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err != nil {
				writeErr = err
				return
			}
			if n == 0 {
				writeErr = io.ErrShortWrite
				return
			}
			total += n
			// Drop the fully written buffers and the written part of the
			// first partly written one.
			for n > 0 {
				if n >= len(iovecs[0]) {
					n -= len(iovecs[0])
					iovecs = iovecs[1:]
				} else {
					iovecs[0] = iovecs[0][n:]
					n = 0
				}
			}
		}
	})
	if err == nil {
		err = writeErr
	}
	if err != nil {
		return total, f.pathError("writev", err)
	}
	return total, nil
}

// Map maps the first size bytes read-write and shared. The file must be at
// least size bytes long: touching a mapped page past the end of the file
// raises SIGBUS, so it is refused here rather than crashing later.
func (f *osFile) Map(size int64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mapping != nil {
		return nil, f.pathError("mmap", ErrMapped)
	}
	if size <= 0 || size != int64(int(size)) {
		return nil, f.pathError("mmap", fmt.Errorf("invalid mapping size %d", size))
	}
	fileSize, err := f.Size()
	if err != nil {
		return nil, err
	}
	if fileSize < size {
		return nil, f.pathError("mmap", fmt.Errorf("mapping size %d exceeds file size %d", size, fileSize))
	}
	var mapping []byte
	var mapErr error
	if err := f.control(func(fd int) {
		mapping, mapErr = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}); err != nil {
		return nil, f.pathError("mmap", err)
	}
	if mapErr != nil {
		return nil, f.pathError("mmap", mapErr)
	}
	f.mapping = mapping
	return mapping, nil
}

// Unmap releases the mapping; it is a no-op when there is none.
func (f *osFile) Unmap() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unmapLocked()
}

func (f *osFile) unmapLocked() error {
	if f.mapping == nil {
		return nil
	}
	err := unix.Munmap(f.mapping)
	f.mapping = nil
	if err != nil {
		return f.pathError("munmap", err)
	}
	return nil
}

// Close releases a mapping still held, then closes the file.
func (f *osFile) Close() error {
	f.mu.Lock()
	unmapErr := f.unmapLocked()
	f.mu.Unlock()
	err := f.f.Close()
	if err == nil {
		err = unmapErr
	}
	return err
}

// control runs fn with the file descriptor, keeping it alive meanwhile.
func (f *osFile) control(fn func(fd int)) error {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// writeControl is control holding the descriptor's write lock, so the
// write position is not moved by a concurrent Write meanwhile.
func (f *osFile) writeControl(fn func(fd int)) error {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Write(func(fd uintptr) bool { fn(int(fd)); return true })
}
