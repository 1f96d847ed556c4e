package plog

import (
	"fmt"
	"sync"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/vfs"
)

// DefaultMaxOpenSegmentFiles is the limit of DefaultFileCache.
const DefaultMaxOpenSegmentFiles = 1024

// DefaultSegmentFileIdleTimeout is how long an unpinned segment file stays
// open unused before the cache closes it: Redpanda's
// readers_cache_eviction_timeout_ms (30 s). Past it, a partition nobody
// reads or writes holds no descriptor, whatever the limit (issue 12).
const DefaultSegmentFileIdleTimeout = 30 * time.Second

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
// active). An idle file unused for the cache's idle timeout is closed too,
// by one goroutine per cache that runs only while some file is idle: so
// idle partitions hold no descriptor at all, not merely a bounded number.
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
	limit       int
	idleTimeout time.Duration // 0: idle files are closed by the limit only
	clock       clock.Clock
	epoch       time.Time // segment.idleSince counts from it

	mu   sync.Mutex
	open int // (mu) segment files open, pinned or idle
	// idle is a ring of the segments with an open, unpinned file, linked
	// through their idlePrev/idleNext (no allocation per unpin): the least
	// recently used is idle.idleNext.
	idle     segment // (mu)
	idles    int     // (mu) segments on the ring
	sweeping bool    // (mu) the sweep goroutine runs
}

// NewFileCache returns a cache keeping at most limit idle segment files
// open, each for at most DefaultSegmentFileIdleTimeout unused. limit must
// be at least 1.
func NewFileCache(limit int) *FileCache {
	return NewIdleFileCache(limit, DefaultSegmentFileIdleTimeout, clock.Real{})
}

// NewIdleFileCache is NewFileCache with the idle timeout (0: an idle file
// is closed only when the limit needs its room) and the clock that times
// it.
func NewIdleFileCache(limit int, idleTimeout time.Duration, clk clock.Clock) *FileCache {
	if limit < 1 {
		panic(fmt.Sprintf("plog.NewFileCache: limit %d, must be at least 1", limit))
	}
	if idleTimeout < 0 {
		panic(fmt.Sprintf("plog.NewIdleFileCache: idle timeout %v, must be at least 0", idleTimeout))
	}
	c := &FileCache{limit: limit, idleTimeout: idleTimeout, clock: clk, epoch: clk.Now()}
	c.idle.idlePrev, c.idle.idleNext = &c.idle, &c.idle
	return c
}

// pushIdleLocked puts s at the most recently used end of the ring, idle
// from now on, and starts the sweep if none runs. The ring is thus in the
// order of idleSince: its first segment is the next to time out.
func (c *FileCache) pushIdleLocked(s *segment) {
	last := c.idle.idlePrev
	s.idlePrev, s.idleNext = last, &c.idle
	last.idleNext, c.idle.idlePrev = s, s
	c.idles++
	if c.idleTimeout > 0 {
		s.idleSince = c.clock.Now().Sub(c.epoch)
		if !c.sweeping {
			c.sweeping = true
			go c.sweep()
		}
	}
}

// sweep closes the idle files unused for the idle timeout, the oldest
// first, and ends once no file is idle (the next one to go idle starts it
// again): a cache whose files are all closed or in use has no goroutine.
func (c *FileCache) sweep() {
	timer := time.NewTimer(c.idleTimeout)
	defer timer.Stop()
	for range timer.C {
		c.mu.Lock()
		now := c.clock.Now().Sub(c.epoch)
		for c.idles > 0 {
			s := c.idle.idleNext
			if left := s.idleSince + c.idleTimeout - now; left > 0 {
				timer.Reset(left)
				break
			}
			c.closeIdleLocked(s)
		}
		if c.idles == 0 {
			c.sweeping = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// closeIdleLocked closes the file of s, an idle segment on the ring.
func (c *FileCache) closeIdleLocked(s *segment) {
	c.removeIdleLocked(s)
	s.file.Close()
	s.file = nil
	c.open--
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

// IdleTimeout is how long an idle segment file stays open unused (0: until
// the limit needs its room).
func (c *FileCache) IdleTimeout() time.Duration { return c.idleTimeout }

// evictLocked closes idle files, least recently used first, while more
// than the limit are open.
func (c *FileCache) evictLocked() {
	for c.open > c.limit && c.idles > 0 {
		c.closeIdleLocked(c.idle.idleNext)
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
