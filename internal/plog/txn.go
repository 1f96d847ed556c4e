package plog

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"path"
	"sync"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// Transactions in the partition (KIP-98). The writer tracks, per producer,
// the first offset of its transaction in progress (producers.go); each
// batch that begins or ends a transaction carries a txnEvent to the
// publisher, which applies it when the batch is published, that is once it
// is durable: the last stable offset (LSO) therefore only moves past a
// transaction once its marker is fsynced, and a reader never sees a
// transaction end that a crash could take away. Recovery applies the same
// events while it scans, so after a restart a transaction with no marker
// yet is in progress again (the LSO stays below it until the coordinator's
// timeout aborts it) and the aborted-transactions index is whole again.

// txnEventKind says what a published batch does to its producer's
// transaction.
type txnEventKind uint8

const (
	txnNone   txnEventKind = iota
	txnBegin               // the producer's first transactional batch
	txnCommit              // a commit marker
	txnAbort               // an abort marker
)

// txnEvent is the transaction change a batch makes, applied at publication.
type txnEvent struct {
	kind       txnEventKind
	producerID int64
	first      int64 // txnCommit, txnAbort: the first offset of the transaction ended
}

// txnStart is where a published transaction in progress begins.
type txnStart struct {
	offset int64    // its first batch's base offset
	seg    *segment // the segment holding that batch
	pos    int64    // the batch's position in seg
}

// noTxn is the txnStart of no transaction: past every offset.
var noTxn = txnStart{offset: math.MaxInt64}

// AbortedTxn is one entry of the aborted-transactions index (Kafka's
// .txnindex): producer ProducerID's transaction from FirstOffset to its
// abort marker at LastOffset. LastStableOffset is the partition's LSO once
// it ended: every transaction aborted later begins at or after it, so a
// search for the transactions overlapping offsets below it stops there.
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64
	LastStableOffset int64
}

// noteTxnLocked applies the transaction change of the batch published at
// pos of seg (base offset base, last offset last). mu held (or recovery,
// before any goroutine).
func (l *Log) noteTxnLocked(ev txnEvent, seg *segment, base, last, pos int64) {
	switch ev.kind {
	case txnNone:
		return
	case txnBegin:
		if l.txns == nil {
			l.txns = make(map[int64]txnStart)
		}
		st := txnStart{offset: base, seg: seg, pos: pos}
		l.txns[ev.producerID] = st
		if st.offset < l.firstTxn.offset {
			l.firstTxn = st
		}
		return
	}
	if _, ok := l.txns[ev.producerID]; ok {
		delete(l.txns, ev.producerID)
		l.firstTxn = noTxn
		for _, st := range l.txns {
			if st.offset < l.firstTxn.offset {
				l.firstTxn = st
			}
		}
	}
	if ev.kind == txnAbort {
		seg.aborted = append(seg.aborted, AbortedTxn{
			ProducerID: ev.producerID, FirstOffset: ev.first, LastOffset: last,
			// The marker is the last published batch at this point.
			LastStableOffset: min(l.firstTxn.offset, last+1),
		})
		l.abortedEntries++
	}
}

// lastStableLocked is the LSO (mu held): the first offset of the earliest
// transaction in progress, or the high watermark, never below the log
// start (retention may have removed where a hanging transaction began, as
// Kafka's firstUnstableOffset is raised to the log start offset).
func (l *Log) lastStableLocked() int64 {
	return max(min(l.firstTxn.offset, l.hwm), l.logStart)
}

// LastStableOffset is the partition's last stable offset: below it every
// transaction is decided (its marker is durable), so a read_committed
// consumer reads up to it. It is at most the high watermark.
func (l *Log) LastStableOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastStableLocked()
}

// abortedBufs recycles the Aborted slices of ReadCommitted results (put
// back by ReadResult.Release): a read_committed fetch allocates nothing for
// them in steady state.
var abortedBufs = sync.Pool{New: func() any { return new([]AbortedTxn) }}

// maxPooledAborted bounds the slices kept in abortedBufs.
const maxPooledAborted = 1024

// abortedOverlappingLocked appends to dst the aborted transactions that
// overlap [from, upper) (Kafka's collectAbortedTransactions: lastOffset >=
// from and firstOffset < upper). An abort marker is in the segment of its
// transaction's first batch or a later one, so the search starts at the
// segment holding from, past its entries ending before from (a segment's
// entries are in marker order, so by LastOffset); it stops at the first
// entry whose LastStableOffset reaches upper (every later one begins at or
// after it).
func (l *Log) abortedOverlappingLocked(dst []AbortedTxn, from, upper int64) []AbortedTxn {
	// Binary searches by hand: sort.Search's closure calls are most of
	// the cost of a read_committed read (callgrind).
	first, hi := 0, len(l.segments)
	for first < hi {
		if m := int(uint(first+hi) >> 1); l.segments[m].nextOffset > from {
			hi = m
		} else {
			first = m + 1
		}
	}
	for i := first; i < len(l.segments); i++ {
		entries := l.segments[i].aborted
		if i == first {
			lo, hi := 0, len(entries)
			for lo < hi {
				if m := int(uint(lo+hi) >> 1); entries[m].LastOffset >= from {
					hi = m
				} else {
					lo = m + 1
				}
			}
			entries = entries[lo:]
		}
		for _, a := range entries {
			if a.FirstOffset < upper { // and a.LastOffset >= from, as every entry here
				dst = append(dst, a)
			}
			if a.LastStableOffset >= upper {
				return dst
			}
		}
	}
	return dst
}

// WriteTxnMarker appends the commit or abort marker m (a control batch)
// for its producer's transaction and returns once it is durable (fsynced,
// as AckForced) and published, with its offset: the transaction has then
// ended in this partition, the LSO has moved past it, and an abort is in
// the aborted-transactions index. As in Kafka, a marker for a producer
// with no transaction in progress here is written all the same (an abort
// of it is indexed from the marker to itself). A marker whose producer
// epoch is older than the producer's is ErrInvalidProducerEpoch; one whose
// coordinator epoch is older than the last marker's, ErrCoordinatorFenced.
// A newer epoch fences the older one: the producer's batches of that older
// epoch are refused from then on. ctx is looked at only before the marker
// is queued: once queued it is written.
func (l *Log) WriteTxnMarker(ctx context.Context, m TxnMarker) (offset int64, err error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	if m.ProducerID < 0 {
		return -1, ErrUnknownProducerID
	}
	records := batch.BuildControl(m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch, l.config().Clock.Now().UnixMilli())
	var p Pending
	if l.raft != nil {
		p, err = l.raft.propose(records, AckForced, &m)
	} else {
		req := getReq()
		req.records = records
		req.ack, req.kind, req.marker = AckForced, reqMarker, m
		p, err = l.enqueueReq(req)
	}
	if err != nil {
		return -1, err
	}
	res, err := p.Wait()
	if err != nil {
		return -1, err
	}
	return res.BaseOffset, nil
}

// Producers lists the partition's active producers (DescribeProducers):
// the writer's producer table, as of the appends queued before the call.
func (l *Log) Producers() ([]ProducerInfo, error) {
	if l.raft != nil {
		return l.raft.producers(), nil
	}
	req := getReq()
	req.ack, req.kind = AckWritten, reqDescribe
	if _, err := l.enqueueReq(req); err != nil {
		return nil, err
	}
	<-req.done
	producers, err := req.producers, req.err
	putReq(req)
	return producers, err
}

// The aborted-transactions index file (Kafka's .txnindex), one per segment
// that holds an abort marker, named like the segment with the suffix
// txnIndexSuffix: a sequence of txnIndexEntrySize-byte entries, big-endian,
//
//	version int16 (0) | producerId int64 | firstOffset int64 |
//	lastOffset int64 | lastStableOffset int64
//
// in the order of their markers, as Kafka's AbortedTxn. The segment is the
// source of truth: recovery rebuilds the index from the markers it scans
// and rewrites a file that differs (torn, missing, stale), so the file
// never decides anything on its own (design D3). The publisher appends an
// abort's entry and fsyncs the file after the segment's fsync and before
// the marker's AckForced acknowledgement: once WriteTxnMarker returns, the
// entry is as durable as the marker. Retention deletes it with its segment.
const (
	txnIndexSuffix    = ".txnindex"
	txnIndexEntrySize = 34
	txnIndexVersion   = 0
)

// txnIndexName is the index file name of the segment starting at base.
func txnIndexName(base int64) string {
	return segmentName(base)[:20] + txnIndexSuffix
}

// appendTxnIndexEntries appends the encoded entries to dst.
func appendTxnIndexEntries(dst []byte, entries []AbortedTxn) []byte {
	for _, a := range entries {
		dst = binary.BigEndian.AppendUint16(dst, txnIndexVersion)
		dst = binary.BigEndian.AppendUint64(dst, uint64(a.ProducerID))
		dst = binary.BigEndian.AppendUint64(dst, uint64(a.FirstOffset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(a.LastOffset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(a.LastStableOffset))
	}
	return dst
}

// appendTxnIndex appends entries, the abort entries just published in s, to
// s's index file (created if absent, its directory entry made durable) and
// fsyncs it.
func (l *Log) appendTxnIndex(s *segment, entries []AbortedTxn) error {
	fs := l.cfg.FS
	name := path.Join(l.dir, txnIndexName(s.base))
	f, err := fs.OpenReadWrite(name)
	created := false
	if err != nil {
		if f, err = fs.Create(name); err != nil {
			return writeError("create "+name, err)
		}
		created = true
	}
	_, err = f.Write(appendTxnIndexEntries(make([]byte, 0, len(entries)*txnIndexEntrySize), entries))
	if err != nil {
		f.Close()
		return writeError("write "+name, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && created {
		err = fs.SyncDir(l.dir)
	}
	if err != nil {
		return &IOError{Op: "sync " + name, Err: err}
	}
	return nil
}

// syncTxnIndex makes s's index file agree with s.aborted, rebuilt by the
// recovery scan: rewritten atomically (temp file, fsync, rename, directory
// fsync) when it differs, removed when s has no abort. exists says whether
// the directory lists the file.
func (l *Log) syncTxnIndex(s *segment, exists bool) error {
	fs := l.cfg.FS
	name := path.Join(l.dir, txnIndexName(s.base))
	if len(s.aborted) == 0 {
		if !exists {
			return nil
		}
		if err := fs.Remove(name); err != nil {
			return &IOError{Op: "remove " + name, Err: err}
		}
		return nil
	}
	want := appendTxnIndexEntries(make([]byte, 0, len(s.aborted)*txnIndexEntrySize), s.aborted)
	if exists {
		if f, err := fs.Open(name); err == nil {
			got := make([]byte, len(want)+1)
			n, _ := f.ReadAt(got, 0)
			f.Close()
			if bytes.Equal(got[:n], want) {
				return nil
			}
		}
	}
	l.logger().Info("rewriting the aborted-transactions index from the segment", "file", name, "entries", len(s.aborted))
	if err := l.replaceFile(txnIndexName(s.base), want); err != nil {
		return &IOError{Op: "rewrite " + name, Err: err}
	}
	return nil
}
