package api

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/clock"
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
// Memory: a session of N partitions costs O(N) (a fetchPart and a map
// entry each, about 300 bytes); the slots bound the sessions and
// Config.MaxPartitionsPerRequest the partitions of each.

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
	parts []*fetchPart // in session order: read in this order, answered in it
	byKey map[sessionKey]*fetchPart
	moved []*fetchPart // reorder's scratch, kept between requests

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
		token: make(chan struct{}, 1), epoch: nextFetchEpoch(fetchInitialEpoch)}
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
		return
	}
	p := new(fetchPart)
	*p = fp
	s.byKey[key] = p
	s.parts = append(s.parts, p)
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
				fp.log, fp.forgotten = nil, true
				forgot = true
			}
		}
	}
	if forgot {
		kept := s.parts[:0]
		for _, fp := range s.parts {
			if !fp.forgotten {
				kept = append(kept, fp)
			}
		}
		clear(s.parts[len(kept):])
		s.parts = kept
	}
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
	return len(fp.result.Chunks) > 0 || fp.errorCode != 0 || fp.sent != (sentOffsets{fp.hwm, fp.logStart, fp.lso})
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
// others first.
func (s *fetchSession) reorder() {
	s.moved = s.moved[:0]
	kept := s.parts[:0]
	for _, fp := range s.parts {
		if fp.hadRecords {
			s.moved = append(s.moved, fp)
		} else {
			kept = append(kept, fp)
		}
	}
	if len(s.moved) == 0 {
		return
	}
	s.parts = append(kept, s.moved...)
	clear(s.moved)
}
