package api

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// Fetch: v4-18
//
// Behavior:
// * The response is encoded here, not by kmsg (design D1, D5): record bytes
//   are never copied into a response struct; each partition's records are
//   file ranges of segment files, written to the socket with sendfile by the
//   server. The encoding is checked against kmsg.FetchResponse.ReadFrom for
//   every version in fetch_test.go.
// * MaxBytes / per-partition MaxBytes as in KIP-74: the first batch of the
//   first non-empty partition is returned even when larger than both.
// * Long poll (design D6): with fewer than MinBytes available the request
//   waits up to MaxWaitMillis, capped at Config.MaxFetchWait, on one
//   plog.Waker registered with every partition it reads, so an append to any
//   of them wakes it at once, an idle caught-up consumer costs nothing, and
//   a wait costs the same for one partition or a hundred thousand. It ends
//   at once when the request's context does (the client disconnected, the
//   server shuts down). Any partition error answers at once.
// * A partition named more than once is read and answered once, with the
//   last entry's offset and max bytes at the first entry's place, as Kafka
//   does (its FetchRequest keys partitions in a LinkedHashMap): a request
//   repeating one partition a million times costs one read, one wait
//   registration and one answer.
// * A partition that does not exist (unknown topic, or past the topic's
//   count) is answered UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by ID)
//   after the topic's partitions that do, from a 4-byte note instead of a
//   fetchPart: millions of them cost about their answer's bytes.
// * Fetch sessions (KIP-227, v7+): a full fetch at epoch 0 creates one
//   (fetchsession.go has the rules, Kafka's), epoch -1 is sessionless (what
//   kafka-go's Client.Fetch sends), either closes the session it names; an
//   incremental fetch (fetchsession.go) reads the session's partitions that
//   may have changed and answers those that did, with file ranges as a full
//   one's and a long poll on the session's changes.
// * IsolationLevel 1 (read_committed, KIP-98): each partition is read up to
//   its last stable offset only (plog.ReadCommitted), and answered with the
//   aborted transactions overlapping what is returned, which the consumer
//   drops; a long poll waits for the LSO to move (the publication that
//   makes a marker durable signals it, as any high watermark advance).
//   Both levels are told the LSO in LastStableOffset, as Kafka does;
//   read_uncommitted gets AbortedTransactions null. The records stay file
//   ranges (sendfile) either way.
//
// Version notes:
// * v4: LastStableOffset, AbortedTransactions, IsolationLevel; record batches
// * v5: LogStartOffset
// * v7: sessions (SessionID, SessionEpoch, ForgottenTopics), top-level ErrorCode
// * v9: CurrentLeaderEpoch; v11: Rack, PreferredReadReplica
// * v12: flexible versions; v13: TopicID instead of the topic name
// * v15-18: broker-only fields (ReplicaState, ReplicaDirectoryID, HighWatermark tags)

func init() { regKey(1, 4, 18, (*Handler).handleFetch) }

// fetchPart is one requested partition that exists (log is set) and, once
// read, its answer.
type fetchPart struct {
	topic      string
	topicID    [16]byte
	partition  int32
	offset     int64
	maxBytes   int64
	log        *plog.Log
	errorCode  int16
	committed  bool // IsolationLevel 1: read up to the LSO, with aborted transactions
	hwm        int64
	logStart   int64
	lso        int64
	result     plog.ReadResult
	haveResult bool
	// copied holds the partition's record bytes read into memory instead
	// of result's file ranges, once the response pins as many segment
	// files as the file cache keeps (readFetch); nil otherwise.
	copied []byte

	// A fetch session's partition only (fetchsession.go): what its client
	// was last answered, whether its last read returned records, and that
	// it left the session.
	sent       sentOffsets
	hadRecords bool
	forgotten  bool
	// Its change tracking (fetchsession.go, owned by the session's
	// token holder): the registration with its log (nil until a fetch
	// resolved it), whether the next fetch reads it (on the session's
	// candidates), and its place in the session's order.
	watch   *partWatch
	pending bool
	order   int64
}

// sentOffsets are the offsets a session's client was last told of a
// partition (hwm -1 after an error, or before any answer).
type sentOffsets struct {
	hwm, logStart, lso int64
}

// fetchTopic groups a topic's partitions in request order.
type fetchTopic struct {
	name  string
	id    [16]byte
	parts []*fetchPart
	// missing, if any, are the partitions that do not exist (behind a
	// pointer: fetchTopic stays 64 bytes on the usual path).
	missing *missingPartitions
}

// missingPartitions are partitions of a topic that do not exist (the topic
// is unknown, or the partition is past its count), answered code after the
// topic's other partitions with nothing read: 4 bytes each, so a request
// naming millions of partitions that do not exist costs little more than
// its answer.
type missingPartitions struct {
	partitions []int32
	code       int16
}

func (t *fetchTopic) missingCount() int {
	if t.missing == nil {
		return 0
	}
	return len(t.missing.partitions)
}

// handleFetch serves a Fetch: incremental on its session (epoch > 0, or
// any epoch but -1 and 0), else full, closing the session it names and,
// at epoch 0, creating one.
func (h *Handler) handleFetch(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest) server.Response {
	if req.Version >= 7 && req.SessionEpoch != fetchFinalEpoch && req.SessionEpoch != fetchInitialEpoch {
		return h.incrementalFetch(ctx, creq, req)
	}
	if req.Version >= 7 && req.SessionID != 0 {
		h.fetchSessions.remove(req.SessionID) // a full fetch closes the session it names
	}
	return h.fullFetch(ctx, creq, req, req.Version >= 7 && req.SessionEpoch == fetchInitialEpoch)
}

// fullFetch answers every partition the request names and, if
// newSession, makes them a fetch session when the cache has room.
func (h *Handler) fullFetch(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest, newSession bool) server.Response {
	fs := fetchPool.Get().(*fetchState)
	missing, distinctPartitions := h.fetchParts(fs, creq, req)
	if refused, ok := h.tooManyPartitions(creq, distinctPartitions); ok {
		fs.recycle() // nothing read yet
		return refused
	}
	h.waitFetch(ctx, creq, req, fs.parts, missing)
	var sessionID int32
	if newSession {
		sessionID = h.newFetchSession(req, fs.topics, distinctPartitions)
	}
	frame := fs.encode(req.Version, sessionID, fs.topics)
	if throttled, ok := h.fetchThrottle(creq, req.Version, frame); ok { // throttle.go
		fs.recycle()
		if sessionID != 0 {
			h.fetchSessions.remove(sessionID) // never told to the client
		}
		return throttled
	}
	h.countFetched(fs.parts)
	return server.Response{Frame: frame} // its Release recycles fs
}

// fetchState is what one Fetch needs besides its request: the partitions
// read and their topics (a full fetch's, or the changed partitions an
// incremental fetch answers), the answer's bytes and pieces, and the
// frame the server writes. It comes from fetchPool; the frame's Release
// (the server calls it once the answer is written or dropped) releases the
// partitions' reads and puts it back, so a Fetch allocates nothing of its
// own in the usual case (TestFetchAllocations). Nothing may touch the
// frame, the topics or the parts after that Release.
type fetchState struct {
	topics     []fetchTopic
	parts      []*fetchPart
	topicParts []*fetchPart // carved into the topics' parts
	chunk      []fetchPart  // the partitions of parts, while they fit
	buf        []byte       // the answer's bytes, cut into pieces
	pieces     []server.Piece
	frame      server.Frame // Release is fs.recycle, bound once
}

var fetchPool sync.Pool

func init() { // not in fetchPool's declaration: recycle refers to fetchPool
	fetchPool.New = func() any {
		fs := new(fetchState)
		fs.frame.Release = fs.recycle // a method value allocates: made once per state
		return fs
	}
}

// maxPooledFetch bounds what a pooled state keeps (partitions of one
// request, bytes of its answer's headers): a rare huge request does not
// pin its slices in the pool.
const (
	maxPooledFetch      = 1024
	maxPooledFetchBytes = 256 << 10
)

// topicPartsFor returns an empty slice with room for n partitions of one
// topic, carved from the state's (appending past n would reallocate, not
// overwrite the next topic's).
func (fs *fetchState) topicPartsFor(n int) []*fetchPart {
	used := len(fs.topicParts)
	if used+n > cap(fs.topicParts) {
		return make([]*fetchPart, 0, n)
	}
	fs.topicParts = fs.topicParts[:used+n]
	return fs.topicParts[used : used : used+n]
}

// recycle releases the partitions' reads and puts the state back in the
// pool (the frame's Release).
func (fs *fetchState) recycle() {
	releaseFetch(fs.parts)
	if cap(fs.chunk) > maxPooledFetch || cap(fs.parts) > maxPooledFetch || cap(fs.topics) > maxPooledFetch ||
		cap(fs.topicParts) > maxPooledFetch || cap(fs.pieces) > 2*maxPooledFetch+1 || cap(fs.buf) > maxPooledFetchBytes {
		return
	}
	clear(fs.chunk)
	clear(fs.parts)
	clear(fs.topics)
	clear(fs.topicParts)
	clear(fs.pieces)
	fs.chunk, fs.parts, fs.topics, fs.topicParts = fs.chunk[:0], fs.parts[:0], fs.topics[:0], fs.topicParts[:0]
	fs.buf, fs.pieces, fs.frame.Pieces = fs.buf[:0], fs.pieces[:0], nil
	fetchPool.Put(fs)
}

// waitFetch reads parts and, with fewer than MinBytes and no error, long
// polls them; the last read stays in parts.
func (h *Handler) waitFetch(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest, parts []*fetchPart, anyError bool) {
	maxBytes := h.fetchMaxBytes(creq, int64(req.MaxBytes)) // throttle.go
	total, readError := h.readFetch(parts, maxBytes)
	anyError = anyError || readError
	maxWait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, h.cfg.MaxFetchWait)
	// Kafka answers at once a fetch that asks for no partition.
	if total < int64(req.MinBytes) && !anyError && maxWait > 0 && len(parts) > 0 {
		waited := creq.Accounting.WaitStart()
		h.longPollFetch(ctx, parts, int64(req.MinBytes), maxBytes, maxWait)
		creq.Accounting.WaitEnd(waited)
	}
}

func (h *Handler) countFetched(parts []*fetchPart) {
	m := h.cfg.Metrics
	if m == nil {
		return
	}
	for _, fp := range parts {
		if n := fp.recordBytes(); n > 0 {
			m.FetchedBytes(fp.topic, n)
		}
	}
}

// newFetchSession makes the partitions of a full fetch's answer a fetch
// session (as answered: a partition in error is answered again once it
// has none), and returns its id; 0 when the cache has no room.
func (h *Handler) newFetchSession(req *kmsg.FetchRequest, topics []fetchTopic, partitions int) int32 {
	byID := req.Version >= 13
	s := h.fetchSessions.create(req.ReplicaID >= 0 || req.Version >= 15 && req.ReplicaState.ID >= 0, byID, partitions)
	if s == nil {
		return 0
	}
	defer s.release() // create returns it held: no fetch finds it half filled
	s.byKey = make(map[sessionKey]*fetchPart, partitions)
	s.parts = make([]*fetchPart, 0, partitions)
	chunk := make([]fetchPart, 0, partitions)
	s.candidates = make([]*fetchPart, 0, partitions)
	put := func(key sessionKey, fp fetchPart) {
		chunk = append(chunk, fp)
		s.put(key, &chunk[len(chunk)-1])
	}
	for _, t := range topics {
		tk := s.topicKey(t.name, t.id)
		for _, fp := range t.parts {
			sp := newSessionPart(t.name, t.id, fp.partition, fp.offset, int32(fp.maxBytes))
			sp.hwm, sp.logStart, sp.lso, sp.errorCode = fp.hwm, fp.logStart, fp.lso, fp.errorCode
			sp.markAnswered()
			put(sessionKey{tk, fp.partition}, sp)
		}
		if m := t.missing; m != nil {
			for _, p := range m.partitions {
				put(sessionKey{tk, p}, newSessionPart(t.name, t.id, p, 0, 0))
			}
		}
	}
	return s.id
}

// fetchParts resolves the requested partitions into fs.topics and
// fs.parts, in request order, each once: a later entry for a partition
// already seen replaces its offset and max bytes (Kafka's behaviour) and
// adds nothing. Partitions that do not exist go to their topic's missing
// list (missing reports any). A topic entry left with no partitions is
// dropped.
func (h *Handler) fetchParts(fs *fetchState, creq *server.Request, req *kmsg.FetchRequest) (missing bool, distinct int) {
	byID := req.Version >= 13 // topics are named by ID, not by name
	// A replica's fetch needs CLUSTER_ACTION, a consumer's READ on each
	// topic; a partition denied is answered TOPIC_AUTHORIZATION_FAILED.
	replica := req.ReplicaID >= 0 || req.ReplicaState.ID >= 0
	replicaDenied := replica && !h.allowedCluster(creq, acl.ClusterAction)
	n := 0
	for _, rt := range req.Topics {
		n += len(rt.Partitions)
	}
	seen := requestPartitions{partitionsHint: n}
	if cap(fs.topics) < len(req.Topics) {
		fs.topics = make([]fetchTopic, 0, len(req.Topics))
	}
	if cap(fs.parts) < min(n, maxPooledFetch) {
		fs.parts = make([]*fetchPart, 0, min(n, maxPooledFetch))
	}
	if cap(fs.topicParts) < min(n, maxPooledFetch) {
		fs.topicParts = make([]*fetchPart, 0, min(n, maxPooledFetch))
	}
	if cap(fs.chunk) < min(n, maxPooledFetch) {
		fs.chunk = make([]fetchPart, 0, min(n, maxPooledFetch))
	}
	topics, parts := fs.topics, fs.parts
	// The partitions are allocated in chunks, not one by one (the first
	// is the state's); a full chunk is never appended to, so the pointers
	// in parts stay valid.
	chunk, first := fs.chunk[:0], true
	for _, rt := range req.Topics {
		t, missingCode := h.lookupFetchTopic(byID, rt.Topic, rt.TopicID)
		tk := topicKey{id: rt.TopicID}
		if !byID {
			tk = topicKey{name: rt.Topic}
		}
		topicIndex := seen.topic(tk)
		ft := fetchTopic{name: rt.Topic, id: rt.TopicID}
		denied := replicaDenied || !replica && h.topicDenied(creq, t, rt.Topic, acl.Read)
		for _, rp := range rt.Partitions {
			l := t.partition(rp.Partition)
			if l == nil || denied {
				if _, repeated := seen.partition(topicIndex, rp.Partition, -1); !repeated {
					if ft.missing == nil {
						ft.missing = &missingPartitions{code: missingCode}
						if denied {
							ft.missing.code = kerr.TopicAuthorizationFailed.Code
						} else if t.notHostedHere(rp.Partition) {
							// Cluster mode: held by another node.
							ft.missing.code = kerr.NotLeaderForPartition.Code
						}
					}
					ft.missing.partitions = append(ft.missing.partitions, rp.Partition)
					missing = true
					distinct++
				}
				continue
			}
			if first, repeated := seen.partition(topicIndex, rp.Partition, int32(len(parts))); repeated {
				parts[first].offset, parts[first].maxBytes = rp.FetchOffset, int64(rp.PartitionMaxBytes)
				continue
			}
			if len(chunk) == cap(chunk) {
				if first {
					fs.chunk, first = chunk, false // full: recycle clears it
				}
				chunk = make([]fetchPart, 0, min(n-len(parts), maxPooledFetch))
			}
			chunk = append(chunk, fetchPart{topic: rt.Topic, topicID: rt.TopicID, partition: rp.Partition, offset: rp.FetchOffset, maxBytes: int64(rp.PartitionMaxBytes),
				committed: req.IsolationLevel == 1, hwm: -1, logStart: -1, lso: -1})
			fp := &chunk[len(chunk)-1]
			fp.topic, fp.log = t.meta.Name, l
			if ft.parts == nil {
				ft.parts = fs.topicPartsFor(len(rt.Partitions))
			}
			ft.parts = append(ft.parts, fp)
			parts = append(parts, fp)
		}
		if len(ft.parts) > 0 || ft.missing != nil {
			topics = append(topics, ft)
		}
	}
	if first {
		fs.chunk = chunk // what recycle clears
	}
	fs.topics, fs.parts = topics, parts
	return missing, distinct + len(parts)
}

// lookupFetchTopic finds a fetched topic by ID (v13+) or by name, and the
// code that answers its partitions that do not exist (all of them when
// the topic is nil). Full and incremental fetches find topics here.
func (h *Handler) lookupFetchTopic(byID bool, name string, id [16]byte) (*topic, int16) {
	if !byID {
		return h.lookup(name), kerr.UnknownTopicOrPartition.Code
	}
	t := h.lookupID(id)
	if t == nil {
		return nil, kerr.UnknownTopicID.Code
	}
	return t, kerr.UnknownTopicOrPartition.Code
}

// longPollFetch waits until the partitions hold minBytes, maxWait passes or
// ctx ends, and leaves the last read in parts. One Waker is registered with
// every partition log for the whole wait and removed before returning, so
// no registration outlives the request.
func (h *Handler) longPollFetch(ctx context.Context, parts []*fetchPart, minBytes, maxBytes int64, maxWait time.Duration) {
	w := plog.NewWaker()
	for _, fp := range parts {
		fp.log.AddWaker(w)
	}
	defer func() {
		for _, fp := range parts {
			fp.log.RemoveWaker(w)
		}
	}()
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		// Read again now that the Waker is registered: an append between
		// the first read and the registration is seen here, and one after
		// it has signalled w.
		releaseFetch(parts)
		total, anyError := h.readFetch(parts, maxBytes)
		if total >= minBytes || anyError {
			h.fetchWoken(w) // timing.go
			return
		}
		select {
		case <-w.C:
		case <-timer.C:
			// Answer with what arrived since the last read.
			releaseFetch(parts)
			h.readFetch(parts, maxBytes)
			return
		case <-ctx.Done():
			// The client disconnected or the server is shutting down:
			// the answer (nothing new) is dropped with the connection.
			return
		}
	}
}

// maxFetchCopyBytes bounds the record bytes one response holds in memory
// (fetchPart.copied); past it, partitions are answered with their offsets
// only, as past the response's MaxBytes.
const maxFetchCopyBytes = 16 << 20

// readFetch reads every partition within the response budget; it returns
// the bytes gathered and whether any partition has an error.
//
// A partition's records are file ranges, sent with sendfile, and each pins
// its segment file open until the response is written: a response over
// 100,000 partitions held 100,000 descriptors and, past the process's
// RLIMIT_NOFILE (20,000 here), every further partition answered
// KAFKA_STORAGE_ERROR (the "19,980 of 100,000" of docs/benchmarks.md).
// Kafka, whose segment files are always open, answers every partition up
// to fetch.max.bytes. So once a response pins as many files as the file
// cache keeps open (--max-open-segment-files), the records of the next
// partitions are read into memory (up to maxFetchCopyBytes) and their
// files released; past that, offsets only.
func (h *Handler) readFetch(parts []*fetchPart, maxBytes int64) (total int64, anyError bool) {
	if maxBytes <= 0 {
		maxBytes = 1<<31 - 1
	}
	pinLimit := h.fileCache().Limit()
	pinned, copied := 0, int64(0)
	for _, fp := range parts {
		if fp.log == nil {
			// A session's partition that does not exist (resolveSession
			// set its error).
			anyError = true
			continue
		}
		fp.errorCode = 0
		budget := min(fp.maxBytes, maxBytes-total)
		copying := pinned >= pinLimit
		if copying {
			budget = min(budget, maxFetchCopyBytes-copied)
		}
		if budget <= 0 && (total > 0 || copying) {
			// Out of response budget: report the partition's offsets only.
			fp.hwm, fp.logStart, fp.lso = fp.log.HighWatermark(), fp.log.LogStartOffset(), fp.log.LastStableOffset()
			continue
		}
		var res plog.ReadResult
		var err error
		if fp.committed {
			res, err = fp.log.ReadCommitted(fp.offset, max(budget, 0), total == 0)
		} else {
			res, err = fp.log.Read(fp.offset, max(budget, 0), total == 0)
		}
		if err == nil && copying && len(res.Chunks) > 0 {
			fp.copied, err = copyChunks(&res)
			copied += int64(len(fp.copied))
		}
		if err != nil {
			fp.errorCode = errorCode(err)
			fp.hwm, fp.logStart, fp.lso = fp.log.HighWatermark(), fp.log.LogStartOffset(), fp.log.LastStableOffset()
			if fp.errorCode == kerr.KafkaStorageError.Code {
				h.log.Error("read failed", "topic", fp.topic, "partition", fp.partition, "offset", fp.offset, "err", err)
			}
			anyError = true
			continue
		}
		if len(res.Chunks) > 0 {
			pinned++
		}
		fp.result, fp.haveResult = res, true
		fp.hwm, fp.logStart, fp.lso = res.HighWatermark, res.LogStartOffset, res.LastStableOffset
		total += fp.recordBytes()
	}
	return total, anyError
}

// copyChunks reads res's file ranges into memory and releases its files
// (its aborted transactions are copied first: Release recycles them).
func copyChunks(res *plog.ReadResult) ([]byte, error) {
	var n int64
	for _, c := range res.Chunks {
		n += c.Len
	}
	b := make([]byte, n)
	off := int64(0)
	var err error
	for _, c := range res.Chunks {
		if _, rerr := c.File.ReadAt(b[off:off+c.Len], c.Pos); rerr != nil && err == nil {
			err = &plog.IOError{Op: "read " + c.File.Name(), Err: rerr}
		}
		off += c.Len
	}
	aborted := append([]plog.AbortedTxn(nil), res.Aborted...)
	res.Release()
	res.Chunks, res.Aborted = nil, aborted
	if err != nil {
		return nil, err
	}
	return b, nil
}

// recordBytes is the size of the partition's records in the answer.
func (fp *fetchPart) recordBytes() int64 {
	n := int64(len(fp.copied))
	for _, c := range fp.result.Chunks {
		n += c.Len
	}
	return n
}

// fileCache is the segment file cache the partition logs share.
func (h *Handler) fileCache() *plog.FileCache {
	if h.cfg.FileCache != nil {
		return h.cfg.FileCache
	}
	return plog.DefaultFileCache
}

func releaseFetch(parts []*fetchPart) {
	for _, fp := range parts {
		if fp.haveResult {
			fp.result.Release()
			fp.result, fp.haveResult, fp.copied = plog.ReadResult{}, false, nil
		}
	}
}

// encode encodes a Fetch response body of the given version and session
// id (0: none) into the state's frame, with each partition's records as
// file pieces. It follows kmsg's FetchResponse AppendTo field by field.
func (fs *fetchState) encode(version int16, sessionID int32, topics []fetchTopic) *server.Frame {
	flexible := version >= 12
	nPieces, headerBytes := 1, 16
	for _, t := range topics {
		headerBytes += 24 + len(t.name) + 48*t.missingCount()
		for _, fp := range t.parts {
			nPieces += 2 + len(fp.result.Chunks)
			headerBytes += 56 + 5 + 17*len(fp.result.Aborted) // an entry: two int64 and its tags
		}
	}
	if cap(fs.buf) < headerBytes {
		fs.buf = make([]byte, 0, headerBytes)
	}
	if cap(fs.pieces) < nPieces {
		fs.pieces = make([]server.Piece, 0, nPieces)
	}
	var (
		buf    = fs.buf[:0]
		pieces = fs.pieces[:0]
		start  int // start of buf not yet in a piece
	)
	arrayLen := func(n int) {
		if flexible {
			buf = kbin.AppendUvarint(buf, uint32(n+1))
		} else {
			buf = kbin.AppendArrayLen(buf, n)
		}
	}
	// partitionHeader appends a partition's answer up to its record bytes
	// (recordsLen of them, which follow as file pieces).
	// aborted is nil for a null AbortedTransactions (read_uncommitted).
	partitionHeader := func(partition int32, errorCode int16, hwm, lso, logStart, recordsLen int64, aborted []plog.AbortedTxn, committed bool) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(partition))
		buf = binary.BigEndian.AppendUint16(buf, uint16(errorCode))
		buf = binary.BigEndian.AppendUint64(buf, uint64(hwm))
		buf = binary.BigEndian.AppendUint64(buf, uint64(lso)) // LastStableOffset (v4+)
		if version >= 5 {
			buf = binary.BigEndian.AppendUint64(buf, uint64(logStart))
		}
		// AbortedTransactions (v4+): null for read_uncommitted, as Kafka.
		switch {
		case !committed && flexible:
			buf = kbin.AppendUvarint(buf, 0)
		case !committed:
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
		default:
			arrayLen(len(aborted))
			for _, a := range aborted {
				buf = binary.BigEndian.AppendUint64(buf, uint64(a.ProducerID))
				buf = binary.BigEndian.AppendUint64(buf, uint64(a.FirstOffset))
				if flexible {
					buf = append(buf, 0) // aborted transaction tagged fields
				}
			}
		}
		if version >= 11 {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // PreferredReadReplica -1
		}
		// RecordBatches: nullable bytes; empty (not null) without data,
		// as Kafka sends.
		if flexible {
			buf = kbin.AppendUvarint(buf, uint32(recordsLen+1))
		} else {
			buf = binary.BigEndian.AppendUint32(buf, uint32(recordsLen))
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, 0) // ThrottleMillis (v1+)
	if version >= 7 {
		buf = binary.BigEndian.AppendUint16(buf, 0)                 // ErrorCode
		buf = binary.BigEndian.AppendUint32(buf, uint32(sessionID)) // 0: no session
	}
	arrayLen(len(topics))
	for _, t := range topics {
		if version >= 13 {
			buf = append(buf, t.id[:]...)
		} else if flexible {
			buf = kbin.AppendCompactString(buf, t.name)
		} else {
			buf = kbin.AppendString(buf, t.name)
		}
		arrayLen(len(t.parts) + t.missingCount())
		for _, fp := range t.parts {
			n := fp.recordBytes()
			partitionHeader(fp.partition, fp.errorCode, fp.hwm, fp.lso, fp.logStart, n, fp.result.Aborted, fp.committed)
			if n > 0 {
				pieces = append(pieces, server.Piece{Bytes: buf[start:len(buf):len(buf)]})
				start = len(buf)
				if fp.copied != nil {
					pieces = append(pieces, server.Piece{Bytes: fp.copied})
				}
				for _, c := range fp.result.Chunks {
					pieces = append(pieces, server.Piece{File: c.File, Pos: c.Pos, Len: c.Len})
				}
			}
			if flexible {
				buf = append(buf, 0) // partition tagged fields
			}
		}
		if m := t.missing; m != nil {
			for _, p := range m.partitions {
				partitionHeader(p, m.code, -1, -1, -1, 0, nil, false)
				if flexible {
					buf = append(buf, 0) // partition tagged fields
				}
			}
		}
		if flexible {
			buf = append(buf, 0) // topic tagged fields
		}
	}
	if flexible {
		buf = append(buf, 0) // response tagged fields
	}
	pieces = append(pieces, server.Piece{Bytes: buf[start:]})
	fs.buf, fs.pieces, fs.frame.Pieces = buf, pieces, pieces
	return &fs.frame
}
