package vfs

import (
	"os"
	"path"
	"sync"
	"syscall"
)

// FullFS is a filesystem of limited capacity over another one, for tests
// of a full disk: a write, Writev or growing Truncate that would take the
// bytes in use past the capacity fails with ENOSPC and writes nothing;
// removing, truncating or overwriting (Create, Rename) files gives their
// bytes back. Space is counted as file sizes, not blocks, and only for what
// is written through it (start it on an empty filesystem).
type FullFS struct {
	FS
	mu       sync.Mutex
	used     int64
	capacity int64
}

// NewFullFS wraps inner with capacity bytes of space.
func NewFullFS(inner FS, capacity int64) *FullFS {
	return &FullFS{FS: inner, capacity: capacity}
}

// SetCapacity changes the capacity: lowering it below what is used fills
// the disk, raising it is space coming back.
func (fs *FullFS) SetCapacity(capacity int64) {
	fs.mu.Lock()
	fs.capacity = capacity
	fs.mu.Unlock()
}

// Used is the number of bytes in use.
func (fs *FullFS) Used() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.used
}

func (fs *FullFS) sizeOf(name string) int64 {
	fi, err := fs.FS.Stat(name)
	if err != nil || fi.IsDir() {
		return 0
	}
	return fi.Size()
}

// treeSize is the size of the files under name (name itself if a file).
func (fs *FullFS) treeSize(name string) int64 {
	fi, err := fs.FS.Stat(name)
	if err != nil {
		return 0
	}
	if !fi.IsDir() {
		return fi.Size()
	}
	entries, _ := fs.FS.List(name)
	var n int64
	for _, e := range entries {
		n += fs.treeSize(path.Join(name, e))
	}
	return n
}

func (fs *FullFS) Create(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	old := fs.sizeOf(name)
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	fs.used -= old
	return &fullFile{File: f, fs: fs}, nil
}

func (fs *FullFS) OpenReadWrite(name string) (File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: f, fs: fs}, nil
}

func (fs *FullFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	size := fs.sizeOf(name)
	if err := fs.FS.Remove(name); err != nil {
		return err
	}
	fs.used -= size
	return nil
}

func (fs *FullFS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	size := fs.treeSize(name)
	err := fs.FS.RemoveAll(name)
	fs.used -= size - fs.treeSize(name)
	return err
}

func (fs *FullFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	replaced := fs.sizeOf(newname)
	if err := fs.FS.Rename(oldname, newname); err != nil {
		return err
	}
	fs.used -= replaced
	return nil
}

// fullFile is a File of a FullFS.
type fullFile struct {
	File
	fs *FullFS
}

// grow runs op, which makes the file end at end (or leaves it shorter),
// if the space allows.
func (f *fullFile) grow(end int64, op func() error) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	size, err := f.File.Size()
	if err != nil {
		return err
	}
	growth := max(end-size, 0)
	if f.fs.used+growth > f.fs.capacity {
		return &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	if err := op(); err != nil {
		return err
	}
	after, err := f.File.Size()
	if err == nil {
		f.fs.used += after - size
	}
	return nil
}

func (f *fullFile) position() int64 {
	// Writes go at the write position, which for the files Sushka writes
	// through Write is the end (they are appended to).
	size, _ := f.File.Size()
	return size
}

func (f *fullFile) Write(p []byte) (n int, err error) {
	err = f.grow(f.position()+int64(len(p)), func() error {
		n, err = f.File.Write(p)
		return err
	})
	return n, err
}

func (f *fullFile) Writev(bufs [][]byte) (n int, err error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	err = f.grow(f.position()+int64(total), func() error {
		n, err = f.File.Writev(bufs)
		return err
	})
	return n, err
}

func (f *fullFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = f.grow(off+int64(len(p)), func() error {
		n, err = f.File.WriteAt(p, off)
		return err
	})
	return n, err
}

func (f *fullFile) Truncate(size int64) error {
	return f.grow(size, func() error { return f.File.Truncate(size) })
}
