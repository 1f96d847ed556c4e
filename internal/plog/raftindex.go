package plog

import (
	"bytes"
	"encoding/binary"
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

// raftSegment is one segment's part of the raft log: its entries from
// index first on.
type raftSegment struct {
	seg     *segment
	first   uint64
	entries []raftEntry
}

func (r *raftSegment) add(offsetDelta, pos int64) {
	r.entries = append(r.entries, raftEntry{offsetDelta: uint32(offsetDelta), pos: uint32(pos)})
}

func encodeRaftIndex(r *raftSegment) []byte {
	b := make([]byte, 0, 18+12*len(r.entries))
	b = binary.BigEndian.AppendUint16(b, raftIndexVersion)
	b = binary.BigEndian.AppendUint64(b, r.first)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.entries)))
	for i, e := range r.entries {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint32(b, e.offsetDelta)
		b = binary.BigEndian.AppendUint32(b, e.pos)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

// writeSidecar replaces r's sidecar with its array.
func (rs *RaftStorage) writeSidecar(r *raftSegment) error {
	name := raftIndexName(r.seg.base)
	if err := rs.l.replaceFile(name, encodeRaftIndex(r)); err != nil {
		return &IOError{Op: "write " + name, Err: err}
	}
	return nil
}

// syncSidecars makes the sidecars agree with the arrays the scan rebuilt:
// each sealed segment's rewritten when missing or different, the active
// segment's and those of segments that are gone removed.
func (rs *RaftStorage) syncSidecars() error {
	l := rs.l
	fs := l.cfg.FS
	names, err := fs.List(l.dir)
	if err != nil {
		return &IOError{Op: "list " + l.dir, Err: err}
	}
	keep := map[string]bool{}
	for i := range rs.segs[:max(len(rs.segs)-1, 0)] {
		r := &rs.segs[i]
		name := raftIndexName(r.seg.base)
		keep[name] = true
		want := encodeRaftIndex(r)
		if got, err := readRaftFile(&l.cfg, name); err == nil && bytes.Equal(got, want) {
			continue
		}
		l.logger().Info("rewriting the raft index from the segment", "file", name, "entries", len(r.entries))
		if err := rs.writeSidecar(r); err != nil {
			return err
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
