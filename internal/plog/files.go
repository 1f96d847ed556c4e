package plog

import (
	"container/list"
	"fmt"
	"sync"

	"github.com/sushka-io/sushka/internal/vfs"
)

// DefaultMaxOpenSegmentFiles is the limit of DefaultFileCache.
const DefaultMaxOpenSegmentFiles = 1024

// DefaultFileCache is the file cache of logs whose Config.FileCache is nil:
// one for the whole process, so that the bound holds across logs.
var DefaultFileCache = NewFileCache(DefaultMaxOpenSegmentFiles)

// FileCache bounds the open files of sealed segments across every log that
// shares it (a broker shares one), so that the descriptors a broker needs do
// not grow with its partitions times their segments. A sealed segment's file
// is opened when a reader needs it and stays open while it is pinned (a
// Read's chunks until ReadResult.Release, after their bytes went out with
// sendfile); unpinned, it is kept open, least recently used first out, while
// there are no more than the limit, then closed. It is reopened on the next
// read.
//
// The limit bounds the idle files: when every open sealed file is pinned, a
// reader opens one more rather than wait (a fetch pins one segment per
// partition until its response is written, so waiting could deadlock), and
// the excess is closed as soon as pins are released. Active segments are
// the writers' and not counted.
//
// All the file state of the segments of its logs is guarded by mu, a leaf
// lock (after Log.mu); files are opened and closed under it, which costs a
// system call on a miss only.
type FileCache struct {
	limit int

	mu   sync.Mutex
	open int       // (mu) sealed segment files open, pinned or idle
	idle list.List // (mu) *segment: sealed, open, unpinned; least recently used at the front
}

// NewFileCache returns a cache keeping at most limit sealed segment files
// open when idle. limit must be at least 1.
func NewFileCache(limit int) *FileCache {
	if limit < 1 {
		panic(fmt.Sprintf("plog.NewFileCache: limit %d, must be at least 1", limit))
	}
	return &FileCache{limit: limit}
}

// Open is the number of sealed segment files open now (for metrics and
// tests).
func (c *FileCache) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// Limit is the number of idle sealed files kept open.
func (c *FileCache) Limit() int { return c.limit }

// evictLocked closes idle files, least recently used first, while more
// than the limit are open.
func (c *FileCache) evictLocked() {
	for c.open > c.limit && c.idle.Len() > 0 {
		s := c.idle.Remove(c.idle.Front()).(*segment)
		s.idleElem = nil
		s.file.Close()
		s.file = nil
		c.open--
	}
}

// acquire pins s's file, opening it if it is closed; the caller must hold
// Log.mu (read) and have found s on the log's list, so that the file has
// not been removed. Every successful acquire is paired with one release.
func (s *segment) acquire() error {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.file == nil {
		if s.dropped {
			return ErrClosed // a closed log's segment
		}
		c.open++ // counted first, so eviction makes room before the open
		c.evictLocked()
		f, err := s.fs.Open(s.path)
		if err != nil {
			c.open--
			return &IOError{Op: "open segment", Err: err}
		}
		s.file = f
	}
	if s.idleElem != nil {
		c.idle.Remove(s.idleElem)
		s.idleElem = nil
	}
	s.pins++
	return nil
}

// release unpins s's file: closed at once if the log dropped the segment,
// else kept open among the idle (sealed) or by the writer (active).
func (s *segment) release() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	s.pins--
	s.idleLocked()
}

// idleLocked files s's unpinned file: closed if the segment was dropped,
// counted among the idle sealed files otherwise.
func (s *segment) idleLocked() {
	c := s.cache
	if s.pins > 0 || s.file == nil {
		return
	}
	switch {
	case s.dropped:
		s.file.Close()
		s.file = nil
		if s.sealed {
			c.open--
		}
	case s.sealed:
		s.idleElem = c.idle.PushBack(s)
		c.evictLocked()
	}
}

// seal hands the file of the segment that stopped being active (rolled,
// synced and unmapped) from the writer to the cache.
func (s *segment) seal() {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.sealed {
		return
	}
	s.sealed = true
	if s.file != nil {
		c.open++
	}
	s.pins-- // the writer's
	s.idleLocked()
	c.evictLocked()
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
	if !s.sealed {
		s.pins-- // the writer's
	}
	if s.idleElem != nil {
		c.idle.Remove(s.idleElem)
		s.idleElem = nil
	}
	s.idleLocked()
}

// fileFS is what a segment needs of the filesystem to reopen its file.
type fileFS interface {
	Open(name string) (vfs.File, error)
}
