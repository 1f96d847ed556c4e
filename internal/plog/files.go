package plog

import (
	"fmt"
	"sync"

	"github.com/sushka-io/sushka/internal/vfs"
)

// DefaultMaxOpenSegmentFiles is the limit of DefaultFileCache.
const DefaultMaxOpenSegmentFiles = 1024

// DefaultFileCache is the file cache of logs whose Config.FileCache is nil:
// one for the whole process, so that the bound holds across logs.
var DefaultFileCache = NewFileCache(DefaultMaxOpenSegmentFiles)

// FileCache bounds the open segment files across every log that shares it
// (a broker shares one), so that the descriptors a broker needs grow
// neither with its partitions nor with their segments. A segment's file is
// opened when a reader or its writer needs it and stays open while pinned:
// by a Read's chunks until ReadResult.Release (after their bytes went out
// with sendfile), or by the writer of an active segment while it has
// appends to write (on the mmap write path, for the segment's whole active
// life: the mapping needs the file). Unpinned, a file is kept open, least
// recently used first out, while there are no more than the limit, then
// closed; it is reopened on the next use (read-write while the segment is
// active).
//
// The limit bounds the idle files: when every open file is pinned, one more
// is opened rather than waiting (a fetch pins one segment per partition until
// its response is written, so waiting could deadlock), and the excess is
// closed as soon as pins are released.
//
// All the file state of the segments of its logs is guarded by mu, a leaf
// lock (after Log.mu); files are opened and closed under it, which costs a
// system call on a miss only.
type FileCache struct {
	limit int

	mu   sync.Mutex
	open int // (mu) segment files open, pinned or idle
	// idle is a ring of the segments with an open, unpinned file, linked
	// through their idlePrev/idleNext (no allocation per unpin): the least
	// recently used is idle.idleNext.
	idle  segment // (mu)
	idles int     // (mu) segments on the ring
}

// NewFileCache returns a cache keeping at most limit idle segment files
// open. limit must be at least 1.
func NewFileCache(limit int) *FileCache {
	if limit < 1 {
		panic(fmt.Sprintf("plog.NewFileCache: limit %d, must be at least 1", limit))
	}
	c := &FileCache{limit: limit}
	c.idle.idlePrev, c.idle.idleNext = &c.idle, &c.idle
	return c
}

// pushIdleLocked puts s at the most recently used end of the ring.
func (c *FileCache) pushIdleLocked(s *segment) {
	last := c.idle.idlePrev
	s.idlePrev, s.idleNext = last, &c.idle
	last.idleNext, c.idle.idlePrev = s, s
	c.idles++
}

// removeIdleLocked takes s off the ring if it is on it.
func (c *FileCache) removeIdleLocked(s *segment) {
	if s.idleNext == nil {
		return
	}
	s.idlePrev.idleNext, s.idleNext.idlePrev = s.idleNext, s.idlePrev
	s.idlePrev, s.idleNext = nil, nil
	c.idles--
}

// Open is the number of segment files open now (for metrics and tests).
func (c *FileCache) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// Limit is the number of idle segment files kept open.
func (c *FileCache) Limit() int { return c.limit }

// evictLocked closes idle files, least recently used first, while more
// than the limit are open.
func (c *FileCache) evictLocked() {
	for c.open > c.limit && c.idles > 0 {
		s := c.idle.idleNext
		c.removeIdleLocked(s)
		s.file.Close()
		s.file = nil
		c.open--
	}
}

// addLocked counts a newly opened file of s.
func (c *FileCache) addLocked() {
	c.open++
	c.evictLocked()
}

// acquire pins s's file for a reader, opening it if it is closed; the
// caller must hold Log.mu (read) and have found s on the log's list, so that
// the file has not been removed. Every successful acquire is paired with
// one release.
func (s *segment) acquire() error {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.pinLocked()
}

// pinLocked pins s's file, opening it when closed: read-only once sealed,
// read-write (write position at the end) while active, so that the writer
// can use a file a reader opened.
func (s *segment) pinLocked() error {
	c := s.cache
	if s.file == nil {
		if s.dropped {
			return ErrClosed // a closed log's segment
		}
		c.open++ // counted first, so eviction makes room before the open
		c.evictLocked()
		var f vfs.File
		var err error
		if s.sealed {
			f, err = s.fs.Open(s.path)
		} else {
			f, err = s.fs.OpenReadWrite(s.path)
		}
		if err != nil {
			c.open--
			return &IOError{Op: "open segment", Err: err}
		}
		s.file = f
	}
	c.removeIdleLocked(s)
	s.pins++
	return nil
}

// release unpins s's file after acquire.
func (s *segment) release() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	s.pins--
	s.idleLocked()
}

// pinWriter pins the active segment's file for its writer (a no-op when
// pinned already).
func (s *segment) pinWriter() error {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.writerPin {
		return nil
	}
	if err := s.pinLocked(); err != nil {
		return err
	}
	s.writerPin = true
	return nil
}

// unpinWriter lets the file of the segment be closed while its writer is
// idle (a no-op when not pinned).
func (s *segment) unpinWriter() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	s.unpinWriterLocked()
}

func (s *segment) unpinWriterLocked() {
	if s.writerPin {
		s.writerPin = false
		s.pins--
		s.idleLocked()
	}
}

// idleLocked files s's unpinned file: closed if the segment was dropped,
// kept among the idle files otherwise.
func (s *segment) idleLocked() {
	c := s.cache
	if s.pins > 0 || s.file == nil {
		return
	}
	if s.dropped {
		s.file.Close()
		s.file = nil
		c.open--
		return
	}
	c.pushIdleLocked(s)
	c.evictLocked()
}

// seal marks the segment that stopped being active (rolled, synced and
// unmapped) and drops its writer's pin: its file is reopened read-only from
// now on.
func (s *segment) seal() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	s.sealed = true
	s.unpinWriterLocked()
}

// drop is the log letting go of s (retention, DeleteRecords, Close): its
// file closes now, or when the last reader releases it.
func (s *segment) drop() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.dropped {
		return
	}
	s.dropped = true
	c.removeIdleLocked(s)
	if s.writerPin {
		s.writerPin = false
		s.pins--
	}
	s.idleLocked()
}

// fileFS is what a segment needs of the filesystem to reopen its file.
type fileFS interface {
	Open(name string) (vfs.File, error)
	OpenReadWrite(name string) (vfs.File, error)
}
