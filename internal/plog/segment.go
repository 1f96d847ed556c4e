package plog

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sushka-io/sushka/internal/vfs"
)

const segmentSuffix = ".log"

// segmentName is the file name of the segment whose first offset is base:
// the base offset in 20 decimal digits, as Kafka names its segments.
func segmentName(base int64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (int64, bool) {
	if !strings.HasSuffix(name, segmentSuffix) || len(name) != 20+len(segmentSuffix) {
		return 0, false
	}
	base, err := strconv.ParseInt(strings.TrimSuffix(name, segmentSuffix), 10, 64)
	return base, err == nil && base >= 0
}

// indexEntry maps the base offset of a batch to its byte position. Entries
// are sparse (one per IndexInterval bytes) and always at batch boundaries.
type indexEntry struct {
	offset int64
	pos    int64
}

// timeEntry records, at a batch boundary, the largest timestamp seen so far
// in the segment (non-decreasing), for ListOffsets by timestamp: the first
// batch with a timestamp >= T lies at or after the position of the first
// entry whose maxTs >= T.
type timeEntry struct {
	maxTs  int64 // largest batch max timestamp in the segment up to and including this batch
	offset int64 // base offset of the batch
	pos    int64
}

// segment is one file of the partition log. Bytes below size are immutable
// and published; readers may read them without the writer's cooperation.
//
// Fields marked (mu) are guarded by Log.mu; fields marked (writer) are
// touched only by the writer goroutine (or by Open before it starts);
// fields marked (cache) by cache.mu.
type segment struct {
	base  int64  // first offset, from the file name
	path  string // full path
	fs    fileFS
	cache *FileCache

	// file is the open file, nil when closed: opened when pinned, closed by
	// the cache when idle (see FileCache). It is written only under
	// cache.mu while pins == 0 or it is nil, so whoever holds a pin may use
	// it without the lock.
	file      vfs.File
	pins      int      // (cache) readers using file, plus one while writerPin
	writerPin bool     // (cache) the writer of the active segment holds a pin
	sealed    bool     // (cache) no longer active: reopened read-only
	dropped   bool     // (cache) off the log's list: close file once unpinned
	idlePrev  *segment // (cache) neighbours on cache.idle, nil when not on it
	idleNext  *segment // (cache)
	// idleSince is when the file went idle (on the ring), counted from
	// cache.epoch: the sweep closes it idleTimeout later. (cache)
	idleSince time.Duration

	size       int64        // (mu) bytes of whole, published batches
	nextOffset int64        // (mu) offset after the last published batch
	index      []indexEntry // (mu) sparse offset index
	timeIndex  []timeEntry  // (mu) sparse, non-decreasing time index
	maxTs      int64        // (mu) largest batch max timestamp, -1 when empty
	maxTsOff   int64        // (mu) base offset of the batch holding maxTs
	created    time.Time    // (mu) when the segment was created or recovered
	// aborted is the segment's aborted-transactions index (txn.go): one
	// entry per abort marker in the segment, in offset order; appended
	// under mu, never changed.
	aborted []AbortedTxn // (mu)

	lastIndexPos int64 // (writer) position of the last index entry
	lastTimePos  int64 // (writer) position of the last time entry

	mapped   []byte // (writer) the mapping, WriteMmap active segment only
	capacity int64  // (writer) preallocated file size for WriteMmap
}

// newSegment returns the active segment of base whose file was just
// opened (or created): its writer holds a pin on it.
func newSegment(dir string, base int64, file vfs.File, now time.Time, fs fileFS, cache *FileCache) *segment {
	s := &segment{
		base:         base,
		path:         path.Join(dir, segmentName(base)),
		fs:           fs,
		cache:        cache,
		file:         file,
		nextOffset:   base,
		maxTs:        -1,
		maxTsOff:     -1,
		created:      now,
		lastIndexPos: -1,
		lastTimePos:  -1,
	}
	cache.mu.Lock()
	s.pins, s.writerPin = 1, true
	cache.addLocked()
	cache.mu.Unlock()
	return s
}

// noteBatch records a published batch at pos in the indexes (mu held).
func (s *segment) noteBatchLocked(base, last, maxTs, pos int64, size int64, interval int64) {
	if s.lastIndexPos < 0 || pos-s.lastIndexPos >= interval {
		s.index = append(s.index, indexEntry{offset: base, pos: pos})
		s.lastIndexPos = pos
	}
	if maxTs > s.maxTs {
		s.maxTs = maxTs
		s.maxTsOff = base
		if s.lastTimePos < 0 || pos-s.lastTimePos >= interval {
			s.timeIndex = append(s.timeIndex, timeEntry{maxTs: maxTs, offset: base, pos: pos})
			s.lastTimePos = pos
		} else {
			// Keep the time index exact for lookups: the last entry covers
			// this batch too, so raise its maximum.
			s.timeIndex[len(s.timeIndex)-1].maxTs = maxTs
		}
	}
	s.size = pos + size
	s.nextOffset = last + 1
}

// floorIndex returns the position of the last index entry whose offset is
// <= offset (0 when none).
func (s *segment) floorIndexLocked(offset int64) (pos int64) {
	return s.floorIndexEntryLocked(offset).pos
}

// floorIndexEntryLocked returns the last index entry whose batch begins at
// or before offset (position 0 and offset -1 when none).
func (s *segment) floorIndexEntryLocked(offset int64) indexEntry {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].offset > offset })
	if i == 0 {
		return indexEntry{offset: -1, pos: 0}
	}
	return s.index[i-1]
}

// floorIndexPos returns the position of the last index entry at or before
// byte position limit (0 when none).
func (s *segment) floorIndexPosLocked(limit int64) int64 {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].pos > limit })
	if i == 0 {
		return 0
	}
	return s.index[i-1].pos
}
