package plog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path"
	"sort"
	"strings"
)

// The raft index of a segment (docs/replication.md section 1): a dense
// array, entry index − the segment's first index → (offset delta from the
// segment's base offset, file position), 8 bytes per batch in memory. A
// sealed segment's array is also in a sidecar BASE.raftindex
// (docs/format.md), written (temp file, fsync, rename) when the segment is
// sealed or cut, and checked at start-up against the array the recovery
// scan rebuilds from the batches (every batch is read and checksummed
// anyway, design D3): rewritten when missing or different, like .txnindex.
// Its layout, big-endian:
//
//	version u16 (0) | firstIndex u64 | count u32 |
//	count × (indexDelta u32 | offsetDelta u32 | position u32) | crc32c u32
//
// indexDelta is the entry's index − firstIndex (0, 1, 2, …: the array is
// dense; stored so that the file reads on its own).
const (
	raftIndexSuffix  = ".raftindex"
	raftIndexVersion = 0
)

// raftIndexName is the sidecar of the segment starting at base.
func raftIndexName(base int64) string { return segmentName(base)[:20] + raftIndexSuffix }

// raftEntry locates one entry's batch in its segment.
type raftEntry struct {
	offsetDelta uint32 // base offset − the segment's base offset
	pos         uint32 // file position
}

// raftIndexHeader is the sidecar's bytes before its first entry.
const raftIndexHeader = 14

// raftSegment is one segment's part of the raft log: count entries from
// index first on. The array is in memory (entries) while the segment is
// active, and while the scan builds it; once the segment is sealed it is
// in the sidecar only (onDisk), read back a range at a time: a log holds
// in memory 8 bytes per batch of its active segment, not of its whole
// length.
type raftSegment struct {
	seg     *segment
	first   uint64
	count   uint64
	entries []raftEntry
	onDisk  bool
	// startState is the producer table before the segment's first entry
	// (encodeProducerTable), nil until that entry is applied: what a
	// snapshot at the entry before it holds (raftsnapshot.go).
	startState []byte
}

// end is the index after r's last entry.
func (r *raftSegment) end() uint64 { return r.first + r.count }

func (r *raftSegment) add(offsetDelta, pos int64) {
	r.entries = append(r.entries, raftEntry{offsetDelta: uint32(offsetDelta), pos: uint32(pos)})
	r.count++
}

func encodeRaftIndex(first uint64, entries []raftEntry) []byte {
	b := make([]byte, 0, raftIndexHeader+4+12*len(entries))
	b = binary.BigEndian.AppendUint16(b, raftIndexVersion)
	b = binary.BigEndian.AppendUint64(b, first)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for i, e := range entries {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint32(b, e.offsetDelta)
		b = binary.BigEndian.AppendUint32(b, e.pos)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

// sealIndex moves r's array (in memory) to its sidecar and drops it from
// memory. With check (at start-up, the array just rebuilt by the scan) a
// sidecar that already holds exactly it is kept; otherwise it is written
// (temp file, fsync, rename).
func (rs *RaftStorage) sealIndex(r *raftSegment, check bool) error {
	l := rs.l
	name := raftIndexName(r.seg.base)
	want := encodeRaftIndex(r.first, r.entries)
	if check {
		if got, err := readRaftFile(&l.cfg, name); err == nil && bytes.Equal(got, want) {
			r.entries, r.onDisk = nil, true
			return nil
		}
		l.logger().Info("rewriting the raft index from the segment", "file", name, "entries", r.count)
	}
	if err := l.replaceFile(name, want); err != nil {
		return &IOError{Op: "write " + name, Err: err}
	}
	r.entries, r.onDisk = nil, true
	return nil
}

// span returns r's entries [from, to) (counted from r.first): from memory
// (aliased), or read from the sidecar of a sealed segment.
func (rs *RaftStorage) span(r *raftSegment, from, to uint64) ([]raftEntry, error) {
	if !r.onDisk {
		return r.entries[from:to], nil
	}
	l := rs.l
	name := path.Join(l.dir, raftIndexName(r.seg.base))
	f, err := l.cfg.FS.Open(name)
	if err != nil {
		return nil, &IOError{Op: "open " + name, Err: err}
	}
	defer f.Close()
	buf := make([]byte, 12*(to-from))
	if err := readFull(f, name, buf, int64(raftIndexHeader+12*from)); err != nil {
		return nil, err
	}
	out := make([]raftEntry, to-from)
	for i := range out {
		b := buf[12*i:]
		if got := binary.BigEndian.Uint32(b); uint64(got) != from+uint64(i) {
			return nil, &CorruptionError{File: name, Pos: int64(raftIndexHeader + 12*(from+uint64(i))),
				Reason: fmt.Sprintf("index delta %d, want %d", got, from+uint64(i))}
		}
		out[i] = raftEntry{offsetDelta: binary.BigEndian.Uint32(b[4:]), pos: binary.BigEndian.Uint32(b[8:])}
	}
	return out, nil
}

// removeStaleSidecars removes the sidecars of segments that are gone, and
// the active segment's (its array is in memory).
func (rs *RaftStorage) removeStaleSidecars() error {
	l := rs.l
	fs := l.cfg.FS
	names, err := fs.List(l.dir)
	if err != nil {
		return &IOError{Op: "list " + l.dir, Err: err}
	}
	keep := map[string]bool{}
	for i := range rs.segs {
		if rs.segs[i].onDisk {
			keep[raftIndexName(rs.segs[i].seg.base)] = true
		}
	}
	for _, name := range names {
		if strings.HasSuffix(name, raftIndexSuffix) && !keep[name] {
			if err := fs.Remove(path.Join(l.dir, name)); err != nil {
				return &IOError{Op: "remove " + name, Err: err}
			}
		}
	}
	return nil
}

// termRun is a run of entries of one term, from index first to the next
// run's first (or the last index).
type termRun struct{ first, term uint64 }

// noteTerm records that entry i (the new last) has term.
func (rs *RaftStorage) noteTerm(i, term uint64) {
	if n := len(rs.terms); n == 0 || rs.terms[n-1].term != term {
		rs.terms = append(rs.terms, termRun{first: i, term: term})
	}
}

// termLocked is the term of entry i, in the log.
func (rs *RaftStorage) termLocked(i uint64) uint64 {
	k := sort.Search(len(rs.terms), func(k int) bool { return rs.terms[k].first > i })
	return rs.terms[k-1].term
}

// truncateTerms forgets the terms of entries from index first on.
func (rs *RaftStorage) truncateTerms(first uint64) {
	k := sort.Search(len(rs.terms), func(k int) bool { return rs.terms[k].first >= first })
	rs.terms = rs.terms[:k]
}
