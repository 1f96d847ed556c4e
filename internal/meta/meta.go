// Package meta is the broker's catalogue of topics: each topic's ID,
// partition count and config overrides, and the producer-ID allocator.
//
// The catalogue is small and changes rarely, so it is one JSON file,
// DATA/meta/catalog.json, rewritten atomically on every change (write a
// temporary file, fsync it, rename it over the old one, fsync the
// directory). A crash leaves either the old or the new catalogue, never a mix.
//
// Nothing here assumes a single broker (design D11): the catalogue records
// topics and partitions, not which node leads them; a replicated catalogue
// would put the same records through consensus.
package meta

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
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

// producerIDBlock is how many producer IDs are reserved by one catalogue
// write. After a restart the unused rest of the block is skipped, so an ID
// is never handed out twice.
const producerIDBlock = 1000

// catalogFile is the catalogue's file name under the meta directory.
const catalogFile = "catalog.json"

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
type Catalog struct {
	fs  vfs.FS
	dir string

	mu               sync.Mutex
	topics           map[string]*Topic
	byID             map[[16]byte]*Topic
	nextProducerID   int64
	producerIDBlockE int64 // exclusive end of the reserved block, persisted
	clusterID        string
}

// onDisk is the catalogue file's format.
type onDisk struct {
	Version            int           `json:"version"`
	Topics             []onDiskTopic `json:"topics"`
	ProducerIDBlockEnd int64         `json:"producer_id_block_end"`
	ClusterID          string        `json:"cluster_id"`
}

type onDiskTopic struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"` // 32 hex digits
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

// Open loads the catalogue from dir (DATA/meta), creating it when absent.
func Open(fs vfs.FS, dir string) (*Catalog, error) {
	c := &Catalog{
		fs:     fs,
		dir:    dir,
		topics: make(map[string]*Topic),
		byID:   make(map[[16]byte]*Topic),
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	path := filepath.Join(dir, catalogFile)
	if _, err := fs.Stat(path); errors.Is(err, os.ErrNotExist) {
		return c, c.initClusterID()
	} else if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	raw, err := readAll(fs, path)
	if err != nil {
		return nil, fmt.Errorf("meta: reading %s: %w", path, err)
	}
	var d onDisk
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("meta: %s is not a valid catalogue: %w", path, err)
	}
	if d.Version != 1 {
		return nil, fmt.Errorf("meta: %s has unknown version %d", path, d.Version)
	}
	for _, dt := range d.Topics {
		var id [16]byte
		b, err := hex.DecodeString(dt.ID)
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("meta: %s: topic %q has a bad id %q", path, dt.Name, dt.ID)
		}
		copy(id[:], b)
		t := &Topic{Name: dt.Name, ID: id, Partitions: dt.Partitions, Configs: dt.Configs}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		c.topics[t.Name] = t
		c.byID[id] = t
	}
	c.producerIDBlockE = d.ProducerIDBlockEnd
	c.nextProducerID = d.ProducerIDBlockEnd
	c.clusterID = d.ClusterID
	if c.clusterID == "" {
		return c, c.initClusterID()
	}
	return c, nil
}

// initClusterID gives a new data directory its cluster ID: 16 random bytes
// in unpadded URL-safe base64, like Kafka's.
func (c *Catalog) initClusterID() error {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clusterID = base64.RawURLEncoding.EncodeToString(id[:])
	return c.saveLocked()
}

// ClusterID is the data directory's cluster ID, fixed at creation.
func (c *Catalog) ClusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterID
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	fi, err := fs.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, fi.Size())
	n, err := f.ReadAt(buf, 0)
	if n == len(buf) {
		return buf, nil
	}
	return nil, err
}

// saveLocked writes the catalogue atomically.
func (c *Catalog) saveLocked() error {
	d := onDisk{Version: 1, ProducerIDBlockEnd: c.producerIDBlockE, ClusterID: c.clusterID, Topics: []onDiskTopic{}}
	for _, t := range c.sortedLocked() {
		d.Topics = append(d.Topics, onDiskTopic{Name: t.Name, ID: hex.EncodeToString(t.ID[:]), Partitions: t.Partitions, Configs: t.Configs})
	}
	raw, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, catalogFile)
	tmp := path + ".tmp"
	f, err := c.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return fmt.Errorf("meta: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("meta: syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	if err := c.fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	if err := c.fs.SyncDir(c.dir); err != nil {
		return fmt.Errorf("meta: syncing %s: %w", c.dir, err)
	}
	return nil
}

func (c *Catalog) sortedLocked() []*Topic {
	ts := make([]*Topic, 0, len(c.topics))
	for _, t := range c.topics {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
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
	t, ok := c.topics[name]
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// TopicByID returns the topic with the given ID.
func (c *Catalog) TopicByID(id [16]byte) (Topic, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byID[id]
	if !ok {
		return Topic{}, false
	}
	return t.clone(), true
}

// Topics returns all topics sorted by name.
func (c *Catalog) Topics() []Topic {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Topic
	for _, t := range c.sortedLocked() {
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
	if partitions < 1 {
		return fmt.Errorf("%w: %d, must be at least 1", ErrBadPartitions, partitions)
	}
	if err := ValidateConfigs(configs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.topics[name]; ok {
		return fmt.Errorf("%w: %s", ErrTopicExists, name)
	}
	return nil
}

// CreateTopic adds a topic with a fresh random ID.
func (c *Catalog) CreateTopic(name string, partitions int32, configs map[string]string) (Topic, error) {
	if err := c.CheckCreate(name, partitions, configs); err != nil {
		return Topic{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.topics[name]; ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, name)
	}
	var id [16]byte
	for {
		if _, err := rand.Read(id[:]); err != nil {
			return Topic{}, err
		}
		if _, dup := c.byID[id]; !dup && id != [16]byte{} {
			break
		}
	}
	t := &Topic{Name: name, ID: id, Partitions: partitions, Configs: maps.Clone(configs)}
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	c.topics[name] = t
	c.byID[id] = t
	if err := c.saveLocked(); err != nil {
		delete(c.topics, name)
		delete(c.byID, id)
		return Topic{}, err
	}
	return t.clone(), nil
}

// DeleteTopic removes a topic from the catalogue.
func (c *Catalog) DeleteTopic(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	delete(c.topics, name)
	delete(c.byID, t.ID)
	if err := c.saveLocked(); err != nil {
		c.topics[name] = t
		c.byID[t.ID] = t
		return err
	}
	return nil
}

// CheckPartitions reports whether SetPartitions(name, n) would succeed.
func (c *Catalog) CheckPartitions(name string, n int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	if n <= t.Partitions {
		return fmt.Errorf("%w: topic %s has %d partitions; the count can only grow", ErrBadPartitions, name, t.Partitions)
	}
	return nil
}

// SetPartitions grows a topic to n partitions.
func (c *Catalog) SetPartitions(name string, n int32) error {
	if err := c.CheckPartitions(name, n); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	old := t.Partitions
	t.Partitions = n
	if err := c.saveLocked(); err != nil {
		t.Partitions = old
		return err
	}
	return nil
}

// SetConfigs replaces a topic's config overrides. The caller validates them.
func (c *Catalog) SetConfigs(name string, configs map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.topics[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	old := t.Configs
	t.Configs = maps.Clone(configs)
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	if err := c.saveLocked(); err != nil {
		t.Configs = old
		return err
	}
	return nil
}

// NextProducerID hands out a producer ID never handed out before, by this
// process or an earlier one on the same data directory.
func (c *Catalog) NextProducerID() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nextProducerID >= c.producerIDBlockE {
		old := c.producerIDBlockE
		c.producerIDBlockE = c.nextProducerID + producerIDBlock
		if err := c.saveLocked(); err != nil {
			c.producerIDBlockE = old
			return -1, err
		}
	}
	id := c.nextProducerID
	c.nextProducerID++
	return id, nil
}
