package meta

import (
	"crypto/rand"
	"fmt"
	"slices"
	"sync"

	"github.com/sushka-io/sushka/internal/plog/batch"
)

// Record is one metadata change record: TopicRecord, PartitionsRecord, …,
// RegisterBrokerRecord, PartitionAssignmentRecord (the types of this
// package; the set is closed).
type Record = record

// EncodeEntry returns records that take effect together as one batch, the
// form of the metadata log on disk (records.go) and of one entry of the
// replicated metadata log (internal/controller): its base offset is 0 (the
// log's position gives a replicated record its place), every record is
// stamped timestampMs.
func EncodeEntry(timestampMs int64, rs ...Record) []byte {
	kvs := make([]batch.KeyValue, 0, len(rs))
	for _, r := range rs {
		key, value := encodeRecord(r)
		kvs = append(kvs, batch.KeyValue{Key: key, Value: value})
	}
	return batch.BuildRecords(kvs, 0, timestampMs)
}

// DecodeEntry parses an entry EncodeEntry made; a batch that does not check
// or a record this broker does not know is an error.
func DecodeEntry(b []byte) ([]Record, error) {
	var rs []Record
	err := batch.ForEachKeyValue(b, func(_ int32, key, value []byte) error {
		r, err := decodeRecord(key, value)
		if err != nil {
			return err
		}
		rs = append(rs, r)
		return nil
	})
	return rs, err
}

// Machine is the catalogue's state machine without its storage: what each
// replica of the metadata quorum applies, entry after entry, in the order
// raft commits them (internal/controller). Apply is the same pure apply as
// the single-node Catalog's, so the same records give the same state on
// every replica, and a record that does not apply is refused by every
// replica alike (it changes nothing anywhere).
//
// Safe for concurrent use: Apply (one goroutine, the raft group's worker)
// takes mu, readers take it shared; readers get copies.
type Machine struct {
	mu sync.RWMutex
	st *state
	// applied is the index of the last entry applied (or skipped): it
	// moves with the state, under the same lock, so a reader never sees a
	// change ahead of its index.
	applied uint64
}

// NewMachine returns an empty state machine.
func NewMachine() *Machine { return &Machine{st: newState()} }

// Apply applies the records of the entry at index, all of them or none;
// the machine has applied index either way.
func (m *Machine) Apply(index uint64, rs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := m.st.applyAll(rs)
	m.st = st
	m.applied = max(m.applied, index)
	return err
}

// Skip records that the entry at index holds no records (a raft leader's
// empty entry, a configuration change, an entry that does not decode).
func (m *Machine) Skip(index uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = max(m.applied, index)
}

// Applied is the index of the last entry applied.
func (m *Machine) Applied() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied
}

// Topic returns the named topic.
func (m *Machine) Topic(name string) (Topic, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.topic(name)
}

// TopicByID returns the topic with the id.
func (m *Machine) TopicByID(id [16]byte) (Topic, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.st.byID[id]
	if !ok {
		return Topic{}, false
	}
	return m.st.topic(t.Name)
}

// Topics returns every topic, sorted by name.
func (m *Machine) Topics() []Topic {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.topicCopies()
}

// Replicas returns a topic's replicas by partition (nil for a partition
// without an assignment).
func (m *Machine) Replicas(id [16]byte) [][]int32 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.st.byID[id]
	if !ok {
		return nil
	}
	parts := m.st.replicas[id]
	out := make([][]int32, t.Partitions)
	for p := range out {
		if p < len(parts) {
			out[p] = slices.Clone(parts[p])
		}
	}
	return out
}

// Broker returns a registered broker.
func (m *Machine) Broker(id int32) (Broker, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.st.brokers[id]
	return b.clone(), ok
}

// Brokers returns the registered brokers sorted by id.
func (m *Machine) Brokers() []Broker {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Broker, 0, len(m.st.brokers))
	for _, b := range m.st.brokers {
		out = append(out, b.clone())
	}
	slices.SortFunc(out, func(a, b Broker) int { return int(a.ID) - int(b.ID) })
	return out
}

// NewTopicID returns a random topic id that no topic of the machine has.
func (m *Machine) NewTopicID() ([16]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.newTopicID()
}

// newTopicID returns a random topic id that no topic has (and not all
// zeros).
func (s *state) newTopicID() ([16]byte, error) {
	for {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			return id, fmt.Errorf("meta: topic id: %w", err)
		}
		if _, dup := s.byID[id]; !dup && id != [16]byte{} {
			return id, nil
		}
	}
}
