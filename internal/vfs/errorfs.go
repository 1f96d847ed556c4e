package vfs

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Op names a filesystem operation, for fault injection (Injector) and sync
// hooks ((*MemFS).SetSyncHook).
type Op int

const (
	opInvalid Op = iota
	// FS operations.
	OpCreate
	OpOpen
	OpOpenReadWrite
	OpRemove
	OpRemoveAll
	OpRename
	OpMkdirAll
	OpList
	OpSyncDir
	OpStat
	// File operations.
	OpRead // ReadAt
	OpWrite
	OpWritev
	OpWriteAt
	OpSync
	OpTruncate
	OpSize
	OpMap
	OpUnmap
	OpClose
	OpStartWriteback
	// OpAny matches every operation in OnPath and FailAfter; it is never
	// passed to an Injector.
	OpAny
)

var opNames = [...]string{
	opInvalid:       "invalid",
	OpCreate:        "create",
	OpOpen:          "open",
	OpOpenReadWrite: "open-read-write",
	OpRemove:        "remove",
	OpRemoveAll:     "remove-all",
	OpRename:        "rename",
	OpMkdirAll:      "mkdir-all",
	OpList:          "list",
	OpSyncDir:       "sync-dir",
	OpStat:          "stat",
	OpRead:          "read",
	OpWrite:         "write",
	OpWritev:        "writev",
	OpWriteAt:       "write-at",
	OpSync:          "sync",
	OpTruncate:      "truncate",
	OpSize:          "size",
	OpMap:           "map",
	OpUnmap:         "unmap",
	OpClose:         "close",
	OpAny:           "any",
}

func (op Op) String() string {
	if op < 0 || int(op) >= len(opNames) {
		return "Op(" + strconv.Itoa(int(op)) + ")"
	}
	return opNames[op]
}

// ErrInjected is the error the ready-made injectors return. Errors from an
// ErrorFS wrap the injector's error in an *os.PathError, so test with
// errors.Is(err, ErrInjected).
var ErrInjected = errors.New("vfs: injected error")

// Injector decides whether an operation fails. It is consulted before the
// operation with the name of the file or directory it concerns (for
// OpRename, the old name); a non-nil error fails the operation, which is
// then not performed at all (a failed Write writes nothing). Injectors are
// called concurrently when the filesystem is used concurrently.
type Injector interface {
	MaybeError(op Op, path string) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op, path string) error

// MaybeError calls fn.
func (fn InjectorFunc) MaybeError(op Op, path string) error { return fn(op, path) }

// FailAfter fails the n-th operation of kind op (counting from 1) and every
// later one with ErrInjected: FailAfter(OpSync, 3) lets two syncs succeed.
// n <= 1 fails them all; OpAny counts operations of every kind.
func FailAfter(op Op, n int) Injector {
	var mu sync.Mutex
	count := 0
	return InjectorFunc(func(o Op, _ string) error {
		if op != OpAny && o != op {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		count++
		if count >= n {
			return ErrInjected
		}
		return nil
	})
}

// OnPath fails every operation of kind op (every operation for OpAny) whose
// path contains substring with ErrInjected.
func OnPath(substring string, op Op) Injector {
	return InjectorFunc(func(o Op, path string) error {
		if (op == OpAny || o == op) && strings.Contains(path, substring) {
			return ErrInjected
		}
		return nil
	})
}

// WritesWhile fails every write and sync (OpWrite, OpWritev, OpWriteAt,
// OpSync, OpStartWriteback) of a path containing substring ("" for every path) with
// ErrInjected while failing is set: a disk that breaks and comes back.
func WritesWhile(failing *atomic.Bool, substring string) Injector {
	return InjectorFunc(func(op Op, path string) error {
		switch op {
		case OpWrite, OpWritev, OpWriteAt, OpSync, OpStartWriteback:
			if failing.Load() && strings.Contains(path, substring) {
				return ErrInjected
			}
		}
		return nil
	})
}

// AnyOf fails an operation when one of the injectors does (consulting them
// in order and stopping at the first error, so later counters do not count
// an operation that already failed).
func AnyOf(injectors ...Injector) Injector {
	return InjectorFunc(func(op Op, path string) error {
		for _, in := range injectors {
			if err := in.MaybeError(op, path); err != nil {
				return err
			}
		}
		return nil
	})
}

// NewErrorFS wraps inner so that inject can fail any operation on it or on
// the files it opens. Files that inner backs with an *os.File still
// implement OSFile (the *os.File itself is not wrapped).
func NewErrorFS(inner FS, inject Injector) FS {
	return &errorFS{inner: inner, inject: inject}
}

type errorFS struct {
	inner  FS
	inject Injector
}

func (fs *errorFS) check(op Op, path string) error {
	if err := fs.inject.MaybeError(op, path); err != nil {
		return &os.PathError{Op: op.String(), Path: path, Err: err}
	}
	return nil
}

func (fs *errorFS) wrap(f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	ef := &errorFile{inner: f, fs: fs}
	if _, ok := f.(OSFile); ok {
		return &errorOSFile{ef}, nil
	}
	return ef, nil
}

func (fs *errorFS) Create(name string) (File, error) {
	if err := fs.check(OpCreate, name); err != nil {
		return nil, err
	}
	return fs.wrap(fs.inner.Create(name))
}

func (fs *errorFS) Open(name string) (File, error) {
	if err := fs.check(OpOpen, name); err != nil {
		return nil, err
	}
	return fs.wrap(fs.inner.Open(name))
}

func (fs *errorFS) OpenReadWrite(name string) (File, error) {
	if err := fs.check(OpOpenReadWrite, name); err != nil {
		return nil, err
	}
	return fs.wrap(fs.inner.OpenReadWrite(name))
}

func (fs *errorFS) Remove(name string) error {
	if err := fs.check(OpRemove, name); err != nil {
		return err
	}
	return fs.inner.Remove(name)
}

func (fs *errorFS) RemoveAll(name string) error {
	if err := fs.check(OpRemoveAll, name); err != nil {
		return err
	}
	return fs.inner.RemoveAll(name)
}

func (fs *errorFS) Rename(oldname, newname string) error {
	if err := fs.inject.MaybeError(OpRename, oldname); err != nil {
		return &os.LinkError{Op: OpRename.String(), Old: oldname, New: newname, Err: err}
	}
	return fs.inner.Rename(oldname, newname)
}

func (fs *errorFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.check(OpMkdirAll, dir); err != nil {
		return err
	}
	return fs.inner.MkdirAll(dir, perm)
}

func (fs *errorFS) List(dir string) ([]string, error) {
	if err := fs.check(OpList, dir); err != nil {
		return nil, err
	}
	return fs.inner.List(dir)
}

func (fs *errorFS) SyncDir(dir string) error {
	if err := fs.check(OpSyncDir, dir); err != nil {
		return err
	}
	return fs.inner.SyncDir(dir)
}

func (fs *errorFS) Stat(name string) (os.FileInfo, error) {
	if err := fs.check(OpStat, name); err != nil {
		return nil, err
	}
	return fs.inner.Stat(name)
}

// errorFile is a File of an errorFS.
type errorFile struct {
	inner File
	fs    *errorFS
}

func (f *errorFile) check(op Op) error { return f.fs.check(op, f.inner.Name()) }

func (f *errorFile) Name() string { return f.inner.Name() }

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	return f.inner.ReadAt(p, off)
}

func (f *errorFile) Write(p []byte) (int, error) {
	if err := f.check(OpWrite); err != nil {
		return 0, err
	}
	return f.inner.Write(p)
}

func (f *errorFile) Writev(bufs [][]byte) (int, error) {
	if err := f.check(OpWritev); err != nil {
		return 0, err
	}
	return f.inner.Writev(bufs)
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check(OpWriteAt); err != nil {
		return 0, err
	}
	return f.inner.WriteAt(p, off)
}

func (f *errorFile) Sync() error {
	if err := f.check(OpSync); err != nil {
		return err
	}
	return f.inner.Sync()
}

func (f *errorFile) StartWriteback(off, n int64) error {
	if err := f.check(OpStartWriteback); err != nil {
		return err
	}
	return f.inner.StartWriteback(off, n)
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.check(OpTruncate); err != nil {
		return err
	}
	return f.inner.Truncate(size)
}

func (f *errorFile) Size() (int64, error) {
	if err := f.check(OpSize); err != nil {
		return 0, err
	}
	return f.inner.Size()
}

func (f *errorFile) Map(size int64) ([]byte, error) {
	if err := f.check(OpMap); err != nil {
		return nil, err
	}
	return f.inner.Map(size)
}

func (f *errorFile) Unmap() error {
	if err := f.check(OpUnmap); err != nil {
		return err
	}
	return f.inner.Unmap()
}

// Close closes the inner file even when an error is injected: a failed
// close(2) still releases the descriptor.
func (f *errorFile) Close() error {
	injected := f.check(OpClose)
	err := f.inner.Close()
	if injected != nil {
		return injected
	}
	return err
}

// errorOSFile is an errorFile over an OSFile.
type errorOSFile struct{ *errorFile }

func (f *errorOSFile) OS() *os.File { return f.inner.(OSFile).OS() }
