package api

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// Fetch sessions (KIP-227), as Kafka's FetchManager and FetchSessionCache
// (server/.../FetchManager.java, FetchSessionCacheShard.java) keep them:
//
//   - A session is broker-wide, named by its id and validated by its epoch;
//     it is not tied to a connection (a client may reconnect and go on).
//   - Epoch -1 (FINAL_EPOCH) is a sessionless full fetch; epoch 0
//     (INITIAL_EPOCH) a full fetch that creates a session. Either closes the
//     session its id names, if any.
//   - Any other epoch is incremental: an unknown id is answered
//     FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's
//     INVALID_FETCH_SESSION_EPOCH, a session of topic IDs (v13+) fetched
//     by name or the reverse FETCH_SESSION_TOPIC_ID_ERROR, all with no
//     topics. The request's partitions are added to the session or update
//     its fetch offset and max bytes, its forgotten topics leave it; the
//     session's partitions are read and only those that changed since
//     they were last answered are in the response (records, a new high
//     watermark, log start or last stable offset, an error, or newly
//     added). A session left with no partitions is closed and the fetch
//     answered sessionless.
//   - The cache holds at most Config.FetchSessionSlots sessions
//     (max.incremental.fetch.session.cache.slots, 1000). A new session
//     when it is full evicts the least recently used session if that one
//     has been unused for FetchSessionEviction
//     (min.incremental.fetch.session.eviction.ms, 120 s); otherwise the
//     least valuable session older than FetchSessionEviction, by
//     (privileged, partitions, id), if the new one is worth more (a
//     follower's session over a consumer's, more partitions over fewer);
//     a follower may also evict a consumer's session however young.
//     Nothing evictable: the full fetch is answered with session id 0,
//     no session, as Kafka does. Kafka files a session under its
//     evictable sets when it is used; here its age is looked at when a
//     new session needs the room (the same rule, read when it matters).
//
//   - Unlike Kafka's, whose incremental fetch reads every partition of the
//     session, a fetch here reads only the session's candidates (see
//     fetchSession.candidates): each partition, once read, is watched by
//     its log (plog.Watcher) for the session's life, so a caught-up
//     partition is not looked at again until its log tells of a change.
//     The answer is Kafka's: the partitions not read are exactly those
//     with nothing to answer.
//
// Memory: a session of N partitions costs O(N) (a fetchPart, a map entry,
// a watch and its entry in the log's watchers, about 350 bytes each); the
// slots bound the sessions and Config.MaxPartitionsPerRequest the
// partitions of each.

// The defaults of the fetch session cache, Kafka's.
const (
	DefaultFetchSessionSlots    = 1000              // max.incremental.fetch.session.cache.slots
	DefaultFetchSessionEviction = 120 * time.Second // min.incremental.fetch.session.eviction.ms
)

// Session epochs with a meaning of their own (Kafka's FetchMetadata).
const (
	fetchFinalEpoch   = -1 // sessionless full fetch
	fetchInitialEpoch = 0  // full fetch creating a session
)

// nextFetchEpoch is Kafka's FetchMetadata.nextEpoch: after MaxInt32 comes 1.
func nextFetchEpoch(epoch int32) int32 {
	switch {
	case epoch < 0:
		return fetchFinalEpoch
	case epoch == math.MaxInt32:
		return 1
	}
	return epoch + 1
}

// sessionKey names a session's partition: by topic ID in a session of
// topic IDs (v13+), by name otherwise.
type sessionKey struct {
	topic     topicKey
	partition int32
}

// fetchSession is one incremental fetch session.
//
// Ownership: a request owns the session's partitions (parts, byKey, their
// fetchParts), its epoch and moved while it holds token (acquire to
// release); the cache's fields (lastUsed, size, removed, the LRU links)
// are under fetchSessions.mu. A session removed from the cache while held
// stays usable by its holder, which answers with it; nothing else finds it.
type fetchSession struct {
	id           int32
	privileged   bool // a follower's (ReplicaID >= 0): preferred when evicting
	usesTopicIDs bool
	created      time.Time

	token chan struct{} // capacity 1, full while no request holds the session

	epoch int32        // the epoch the next request must carry
	parts []*fetchPart // in session order (ascending fetchPart.order): answered in it
	byKey map[sessionKey]*fetchPart
	moved []*fetchPart // reorder's scratch, kept between requests

	// Change tracking: an incremental fetch reads only its candidates,
	// the partitions that may have something to answer (named by the
	// request, not caught up or in error when last read, never read yet,
	// or told of a change by their log through their partWatch); every
	// other partition is caught up, answered as it is, and registered
	// with its log, which tells its watch of the next change. So a fetch
	// costs what changed, not the session's size (issue 12).
	candidates []*fetchPart // partitions with pending set, in no order
	nextOrder  int64
	topics     []sessionTopic   // the session's topics, authorized on every fetch
	topicIndex map[topicKey]int // into topics
	changesMu  sync.Mutex       // a leaf, taken under plog.Log.mu (partWatch.LogChanged)
	changes    []*partWatch     // (changesMu) told of a change since the last fetch took them
	changedAt  int64            // (changesMu) unix ns of the first of changes: the wake-up metric
	woken      int64            // the changedAt of the changes the last takeChanges took (timing.go)
	wake       chan struct{}    // capacity 1: signalled at each change, for a long poll

	lastUsed   time.Time
	size       int  // partitions when last used (Kafka's cachedSize)
	removed    bool // no longer in the cache
	prev, next *fetchSession
}

// fetchSessions is the broker's fetch session cache.
type fetchSessions struct {
	slots      int // 0: no sessions
	evictAfter time.Duration
	clock      clock.Clock

	mu        sync.Mutex
	byID      map[int32]*fetchSession
	lru       fetchSession // sentinel: lru.next is the least recently used
	rng       *rand.Rand
	evictions int64
}

func newFetchSessions(slots int, evictAfter time.Duration, clk clock.Clock) *fetchSessions {
	c := &fetchSessions{slots: slots, evictAfter: evictAfter, clock: clk,
		byID: make(map[int32]*fetchSession), rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// len is the count of sessions in the cache.
func (c *fetchSessions) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// evicted is the count of sessions evicted for new ones.
func (c *fetchSessions) evicted() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evictions
}

// remove closes the session id names, if it exists (a full fetch naming it).
func (c *fetchSessions) remove(id int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.byID[id]; s != nil {
		c.removeLocked(s)
	}
}

func (c *fetchSessions) removeLocked(s *fetchSession) {
	if s.removed {
		return
	}
	delete(c.byID, s.id)
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next, s.removed = nil, nil, true
	go s.unwatchAll() // waits for a request holding it; not under c.mu
}

// unwatchAll unregisters a removed session's partitions from their logs,
// once the request holding the session (if any) has released it. The
// token is given back after: a request that found the session before its
// removal and waits for it sees it removed and answers so.
func (s *fetchSession) unwatchAll() {
	s.token <- struct{}{}
	defer s.release()
	for _, fp := range s.parts {
		fp.unwatch()
	}
}

// touchLocked marks s used now with size partitions: the most recently used.
func (c *fetchSessions) touchLocked(s *fetchSession, size int, now time.Time) {
	s.lastUsed, s.size = now, size
	if s.prev != nil {
		s.prev.next, s.next.prev = s.next, s.prev
	}
	s.prev, s.next = c.lru.prev, &c.lru
	c.lru.prev.next = s
	c.lru.prev = s
}

// create makes a session of size partitions if there is room, or room can
// be made by eviction; nil if not. The session is returned held (its
// partitions for the caller to fill, then release), at epoch 1.
func (c *fetchSessions) create(privileged, usesTopicIDs bool, size int) *fetchSession {
	if c.slots <= 0 {
		return nil
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byID) >= c.slots && !c.tryEvictLocked(privileged, size, now) {
		return nil
	}
	id := int32(0)
	for id == 0 || c.byID[id] != nil {
		id = c.rng.Int32N(math.MaxInt32-1) + 1 // 1 .. MaxInt32-1, as Kafka
	}
	s := &fetchSession{id: id, privileged: privileged, usesTopicIDs: usesTopicIDs, created: now,
		token: make(chan struct{}, 1), epoch: nextFetchEpoch(fetchInitialEpoch),
		topicIndex: map[topicKey]int{}, wake: make(chan struct{}, 1)}
	s.token <- struct{}{} // held before anyone can find it
	c.byID[id] = s
	c.touchLocked(s, size, now)
	return s
}

// tryEvictLocked makes room for a new session (Kafka's tryEvict): the least
// recently used session if it has been idle longer than evictAfter, else
// the least valuable of the sessions created longer ago than evictAfter
// (for a privileged newcomer: also every unprivileged one) if it is worth
// less than the newcomer.
func (c *fetchSessions) tryEvictLocked(privileged bool, size int, now time.Time) bool {
	oldest := c.lru.next
	if oldest == &c.lru {
		return false
	}
	if now.Sub(oldest.lastUsed) > c.evictAfter {
		c.removeLocked(oldest)
		c.evictions++
		return true
	}
	var victim *fetchSession
	for s := c.lru.next; s != &c.lru; s = s.next {
		old := now.Sub(s.created) > c.evictAfter
		if !old && !(privileged && !s.privileged) {
			continue
		}
		if victim == nil || lessValuable(s, victim) {
			victim = s
		}
	}
	// The newcomer's key is (privileged, size, id 0): it evicts only a
	// session of strictly less value (Kafka's EvictableKey order).
	if victim == nil || victim.privileged && !privileged || victim.privileged == privileged && victim.size >= size {
		return false
	}
	c.removeLocked(victim)
	c.evictions++
	return true
}

// lessValuable orders sessions as Kafka's EvictableKey: (privileged, size,
// id), unprivileged and smaller first.
func lessValuable(a, b *fetchSession) bool {
	if a.privileged != b.privileged {
		return !a.privileged
	}
	if a.size != b.size {
		return a.size < b.size
	}
	return a.id < b.id
}

// acquire finds session id for an incremental fetch at epoch and holds it,
// waiting while another request holds it (a client pipelining fetches of
// one session) or until ctx ends. On success the epoch has moved on and
// the session counts as used now; the caller applies the request to it
// and releases it. Otherwise it returns the error code to answer, holding
// nothing.
func (c *fetchSessions) acquire(ctx context.Context, id, epoch int32, usesTopicIDs bool) (*fetchSession, int16) {
	c.mu.Lock()
	s := c.byID[id]
	c.mu.Unlock()
	if s == nil {
		return nil, kerr.FetchSessionIDNotFound.Code
	}
	select {
	case s.token <- struct{}{}:
	case <-ctx.Done():
		return nil, kerr.FetchSessionIDNotFound.Code // the client is gone: the answer is dropped
	}
	c.mu.Lock()
	removed := s.removed
	c.mu.Unlock()
	switch {
	case removed: // evicted or closed while this request waited
		s.release()
		return nil, kerr.FetchSessionIDNotFound.Code
	case s.epoch != epoch:
		s.release()
		return nil, kerr.InvalidFetchSessionEpoch.Code
	case s.usesTopicIDs != usesTopicIDs:
		s.release()
		return nil, kerr.FetchSessionTopicIDError.Code
	}
	s.epoch = nextFetchEpoch(s.epoch)
	return s, 0
}

// used records that a request used s, which now has its partitions.
func (c *fetchSessions) used(s *fetchSession) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.removed {
		c.touchLocked(s, len(s.parts), now)
	}
}

// release lets the next request use s.
func (s *fetchSession) release() { <-s.token }

// add puts a partition into the session, or updates its fetch offset and
// max bytes if it is in already.
func (s *fetchSession) add(key sessionKey, fp fetchPart) {
	if have := s.byKey[key]; have != nil {
		have.offset, have.maxBytes = fp.offset, fp.maxBytes
		s.markPending(have)
		return
	}
	p := new(fetchPart)
	*p = fp
	s.put(key, p)
}

// put adds p, a partition new to the session, at the end of its order; the
// next fetch reads it.
func (s *fetchSession) put(key sessionKey, p *fetchPart) {
	p.order, s.nextOrder = s.nextOrder, s.nextOrder+1
	s.byKey[key] = p
	s.parts = append(s.parts, p)
	s.markPending(p)
	if _, ok := s.topicIndex[key.topic]; !ok {
		s.topicIndex[key.topic] = len(s.topics)
		s.topics = append(s.topics, sessionTopic{key: key.topic, name: p.topic, id: p.topicID})
	}
}

// markPending makes fp one of the next fetch's candidates.
func (s *fetchSession) markPending(fp *fetchPart) {
	if !fp.pending {
		fp.pending = true
		s.candidates = append(s.candidates, fp)
	}
}

// update applies an incremental request: its partitions are added or
// updated, then its forgotten partitions leave (Kafka's order: a partition
// named in both leaves).
func (s *fetchSession) update(req *kmsg.FetchRequest) {
	for _, rt := range req.Topics {
		tk := s.topicKey(rt.Topic, rt.TopicID)
		for _, rp := range rt.Partitions {
			s.add(sessionKey{tk, rp.Partition}, newSessionPart(rt.Topic, rt.TopicID, rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes))
		}
	}
	forgot := false
	for _, ft := range req.ForgottenTopics {
		tk := s.topicKey(ft.Topic, ft.TopicID)
		for _, p := range ft.Partitions {
			if fp := s.byKey[sessionKey{tk, p}]; fp != nil {
				delete(s.byKey, sessionKey{tk, p})
				fp.unwatch()
				fp.log, fp.forgotten = nil, true
				forgot = true
			}
		}
	}
	if forgot {
		s.parts = withoutForgotten(s.parts)
		s.candidates = withoutForgotten(s.candidates)
		// The topics left: those of the partitions kept.
		s.topics, s.topicIndex = s.topics[:0], map[topicKey]int{}
		for _, fp := range s.parts {
			if tk := s.topicKey(fp.topic, fp.topicID); !hasKey(s.topicIndex, tk) {
				s.topicIndex[tk] = len(s.topics)
				s.topics = append(s.topics, sessionTopic{key: tk, name: fp.topic, id: fp.topicID})
			}
		}
	}
}

func hasKey(m map[topicKey]int, k topicKey) bool { _, ok := m[k]; return ok }

// withoutForgotten filters the forgotten partitions out of parts, in place.
func withoutForgotten(parts []*fetchPart) []*fetchPart {
	kept := parts[:0]
	for _, fp := range parts {
		if !fp.forgotten {
			kept = append(kept, fp)
		}
	}
	clear(parts[len(kept):])
	return kept
}

func (s *fetchSession) topicKey(name string, id [16]byte) topicKey {
	if s.usesTopicIDs {
		return topicKey{id: id}
	}
	return topicKey{name: name}
}

// newSessionPart is a partition entering a session: nothing answered yet,
// so the first answer includes it.
func newSessionPart(topic string, id [16]byte, partition int32, offset int64, maxBytes int32) fetchPart {
	return fetchPart{topic: topic, topicID: id, partition: partition, offset: offset, maxBytes: int64(maxBytes),
		hwm: -1, logStart: -1, lso: -1, sent: sentOffsets{hwm: -1, logStart: -1, lso: -1}}
}

// changed reports whether a session's partition goes into an incremental
// answer (Kafka's CachedPartition.maybeUpdateResponseData, and the last
// stable offset): records, an error, or offsets other than those its
// client was last told.
func (fp *fetchPart) changed() bool {
	return fp.recordBytes() > 0 || fp.errorCode != 0 || fp.sent != (sentOffsets{fp.hwm, fp.logStart, fp.lso})
}

// markAnswered records what an answer including fp tells its client.
// After an error Kafka forgets the high watermark, so the partition is
// answered again once the error has gone.
func (fp *fetchPart) markAnswered() {
	fp.sent = sentOffsets{fp.hwm, fp.logStart, fp.lso}
	if fp.errorCode != 0 {
		fp.sent.hwm = -1
	}
}

// reorder moves the partitions that returned records to the end of the
// session, as Kafka does, so the next fetch's response budget goes to the
// others first. Only candidates can have returned records; the others
// are passed over by pointer, never touched.
func (s *fetchSession) reorder() {
	s.moved = s.moved[:0]
	for _, fp := range s.candidates { // in session order (sortCandidates)
		if fp.hadRecords {
			s.moved = append(s.moved, fp)
		}
	}
	if len(s.moved) == 0 {
		return
	}
	// s.parts and s.moved are both in session order: one merge-like walk.
	kept, j := s.parts[:0], 0
	for _, fp := range s.parts {
		if j < len(s.moved) && fp == s.moved[j] {
			j++
			continue
		}
		kept = append(kept, fp)
	}
	s.parts = append(kept, s.moved...)
	for _, fp := range s.moved {
		fp.order, s.nextOrder = s.nextOrder, s.nextOrder+1
	}
	clear(s.moved)
}

// sessionTopic is a topic of a session, with its last authorization.
type sessionTopic struct {
	key    topicKey
	name   string
	id     [16]byte
	denied bool // when last authorized: its partitions were answered TOPIC_AUTHORIZATION_FAILED
}

// partWatch registers a session's partition with its log (plog.Watcher):
// the log tells it of each change and it queues its partition for the
// session's next fetch. Its log is the token holder's; queued is under
// the session's changesMu.
type partWatch struct {
	s      *fetchSession
	fp     *fetchPart
	log    *plog.Log // registered with; nil: none
	queued bool      // (s.changesMu) on s.changes
}

// LogChanged is called by the log, under its lock.
func (w *partWatch) LogChanged() {
	s := w.s
	s.changesMu.Lock()
	if !w.queued {
		if len(s.changes) == 0 {
			s.changedAt = time.Now().UnixNano() // once per wake-up, not per change
		}
		w.queued = true
		s.changes = append(s.changes, w)
	}
	s.changesMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// watchLog registers fp with its log for this fetch (fp.log), moving the
// registration when the log changed (a topic deleted and created again),
// dropping it when there is none; slab provides new watches.
func (s *fetchSession) watchLog(fp *fetchPart, slab *[]partWatch) {
	if fp.watch == nil {
		if len(*slab) == 0 {
			*slab = make([]partWatch, max(1, len(s.candidates)))
		}
		fp.watch, *slab = &(*slab)[0], (*slab)[1:]
		fp.watch.s, fp.watch.fp = s, fp
	}
	if w := fp.watch; w.log != fp.log {
		fp.unwatch()
		if fp.log != nil {
			fp.log.AddWatcher(w)
			w.log = fp.log
		}
	}
}

// unwatch unregisters fp from its log, if registered.
func (fp *fetchPart) unwatch() {
	if w := fp.watch; w != nil && w.log != nil {
		w.log.RemoveWatcher(w)
		w.log = nil
	}
}

// takeChanges makes the partitions whose log told of a change since the
// last call candidates; it reports whether there were any.
func (s *fetchSession) takeChanges() bool {
	s.changesMu.Lock()
	changes := s.changes
	s.changes = nil
	s.woken, s.changedAt = s.changedAt, 0
	for _, w := range changes {
		w.queued = false
	}
	s.changesMu.Unlock()
	for _, w := range changes {
		if !w.fp.forgotten {
			s.markPending(w.fp)
		}
	}
	return len(changes) > 0
}

// sortCandidates puts the candidates in session order: they are read (the
// response budget goes first to the first) and answered in it.
func (s *fetchSession) sortCandidates() {
	slices.SortFunc(s.candidates, func(a, b *fetchPart) int { return cmp.Compare(a.order, b.order) })
}

// settle keeps as candidates, after an answer, the partitions that may
// have more to answer at once: in error or with no log, or not caught up
// (records left below the high watermark, or the last stable offset for
// read_committed). The others wait for their log to tell of a change.
func (s *fetchSession) settle() {
	kept := s.candidates[:0]
	for _, fp := range s.candidates {
		end := fp.hwm
		if fp.committed {
			end = fp.lso
		}
		if fp.errorCode != 0 || fp.watch == nil || fp.watch.log == nil || fp.offset < end {
			kept = append(kept, fp)
			continue
		}
		fp.pending = false
	}
	clear(s.candidates[len(kept):])
	s.candidates = kept
}

// incrementalFetch answers a fetch of an existing session: the partitions
// of the session that changed since they were last answered. It reads the
// session's candidates only (fetchSession.candidates): with nothing
// changed, a session of any size costs one pass over its topics'
// authorization and nothing per partition.
func (h *Handler) incrementalFetch(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest) server.Response {
	s, code := h.fetchSessions.acquire(ctx, req.SessionID, req.SessionEpoch, req.Version >= 13)
	if code != 0 {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = code
		return server.Response{Body: resp}
	}
	defer s.release()
	select {
	case <-s.wake: // taken with the changes below
	default:
	}
	s.update(req)
	if len(s.parts) == 0 {
		// Everything forgotten: Kafka closes the session and answers the
		// request (naming nothing, then) sessionless.
		h.fetchSessions.remove(s.id)
		return h.fullFetch(ctx, creq, req, false)
	}
	if refused, ok := h.tooManyPartitions(creq, len(s.parts)); ok {
		h.fetchSessions.remove(s.id)
		return refused
	}
	h.fetchSessions.used(s)
	s.takeChanges()
	h.authorizeSession(creq, s, req)
	s.sortCandidates()
	anyMissing := h.resolveSession(creq, s, req, s.candidates)
	h.waitSession(ctx, creq, req, s, anyMissing)

	// The answer takes the changed partitions' reads with it (the session
	// is free again as soon as this returns); the others are released now.
	fs := fetchPool.Get().(*fetchState)
	answered, changed := fs.chunk[:0], fs.topicParts[:0] // a session's parts are not carved into topics
	for _, fp := range s.candidates {
		fp.hadRecords = fp.recordBytes() > 0
		if fp.changed() {
			answered = append(answered, *fp)
			changed = append(changed, fp)
		} else if fp.haveResult {
			fp.result.Release()
		}
		// The next fetch finds the log again: a deleted topic's log is
		// kept by the partition's watch only until then.
		fp.result, fp.haveResult, fp.log, fp.copied = plog.ReadResult{}, false, nil, nil
	}
	parts := fs.parts[:0]
	for i := range answered {
		parts = append(parts, &answered[i])
	}
	fs.chunk, fs.topicParts, fs.parts = answered, changed, parts
	fs.topics = sessionTopics(fs.topics[:0], parts, s.usesTopicIDs)
	frame := fs.encode(req.Version, s.id, fs.topics)
	if throttled, ok := h.fetchThrottle(creq, req.Version, frame); ok { // throttle.go
		// As Kafka's throttled incremental answer: the session keeps
		// what it last told the client, so the next fetch answers it
		// (the candidates stay).
		fs.recycle()
		if fr, ok := throttled.Body.(*kmsg.FetchResponse); ok {
			fr.SessionID = s.id
		}
		return throttled
	}
	for _, fp := range changed {
		fp.markAnswered()
	}
	s.reorder()
	s.settle()
	h.countFetched(parts)
	return server.Response{Frame: frame} // its Release recycles fs
}

// authorizeSession authorizes every topic of the session on every fetch,
// as Kafka does for each partition: a topic whose verdict changed since the
// last fetch has all its partitions read (answered
// TOPIC_AUTHORIZATION_FAILED, or again what they hold). Without an
// authorizer nothing is ever denied and nothing is done.
func (h *Handler) authorizeSession(creq *server.Request, s *fetchSession, req *kmsg.FetchRequest) {
	if !h.authz.Enabled() {
		return
	}
	replica := req.ReplicaID >= 0 || req.ReplicaState.ID >= 0
	replicaDenied := replica && !h.allowedCluster(creq, acl.ClusterAction)
	for i := range s.topics {
		st := &s.topics[i]
		t, _ := h.lookupFetchTopic(s.usesTopicIDs, st.name, st.id)
		denied := replicaDenied || !replica && h.topicDenied(creq, t, st.name, acl.Read)
		if denied == st.denied {
			continue
		}
		st.denied = denied
		for _, fp := range s.parts {
			if s.topicKey(fp.topic, fp.topicID) == st.key {
				s.markPending(fp)
			}
		}
	}
}

// waitSession reads the session's candidates and, with fewer than MinBytes
// and no error, long polls on the session's changes (no registration per
// request: every partition read is watched); the last read stays in the
// candidates.
func (h *Handler) waitSession(ctx context.Context, creq *server.Request, req *kmsg.FetchRequest, s *fetchSession, anyError bool) {
	maxBytes := h.fetchMaxBytes(creq, int64(req.MaxBytes)) // throttle.go
	total, readError := h.readFetch(s.candidates, maxBytes)
	maxWait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, h.cfg.MaxFetchWait)
	if total >= int64(req.MinBytes) || anyError || readError || maxWait <= 0 {
		return
	}
	waited := creq.Accounting.WaitStart()
	defer creq.Accounting.WaitEnd(waited)
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		timedOut := false
		select {
		case <-s.wake:
		case <-timer.C:
			timedOut = true // answer with what changed meanwhile, if anything
		case <-ctx.Done():
			return // the client is gone: the answer is dropped
		}
		before := len(s.candidates)
		if s.takeChanges() {
			// Partitions that changed since the last read, candidates
			// already or new ones (found and watched before they are
			// read): read again with the others.
			missing := h.resolveSession(creq, s, req, s.candidates[before:])
			s.sortCandidates()
			releaseFetch(s.candidates)
			var readError bool
			total, readError = h.readFetch(s.candidates, maxBytes)
			if total >= int64(req.MinBytes) || missing || readError {
				h.fetchWokenAt(s.woken) // timing.go
				return
			}
		}
		if timedOut {
			return
		}
	}
}

// resolveSession points each of parts, partitions of a session, at its log for this
// request (so a topic deleted or created since is seen now) at the
// request's isolation level, and reports whether any does not exist (its
// error code set, nothing to read).
func (h *Handler) resolveSession(creq *server.Request, s *fetchSession, req *kmsg.FetchRequest, parts []*fetchPart) (missing bool) {
	var (
		last   topicKey
		looked bool
		t      *topic
		code   int16
		denied bool
	)
	// Authorized on every fetch, as Kafka does: an ACL removed since the
	// session began denies its partitions now (the rules of a full
	// fetch's, fetchParts).
	replica := req.ReplicaID >= 0 || req.ReplicaState.ID >= 0
	replicaDenied := replica && !h.allowedCluster(creq, acl.ClusterAction)
	var slab []partWatch // new watches, allocated together
	for _, fp := range parts {
		// A session's partitions of one topic mostly follow each other:
		// one lookup per run of them.
		if tk := s.topicKey(fp.topic, fp.topicID); !looked || tk != last {
			t, code = h.lookupFetchTopic(s.usesTopicIDs, fp.topic, fp.topicID)
			denied = replicaDenied || !replica && h.topicDenied(creq, t, fp.topic, acl.Read)
			last, looked = tk, true
		}
		fp.committed = req.IsolationLevel == 1
		fp.log = t.partition(fp.partition)
		partCode := code
		switch {
		case denied:
			fp.log, partCode = nil, kerr.TopicAuthorizationFailed.Code
		case t.followerHere(fp.partition):
			// Cluster mode: leadership moved; its changes still wake
			// the session (replication), which answers this.
			fp.log, partCode = nil, kerr.NotLeaderForPartition.Code
		}
		s.watchLog(fp, &slab) // before it is read: a change after the read is told
		if fp.log == nil {
			fp.errorCode, fp.hwm, fp.logStart, fp.lso = partCode, -1, -1, -1
			missing = true
			continue
		}
		fp.topic = t.meta.Name
	}
	return missing
}

// sessionTopics groups an incremental answer's partitions (in session
// order) into topic entries: a topic whose partitions are not next to each
// other has an entry per run, as Kafka's FetchResponse.of builds them.
// Each entry's parts are a window of parts (no allocation per topic); the
// entries are appended to topics.
func sessionTopics(topics []fetchTopic, parts []*fetchPart, byID bool) []fetchTopic {
	start := 0
	for i, fp := range parts {
		if n := len(topics); n > 0 && (byID && topics[n-1].id == fp.topicID || !byID && topics[n-1].name == fp.topic) {
			topics[n-1].parts = parts[start : i+1 : i+1]
			continue
		}
		start = i
		topics = append(topics, fetchTopic{name: fp.topic, id: fp.topicID, parts: parts[i : i+1 : i+1]})
	}
	return topics
}
