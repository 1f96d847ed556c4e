// Package meta is the broker's catalogue of topics: each topic's ID,
// partition count and config overrides, and the producer-ID allocator.
//
// # Storage: a metadata log and snapshots
//
// Every change is a typed, versioned record (records.go) appended to the
// metadata log, DATA/meta/metadata.log, and fsynced before the change
// returns; changes that arrive together share one write and one fsync
// (group commit). The whole catalogue at an offset is a snapshot,
// DATA/meta/snapshot.json; once the log has grown past the size of the
// snapshot (and at least minCompactBytes), a new snapshot is written
// (temporary file, fsync, rename, directory sync) and the log is emptied,
// so a change costs O(1) amortised whatever the number of topics. Open
// reads the snapshot, then applies the log's records from the snapshot's
// offset on, truncating a torn tail. A crash at any step leaves a snapshot
// and a log that together give every acknowledged change: the log's
// records below the snapshot's offset are skipped.
//
// The catalogue.json of earlier versions (the whole catalogue rewritten on
// every change, which made creating n topics O(n²)) is read once and
// migrated to a snapshot.
//
// # A full disk
//
// DATA/meta/reserve is a file of reserveBytes written at start-up. When an
// append to the metadata log fails for lack of space, the reserve is
// removed and the append written again (a failed write(2) wrote nothing
// that counts: the log's size is only advanced after its fsync), so
// metadata changes, above all DeleteTopics, which is how an operator frees
// space, keep working on a full disk. DeleteRecords, the other way, needs a
// block for its log-start checkpoint: it releases the reserve too
// (ReleaseReserve). The reserve is written again once there is room. A failed fsync is never retried (the kernel may have
// dropped the dirty pages): the catalogue then refuses changes until a
// restart, and its state is reloaded from what was durable.
//
// Nothing here assumes a single broker (design D11): the records name
// topics and partitions, not which node leads them; a replicated catalogue
// puts the same records through a raft log (as KRaft does).
package meta

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"sync"

	"github.com/sushka-io/sushka/internal/vfs"
)

// Errors returned by the catalogue; the api package maps them to Kafka codes.
var (
	ErrTopicExists   = errors.New("topic already exists")    // TOPIC_ALREADY_EXISTS
	ErrUnknownTopic  = errors.New("unknown topic")           // UNKNOWN_TOPIC_OR_PARTITION
	ErrInvalidTopic  = errors.New("invalid topic name")      // INVALID_TOPIC_EXCEPTION
	ErrBadPartitions = errors.New("invalid partition count") // INVALID_PARTITIONS
)

// producerIDBlock is how many producer IDs are reserved by one record.
// After a restart the unused rest of the block is skipped, so an ID is
// never handed out twice.
const producerIDBlock = 1000

// Topic is one topic's metadata. Values returned by the Catalog are copies.
type Topic struct {
	Name       string
	ID         [16]byte
	Partitions int32
	// Configs holds the topic's overrides under Kafka's names; a config not
	// present takes the broker default.
	Configs map[string]string
}

func (t Topic) clone() Topic {
	t.Configs = maps.Clone(t.Configs)
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	return t
}

// Catalog is the persistent topic catalogue. It is safe for concurrent use;
// every mutation is durable when it returns.
//
// A change is validated and applied to the state under mu, and its record
// queued in the open commit group; then one of the waiting changers (the
// one that takes commitMu first) writes every queued record with one write
// and one fsync and releases the group. Readers may see a change while it
// is being committed, but its caller hears of it only once it is durable;
// if the commit fails, the state is reloaded from the files (what is
// durable) and every change of the group fails.
type Catalog struct {
	fs   vfs.FS
	dir  string
	opts options

	// commitMu is held by the changer writing a commit group (and by a
	// snapshot); it is taken before mu.
	commitMu sync.Mutex
	// Guarded by commitMu: the open log file and its durable size.
	log        vfs.File
	logSize    int64
	reserveSet bool // the reserve file exists
	// snapshotBytes is the size of the last snapshot: the log is
	// compacted once it is larger.
	snapshotBytes int64

	mu         sync.Mutex
	st         *state
	nextOffset int64        // offset of the next record
	pending    []byte       // encoded batches of the open commit group
	cur        *commitGroup // the open commit group
	// failed is set by a failed fsync: changes are refused until a
	// restart (fsync is never retried).
	failed error
	// producerIDs is the group of the latest producer-id block record: an
	// id of that block is handed out only once it is durable.
	producerIDs    *commitGroup
	nextProducerID int64
	// maxPartitions bounds the partitions of all topics together (0: no
	// bound); see SetMaxPartitions.
	maxPartitions int64
}

// commitGroup is the set of changes written by one write and one fsync.
// err is set before done is closed.
type commitGroup struct {
	done chan struct{}
	err  error
}

func newCommitGroup() *commitGroup { return &commitGroup{done: make(chan struct{})} }

// options are the storage's sizes; tests make them small.
type options struct {
	minCompactBytes int64 // see minCompactBytes
	reserveBytes    int64 // see reserveBytes
}

// Open loads the catalogue from dir (DATA/meta), creating it when absent.
func Open(fs vfs.FS, dir string) (*Catalog, error) {
	return open(fs, dir, options{minCompactBytes: minCompactBytes, reserveBytes: reserveBytes})
}

func open(fs vfs.FS, dir string, opts options) (*Catalog, error) {
	c := &Catalog{fs: fs, dir: dir, opts: opts, cur: newCommitGroup()}
	// The directory's own entry must be durable too, or a crash could
	// take the whole catalogue with it.
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	if err := c.open(); err != nil {
		if c.log != nil {
			c.log.Close()
		}
		return nil, err
	}
	return c, nil
}

// Close closes the metadata log; the catalogue must not be used after.
func (c *Catalog) Close() error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	if c.log == nil {
		return nil
	}
	err := c.log.Close()
	c.log = nil
	return err
}

// newClusterID is a new data directory's cluster ID: 16 random bytes in
// unpadded URL-safe base64, like Kafka's.
func newClusterID() (string, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(id[:]), nil
}

// ClusterID is the data directory's cluster ID, fixed at creation.
func (c *Catalog) ClusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.clusterID
}

// DefaultMaxPartitions is the broker's default bound on the partitions of
// all topics together (--max-partitions).
const DefaultMaxPartitions = 100000

// SetMaxPartitions bounds the partitions of all topics together: each is a
// directory, open files and a writer goroutine, so no client may create
// enough to exhaust the node (design D13). Creations and growths beyond it
// fail with ErrBadPartitions (INVALID_PARTITIONS, as Redpanda answers its
// partition limits; Kafka has none). The internal __consumer_offsets is
// not in the catalogue and not counted. n <= 0: no bound.
func (c *Catalog) SetMaxPartitions(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxPartitions = n
}

// checkLimitLocked refuses adding partitions beyond maxPartitions.
func (c *Catalog) checkLimitLocked(added int32) error {
	if c.maxPartitions > 0 && c.st.partitions+int64(added) > c.maxPartitions {
		return fmt.Errorf("%w: %d more partitions would make %d on this broker, above its limit of %d (--max-partitions)",
			ErrBadPartitions, added, c.st.partitions+int64(added), c.maxPartitions)
	}
	return nil
}

// PartitionCount is the number of partitions of all topics together.
func (c *Catalog) PartitionCount() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.partitions
}

func (s *state) sortedTopics() []*Topic {
	ts := make([]*Topic, 0, len(s.topics))
	for _, t := range s.topics {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
}

// Internal topics: the coordinators' logs, Kafka's names. They are not in
// the catalogue; their coordinators own their partitions (internal/group,
// internal/txn), and no user creates, auto-creates or deletes them.
const (
	OffsetsTopic          = "__consumer_offsets"
	TransactionStateTopic = "__transaction_state"
)

// IsInternalTopic reports whether name is one of the internal topics.
func IsInternalTopic(name string) bool {
	return name == OffsetsTopic || name == TransactionStateTopic
}

// ValidateTopicName applies Kafka's rules: 1..249 characters of
// [a-zA-Z0-9._-], and not "." or "..".
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is not allowed", ErrInvalidTopic, name)
	case len(name) > 249:
		return fmt.Errorf("%w: longer than 249 characters", ErrInvalidTopic)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q contains a character other than ASCII alphanumerics, '.', '_' and '-'", ErrInvalidTopic, name)
		}
	}
	return nil
}

// Topic returns the named topic.
func (c *Catalog) Topic(name string) (Topic, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.topic(name)
}

// topic returns a copy of the named topic.
func (s *state) topic(name string) (Topic, bool) {
	t, ok := s.topics[name]
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// TopicByID returns the topic with the given ID.
func (c *Catalog) TopicByID(id [16]byte) (Topic, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.st.byID[id]
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// Topics returns all topics sorted by name.
func (c *Catalog) Topics() []Topic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.topicCopies()
}

// topicCopies returns copies of every topic sorted by name (nil for none).
func (s *state) topicCopies() []Topic {
	var out []Topic
	for _, t := range s.sortedTopics() {
		out = append(out, t.clone())
	}
	return out
}

// CheckCreate reports whether CreateTopic would succeed, without changing
// anything (validate-only requests).
func (c *Catalog) CheckCreate(name string, partitions int32, configs map[string]string) error {
	if err := ValidateTopicName(name); err != nil {
		return err
	}
	if IsInternalTopic(name) {
		// It exists from start-up, outside the catalogue.
		return fmt.Errorf("%w: %s is internal", ErrTopicExists, name)
	}
	if partitions < 1 {
		return fmt.Errorf("%w: %d, must be at least 1", ErrBadPartitions, partitions)
	}
	if err := ValidateConfigs(configs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.st.topics[name]; ok {
		return fmt.Errorf("%w: %s", ErrTopicExists, name)
	}
	return c.checkLimitLocked(partitions)
}

// CreateTopic adds a topic with a fresh random ID.
func (c *Catalog) CreateTopic(name string, partitions int32, configs map[string]string) (Topic, error) {
	if err := c.CheckCreate(name, partitions, configs); err != nil {
		return Topic{}, err
	}
	c.mu.Lock()
	if _, ok := c.st.topics[name]; ok {
		c.mu.Unlock()
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, name)
	}
	if err := c.checkLimitLocked(partitions); err != nil {
		c.mu.Unlock()
		return Topic{}, err
	}
	id, err := c.st.newTopicID()
	if err != nil {
		c.mu.Unlock()
		return Topic{}, err
	}
	g, err := c.changeLocked(&TopicRecord{Name: name, ID: id, Partitions: partitions, Configs: configs})
	t := c.st.topics[name]
	var out Topic
	if t != nil {
		out = t.clone()
	}
	c.mu.Unlock()
	if err != nil {
		return Topic{}, err
	}
	if err := c.commit(g); err != nil {
		return Topic{}, err
	}
	return out, nil
}

// DeleteTopic removes a topic from the catalogue.
func (c *Catalog) DeleteTopic(name string) error {
	c.mu.Lock()
	t, ok := c.st.topics[name]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	g, err := c.changeLocked(&RemoveTopicRecord{ID: t.ID})
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.commit(g)
}

// CheckPartitions reports whether SetPartitions(name, n) would succeed.
func (c *Catalog) CheckPartitions(name string, n int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkPartitionsLocked(name, n)
}

func (c *Catalog) checkPartitionsLocked(name string, n int32) error {
	if err := c.st.checkPartitions(name, n); err != nil {
		return err
	}
	return c.checkLimitLocked(n - c.st.topics[name].Partitions)
}

// SetPartitions grows a topic to n partitions.
func (c *Catalog) SetPartitions(name string, n int32) error {
	c.mu.Lock()
	if err := c.checkPartitionsLocked(name, n); err != nil {
		c.mu.Unlock()
		return err
	}
	g, err := c.changeLocked(&PartitionsRecord{ID: c.st.topics[name].ID, Partitions: n})
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.commit(g)
}

// SetConfigs replaces a topic's config overrides. The caller validates them.
func (c *Catalog) SetConfigs(name string, configs map[string]string) error {
	c.mu.Lock()
	t, ok := c.st.topics[name]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	g, err := c.changeLocked(&ConfigsRecord{ID: t.ID, Configs: configs})
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.commit(g)
}

// NextProducerID hands out a producer ID never handed out before, by this
// process or an earlier one on the same data directory.
func (c *Catalog) NextProducerID() (int64, error) {
	for {
		c.mu.Lock()
		if c.nextProducerID >= c.st.producerIDBlockEnd {
			g, err := c.changeLocked(&ProducerIDsRecord{BlockEnd: c.nextProducerID + producerIDBlock})
			if err != nil {
				c.mu.Unlock()
				return -1, err
			}
			c.producerIDs = g
		}
		g := c.producerIDs
		if g != nil {
			select {
			case <-g.done:
				if g.err != nil {
					// The block is not durable; the state was reloaded
					// without it, and the next round reserves it again.
					c.producerIDs = nil
					c.mu.Unlock()
					return -1, g.err
				}
				c.producerIDs = nil
			default:
				// Not durable yet: wait for it (or commit it) and look
				// again.
				c.mu.Unlock()
				c.commit(g)
				continue
			}
		}
		id := c.nextProducerID
		c.nextProducerID++
		c.mu.Unlock()
		return id, nil
	}
}
