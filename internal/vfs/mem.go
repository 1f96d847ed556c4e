package vfs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory filesystem that remembers, besides the current state
// of every file and directory, what a power loss would leave of it. The
// crash model is described in the package documentation (see Crash).
//
// Names are slash-separated; there is no working directory, so "a/b" and
// "/a/b" name the same file. A MemFS is safe for concurrent use: one mutex
// guards the whole tree (tests, not speed, are what it is for).
type MemFS struct {
	mu   sync.Mutex
	root *memNode

	syncCount    int64 // successful File.Sync calls
	syncDirCount int64 // successful SyncDir calls
	syncHook     func(op Op, name string)
}

// memNode is a directory or a file (an inode: renames move the node, open
// files keep pointing at it after it is removed).
type memNode struct {
	isDir bool

	// Directory. children is the current namespace; durableChildren is the
	// namespace as of the last SyncDir of this directory (what a crash
	// restores). dirty is set by any change of children since then.
	children        map[string]*memNode
	durableChildren map[string]*memNode
	dirty           bool

	// File. data is the current contents, durable what the last Sync made
	// durable. Invariant: data[:dirtyFrom] == durable[:dirtyFrom] (both are
	// at least that long), except that stores through a mapping are not
	// tracked: mappedSinceSync says they may have changed any byte.
	data            []byte
	durable         []byte
	dirtyFrom       int
	mapCount        int // live mappings; data must not be reallocated while > 0
	mappedSinceSync bool
}

// NewMem returns an empty in-memory filesystem whose root directory exists
// and is durable.
func NewMem() *MemFS {
	return &MemFS{root: newMemDir()}
}

func newMemDir() *memNode {
	return &memNode{
		isDir:           true,
		children:        map[string]*memNode{},
		durableChildren: map[string]*memNode{},
	}
}

// SetSyncHook installs fn to be called after every successful File.Sync
// (op OpSync, with the file's name) and SyncDir (op OpSyncDir, with the
// directory) once it has taken effect. fn runs without the filesystem's lock
// held, so it may call Crash to take a snapshot at that sync point. nil
// removes the hook.
func (y *MemFS) SetSyncHook(fn func(op Op, name string)) {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.syncHook = fn
}

// SyncCount is the number of successful File.Sync calls so far.
func (y *MemFS) SyncCount() int64 {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.syncCount
}

// SyncDirCount is the number of successful SyncDir calls so far.
func (y *MemFS) SyncDirCount() int64 {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.syncDirCount
}

// Crash returns a new filesystem holding what a power loss at this moment
// could have left on disk; y itself is unchanged and stays usable. The new
// filesystem is fully durable, shares nothing with y, and files open on y
// (or mapped from it) do not affect it.
//
// With rng == nil the outcome is the worst one: exactly the durable state
// (the entries of each directory as of its last SyncDir, the contents of
// each file as of its last Sync). With an rng, part of the unsynced changes
// may survive too, as the package documentation describes, with writeback
// in order (a prefix of each file's unsynced changes); the outcome is a
// function of the state and of the rng's sequence only.
//
// Stores through a mapping that race with Crash are the caller's data race:
// order them before the call.
func (y *MemFS) Crash(rng *rand.Rand) *MemFS {
	return y.crash(rng, false)
}

// CrashOutOfOrder is Crash with writeback out of order, as the page cache
// does it: each page (PageSize bytes) of a file's unsynced changes reached
// the disk, or did not, or reached it torn, independently of the others (see
// the package documentation). Synced data survives byte for byte, as with
// Crash, and CrashOutOfOrder(nil) is Crash(nil).
func (y *MemFS) CrashOutOfOrder(rng *rand.Rand) *MemFS {
	return y.crash(rng, true)
}

func (y *MemFS) crash(rng *rand.Rand, outOfOrder bool) *MemFS {
	y.mu.Lock()
	defer y.mu.Unlock()
	c := crasher{rng: rng, outOfOrder: outOfOrder, seen: map[*memNode]bool{}}
	return &MemFS{root: c.dir(y.root)}
}

type crasher struct {
	rng        *rand.Rand
	outOfOrder bool // pages of a file reach the disk independently
	// seen records the nodes already placed: a node reachable under two
	// names (a rename between two directories of which only one was synced
	// since) is kept under the first name in walk order only, since a rename
	// is atomic on a journaling filesystem.
	seen map[*memNode]bool
}

func (c *crasher) dir(n *memNode) *memNode {
	entries := n.durableChildren
	// The directory's unsynced entry changes reached the journal as a whole
	// or not at all.
	if n.dirty && c.rng != nil && c.rng.IntN(2) == 0 {
		entries = n.children
	}
	out := newMemDir()
	for _, name := range sortedKeys(entries) {
		child := entries[name]
		if c.seen[child] {
			continue
		}
		c.seen[child] = true
		var crashed *memNode
		if child.isDir {
			crashed = c.dir(child)
		} else {
			var contents []byte
			if c.outOfOrder {
				contents = crashPages(child.durable, child.data, c.rng)
			} else {
				contents = crashContents(child.durable, child.data, c.rng)
			}
			crashed = &memNode{data: contents, durable: slices.Clone(contents), dirtyFrom: len(contents)}
		}
		out.children[name] = crashed
		out.durableChildren[name] = crashed
	}
	return out
}

// crashSize is the size a crash leaves of a file whose durable size is
// durable and whose current size is current: the size change (an append, a
// Truncate growing or shrinking) was written or not, independently of the
// data.
func crashSize(durable, current int, rng *rand.Rand) int {
	switch {
	case current > durable:
		switch rng.IntN(3) {
		case 0:
			return durable
		case 1:
			return current
		default:
			return durable + rng.IntN(current-durable+1)
		}
	case current < durable:
		if rng.IntN(2) == 0 {
			return durable
		}
	}
	return current
}

// crashContents is what a crash leaves of a file whose durable contents are
// durable and whose current contents are current, with writeback in order
// (see the package doc).
func crashContents(durable, current []byte, rng *rand.Rand) []byte {
	same := commonPrefix(durable, current) // where the modified region starts
	if rng == nil || (same == len(durable) && same == len(current)) || rng.IntN(4) == 0 {
		return slices.Clone(durable) // none of the unsynced changes reached the disk
	}
	size := crashSize(len(durable), len(current), rng)
	// Writeback reached the disk up to byte written (torn anywhere); half
	// of the time it went exactly as far as the size.
	written := size
	if rng.IntN(2) == 0 {
		written = same + rng.IntN(size-same+1)
	}
	out := make([]byte, size)
	copy(out, durable)
	copy(out[:written], current)
	return out
}

// PageSize is the unit of out-of-order writeback in CrashOutOfOrder.
const PageSize = 4096

// crashPages is what a crash leaves of a file whose durable contents are
// durable and whose current contents are current, with writeback out of
// order: the size as crashContents chooses it, then each page of the
// modified region, independently, reached the disk (current bytes), did not
// (durable bytes, zeros past them) or was torn (current bytes up to a
// random byte of the page, then durable bytes or zeros).
func crashPages(durable, current []byte, rng *rand.Rand) []byte {
	same := commonPrefix(durable, current)
	if rng == nil || (same == len(durable) && same == len(current)) || rng.IntN(4) == 0 {
		return slices.Clone(durable)
	}
	size := crashSize(len(durable), len(current), rng)
	out := make([]byte, size)
	copy(out, durable)
	// Each file leans one way (most pages written, or most lost), so that
	// long runs of surviving and of lost pages both occur.
	survive := 1 + rng.IntN(3) // in quarters
	for page := same / PageSize * PageSize; page < size; page += PageSize {
		end := min(page+PageSize, size, len(current))
		if end <= page {
			break // past the current contents: durable bytes and zeros
		}
		from := max(page, same)
		switch r := rng.IntN(8); {
		case r < 2*survive: // reached the disk
			copy(out[from:end], current[from:end])
		case r == 7: // torn
			copy(out[from:end], current[from:from+rng.IntN(end-from+1)])
		}
	}
	return out
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	const chunk = 4096
	n := min(len(a), len(b))
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func sortedKeys(m map[string]*memNode) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// splitPath turns a name into its components; the root has none.
func splitPath(name string) []string {
	clean := filepath.ToSlash(filepath.Clean("/" + name))
	if clean == "/" {
		return nil
	}
	return strings.Split(clean[1:], "/")
}

// lookupLocked finds the node named name.
func (y *MemFS) lookupLocked(op, name string) (*memNode, error) {
	n := y.root
	for _, part := range splitPath(name) {
		if !n.isDir {
			return nil, &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
		child, ok := n.children[part]
		if !ok {
			return nil, &os.PathError{Op: op, Path: name, Err: syscall.ENOENT}
		}
		n = child
	}
	return n, nil
}

// parentLocked finds the directory that holds (or would hold) name and the
// last component of name. The root has no parent.
func (y *MemFS) parentLocked(op, name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.EBUSY}
	}
	dir, err := y.lookupLocked(op, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", &os.PathError{Op: op, Path: name, Err: err.(*os.PathError).Err}
	}
	if !dir.isDir {
		return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return dir, parts[len(parts)-1], nil
}

// Create creates name or truncates it if it exists (the same file: handles
// already open see the truncation).
func (y *MemFS) Create(name string) (File, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	dir, base, err := y.parentLocked("open", name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.children[base]
	switch {
	case ok && n.isDir:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case ok:
		if n.mapCount > 0 && len(n.data) > 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: ErrMapped}
		}
		n.resizeLocked(0)
	default:
		n = &memNode{}
		dir.children[base] = n
		dir.dirty = true
	}
	return &memFile{fs: y, node: n, name: name}, nil
}

// Open opens an existing file read-only.
func (y *MemFS) Open(name string) (File, error) {
	return y.open(name, true)
}

// OpenReadWrite opens an existing file with the write position at its end.
func (y *MemFS) OpenReadWrite(name string) (File, error) {
	return y.open(name, false)
}

func (y *MemFS) open(name string, readOnly bool) (File, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	n, err := y.lookupLocked("open", name)
	if err != nil {
		return nil, err
	}
	if n.isDir {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	f := &memFile{fs: y, node: n, name: name, readOnly: readOnly}
	if !readOnly {
		f.pos = int64(len(n.data))
	}
	return f, nil
}

// Remove removes a file or an empty directory.
func (y *MemFS) Remove(name string) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	dir, base, err := y.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	if n.isDir && len(n.children) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(dir.children, base)
	dir.dirty = true
	return nil
}

// RemoveAll removes name and everything under it; a missing name is not an
// error. Each directory of the removed tree loses its entries as if they
// were unlinked one by one, so a crash before the parent is synced may bring
// the directory back, with its entries or without them.
func (y *MemFS) RemoveAll(name string) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	dir, base, err := y.parentLocked("unlinkat", name)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok && pe.Err == syscall.ENOENT {
			return nil
		}
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return nil
	}
	var clearTree func(*memNode)
	clearTree = func(d *memNode) {
		if !d.isDir {
			return
		}
		for _, child := range d.children {
			clearTree(child)
		}
		if len(d.children) > 0 {
			d.children = map[string]*memNode{}
			d.dirty = true
		}
	}
	clearTree(n)
	delete(dir.children, base)
	dir.dirty = true
	return nil
}

// Rename moves oldname to newname, replacing a file (or an empty directory,
// when oldname is a directory) at newname.
func (y *MemFS) Rename(oldname, newname string) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	fail := func(errno syscall.Errno) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errno}
	}
	oldDir, oldBase, err := y.parentLocked("rename", oldname)
	if err != nil {
		return fail(err.(*os.PathError).Err.(syscall.Errno))
	}
	n, ok := oldDir.children[oldBase]
	if !ok {
		return fail(syscall.ENOENT)
	}
	newDir, newBase, err := y.parentLocked("rename", newname)
	if err != nil {
		return fail(err.(*os.PathError).Err.(syscall.Errno))
	}
	oldParts, newParts := splitPath(oldname), splitPath(newname)
	if n.isDir && len(newParts) > len(oldParts) && slices.Equal(newParts[:len(oldParts)], oldParts) {
		return fail(syscall.EINVAL) // a directory into its own subtree
	}
	if target, ok := newDir.children[newBase]; ok {
		switch {
		case target == n:
			return nil
		case target.isDir && !n.isDir:
			return fail(syscall.EISDIR)
		case !target.isDir && n.isDir:
			return fail(syscall.ENOTDIR)
		case target.isDir && len(target.children) > 0:
			return fail(syscall.ENOTEMPTY)
		}
	}
	delete(oldDir.children, oldBase)
	newDir.children[newBase] = n
	oldDir.dirty = true
	newDir.dirty = true
	return nil
}

// MkdirAll creates dir and the missing directories above it. The new
// directories are durable only once their parents are synced (SyncDir).
func (y *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	n := y.root
	for _, part := range splitPath(dir) {
		child, ok := n.children[part]
		if !ok {
			child = newMemDir()
			child.durableChildren = nil // never synced: no durable entries
			child.dirty = true
			n.children[part] = child
			n.dirty = true
		} else if !child.isDir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = child
	}
	return nil
}

// List returns the sorted names of the entries of dir.
func (y *MemFS) List(dir string) ([]string, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	n, err := y.lookupLocked("open", dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, &os.PathError{Op: "readdirent", Path: dir, Err: syscall.ENOTDIR}
	}
	return sortedKeys(n.children), nil
}

// SyncDir makes the current entries of dir durable (not the contents of
// the files, nor the entries of its subdirectories).
func (y *MemFS) SyncDir(dir string) error {
	y.mu.Lock()
	n, err := y.lookupLocked("open", dir)
	if err == nil && !n.isDir {
		err = &os.PathError{Op: "fsync", Path: dir, Err: syscall.ENOTDIR}
	}
	if err != nil {
		y.mu.Unlock()
		return err
	}
	n.durableChildren = make(map[string]*memNode, len(n.children))
	for k, v := range n.children {
		n.durableChildren[k] = v
	}
	n.dirty = false
	y.syncDirCount++
	hook := y.syncHook
	y.mu.Unlock()
	if hook != nil {
		hook(OpSyncDir, dir)
	}
	return nil
}

// Stat describes name.
func (y *MemFS) Stat(name string) (os.FileInfo, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	n, err := y.lookupLocked("stat", name)
	if err != nil {
		return nil, err
	}
	parts := splitPath(name)
	base := "/"
	if len(parts) > 0 {
		base = parts[len(parts)-1]
	}
	return memFileInfo{name: base, size: int64(len(n.data)), isDir: n.isDir}, nil
}

type memFileInfo struct {
	name  string
	size  int64
	isDir bool
}

func (fi memFileInfo) Name() string       { return fi.name }
func (fi memFileInfo) Size() int64        { return fi.size }
func (fi memFileInfo) ModTime() time.Time { return time.Time{} }
func (fi memFileInfo) IsDir() bool        { return fi.isDir }
func (fi memFileInfo) Sys() any           { return nil }
func (fi memFileInfo) Mode() os.FileMode {
	if fi.isDir {
		return os.ModeDir | 0o755
	}
	return 0o644
}

// resizeLocked sets the size of the file's current contents, zero-filling
// growth (the spare capacity may hold stale bytes of earlier contents).
func (n *memNode) resizeLocked(size int) {
	old := len(n.data)
	n.dirtyFrom = min(n.dirtyFrom, old, size)
	if size <= old {
		n.data = n.data[:size]
		return
	}
	n.data = slices.Grow(n.data, size-old)[:size]
	clear(n.data[old:])
}

// memFile is an open file of a MemFS. All its state is guarded by fs.mu.
type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	readOnly bool
	pos      int64 // write position
	mapped   bool
	closed   bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) pathError(op string, err error) error {
	return &os.PathError{Op: op, Path: f.name, Err: err}
}

// checkLocked returns the error of an operation on a closed file or of a
// write through a read-only one.
func (f *memFile) checkLocked(op string, write bool) error {
	if f.closed {
		return f.pathError(op, os.ErrClosed)
	}
	if write && f.readOnly {
		return f.pathError(op, syscall.EBADF)
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, f.pathError("read", syscall.EINVAL)
	}
	data := f.node.data
	if off >= int64(len(data)) {
		return 0, io.EOF
	}
	n := copy(p, data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("write", true); err != nil {
		return 0, err
	}
	if err := f.writeAtLocked("write", p, f.pos); err != nil {
		return 0, err
	}
	f.pos += int64(len(p))
	return len(p), nil
}

// Writev writes the buffers at the write position, all or nothing.
func (f *memFile) Writev(bufs [][]byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("writev", true); err != nil {
		return 0, err
	}
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if f.node.mapCount > 0 && f.pos+int64(total) > int64(len(f.node.data)) {
		return 0, f.pathError("writev", ErrMapped)
	}
	for _, b := range bufs {
		if err := f.writeAtLocked("writev", b, f.pos); err != nil {
			return 0, err // unreachable: the size check above covers it
		}
		f.pos += int64(len(b))
	}
	return total, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, f.pathError("write", syscall.EINVAL)
	}
	if err := f.writeAtLocked("write", p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeAtLocked stores p at off, growing the file (zero-filling a gap) when
// it ends past the end, which is refused while the file is mapped.
func (f *memFile) writeAtLocked(op string, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	n := f.node
	end := off + int64(len(p))
	if end > int64(len(n.data)) {
		if n.mapCount > 0 {
			return f.pathError(op, ErrMapped)
		}
		n.resizeLocked(int(end))
	}
	copy(n.data[off:], p)
	n.dirtyFrom = min(n.dirtyFrom, int(off))
	return nil
}

// Sync makes the current contents durable, including stores through a
// mapping, then calls the sync hook.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	if err := f.checkLocked("sync", false); err != nil {
		f.fs.mu.Unlock()
		return err
	}
	n := f.node
	from := n.dirtyFrom
	if n.mappedSinceSync {
		from = 0
	}
	n.durable = append(n.durable[:from], n.data[from:]...)
	n.dirtyFrom = len(n.data)
	n.mappedSinceSync = n.mapCount > 0
	f.fs.syncCount++
	hook := f.fs.syncHook
	f.fs.mu.Unlock()
	if hook != nil {
		hook(OpSync, f.name)
	}
	return nil
}

// StartWriteback is a no-op: a MemFS has no writeback to start, and what
// survives a crash is decided by Sync alone (the crash model). It fails
// only on a closed file, as sync_file_range(2) does on a closed descriptor.
func (f *memFile) StartWriteback(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("sync_file_range", false); err != nil {
		return err
	}
	if off < 0 || n < 0 {
		return f.pathError("sync_file_range", syscall.EINVAL)
	}
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("truncate", true); err != nil {
		return err
	}
	if size < 0 || size != int64(int(size)) {
		return f.pathError("truncate", syscall.EINVAL)
	}
	if size == int64(len(f.node.data)) {
		return nil
	}
	if f.node.mapCount > 0 {
		return f.pathError("truncate", ErrMapped)
	}
	f.node.resizeLocked(int(size))
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("stat", false); err != nil {
		return 0, err
	}
	return int64(len(f.node.data)), nil
}

// Map returns the first size bytes of the file's contents themselves: stores
// into the slice change the file (Sync makes them durable, ReadAt sees them)
// until Unmap. While mapped, the file's size cannot change. The MemFS does
// not synchronise stores through the slice: as with a real mapping, order
// them (happens-before) with a ReadAt, Sync or Crash reading the same bytes,
// or the race detector will rightly complain.
func (f *memFile) Map(size int64) ([]byte, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkLocked("mmap", false); err != nil {
		return nil, err
	}
	if f.readOnly {
		return nil, f.pathError("mmap", syscall.EACCES)
	}
	if f.mapped {
		return nil, f.pathError("mmap", ErrMapped)
	}
	n := f.node
	if size <= 0 || size > int64(len(n.data)) {
		return nil, f.pathError("mmap", fmt.Errorf("mapping size %d: file size is %d", size, len(n.data)))
	}
	f.mapped = true
	n.mapCount++
	n.mappedSinceSync = true
	return n.data[:size:size], nil
}

// Unmap releases the mapping; it is a no-op when there is none. Unsynced
// stores made through it stay unsynced file data, as on Linux.
func (f *memFile) Unmap() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.unmapLocked()
	return nil
}

func (f *memFile) unmapLocked() {
	if f.mapped {
		f.mapped = false
		f.node.mapCount--
	}
}

// Close releases a mapping still held, then closes the file.
func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return f.pathError("close", os.ErrClosed)
	}
	f.unmapLocked()
	f.closed = true
	return nil
}
