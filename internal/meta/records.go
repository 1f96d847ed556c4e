package meta

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/sasl"
)

// The metadata log is a sequence of typed, versioned change records (in
// the manner of KRaft's __cluster_metadata) applied in order by apply, a
// pure function of the state and the record: replaying the same records
// from the same snapshot always gives the same catalogue. A record is
// stored as a Kafka record (internal/plog/batch) whose key is the record's
// type and version (two big-endian uint16s) and whose value is the record's
// body in JSON. See docs/format.md, "The topic catalogue".

// recordType is the first half of a metadata record's key.
type recordType uint16

const (
	typeTopic       recordType = 1 // a topic created (TopicRecord)
	typePartitions  recordType = 2 // partitions added (PartitionsRecord)
	typeConfigs     recordType = 3 // config overrides replaced (ConfigsRecord)
	typeRemoveTopic recordType = 4 // a topic deleted (RemoveTopicRecord)
	typeProducerIDs recordType = 5 // a producer-id block allocated (ProducerIDsRecord)
	// 6, 7: SCRAM credentials; 8, 9: ACLs; 10: client quotas (quotas.go).
)

// recordVersion is the body version every record type is written with;
// apply refuses versions it does not know, so a newer broker's log is
// never misread.
const recordVersion = 0

// record is one metadata change.
type record interface{ recordType() recordType }

// TopicRecord creates a topic.
type TopicRecord struct {
	Name       string            `json:"name"`
	ID         topicID           `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

// PartitionsRecord grows a topic to Partitions partitions.
type PartitionsRecord struct {
	ID         topicID `json:"id"`
	Partitions int32   `json:"partitions"`
}

// ConfigsRecord replaces a topic's config overrides.
type ConfigsRecord struct {
	ID      topicID           `json:"id"`
	Configs map[string]string `json:"configs,omitempty"`
}

// RemoveTopicRecord deletes a topic.
type RemoveTopicRecord struct {
	ID topicID `json:"id"`
}

// ProducerIDsRecord reserves the producer ids below BlockEnd: after a
// restart, ids are handed out from BlockEnd on.
type ProducerIDsRecord struct {
	BlockEnd int64 `json:"block_end"`
}

func (TopicRecord) recordType() recordType       { return typeTopic }
func (PartitionsRecord) recordType() recordType  { return typePartitions }
func (ConfigsRecord) recordType() recordType     { return typeConfigs }
func (RemoveTopicRecord) recordType() recordType { return typeRemoveTopic }
func (ProducerIDsRecord) recordType() recordType { return typeProducerIDs }

// topicID is a topic ID written as 32 hex digits.
type topicID [16]byte

func (id topicID) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(id[:])), nil }

func (id *topicID) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(id) {
		return fmt.Errorf("topic id %q is not 32 hex digits", b)
	}
	_, err := hex.Decode(id[:], b)
	return err
}

// encodeRecord returns a record's key and value.
func encodeRecord(r record) (key, value []byte) {
	key = binary.BigEndian.AppendUint16(nil, uint16(r.recordType()))
	key = binary.BigEndian.AppendUint16(key, recordVersion)
	value, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("meta: encoding %T: %v", r, err)) // plain structs: cannot fail
	}
	return key, value
}

// decodeRecord parses a record's key and value.
func decodeRecord(key, value []byte) (record, error) {
	if len(key) != 4 {
		return nil, fmt.Errorf("record key of %d bytes, want 4", len(key))
	}
	typ, version := recordType(binary.BigEndian.Uint16(key)), binary.BigEndian.Uint16(key[2:])
	if version != recordVersion {
		return nil, fmt.Errorf("record type %d has version %d, this broker reads version %d", typ, version, recordVersion)
	}
	var r record
	switch typ {
	case typeTopic:
		r = &TopicRecord{}
	case typePartitions:
		r = &PartitionsRecord{}
	case typeConfigs:
		r = &ConfigsRecord{}
	case typeRemoveTopic:
		r = &RemoveTopicRecord{}
	case typeProducerIDs:
		r = &ProducerIDsRecord{}
	case typeACL:
		r = &AccessControlEntryRecord{}
	case typeRemoveACL:
		r = &RemoveAccessControlEntryRecord{}
	case typeClientQuota:
		r = &ClientQuotaRecord{}
	default:
		if r = decodeScramRecord(typ); r == nil { // scram.go
			if r = decodeClusterRecord(typ); r == nil { // cluster.go
				return nil, fmt.Errorf("unknown record type %d", typ)
			}
		}
	}
	if err := json.Unmarshal(value, r); err != nil {
		return nil, fmt.Errorf("record type %d: %w", typ, err)
	}
	return r, nil
}

// state is the catalogue as the records build it.
type state struct {
	topics map[string]*Topic
	byID   map[[16]byte]*Topic
	// partitions is the sum of every topic's partition count (the broker's
	// --max-partitions bound).
	partitions         int64
	producerIDBlockEnd int64
	clusterID          string
	acls               map[topicID]acl.Binding // by record ID (acls.go)
	// quotas are the client quotas by entity key (quotas.go).
	quotas map[string]*ClientQuota
	// scram holds the users' SCRAM credentials (scram.go).
	scram map[scramKey]sasl.Credential
	// brokers and replicas are the cluster's (cluster.go): the registered
	// brokers, and each topic's replicas by partition (nil: unassigned).
	// Both stay empty in the single-node catalogue.
	brokers  map[int32]Broker
	replicas map[topicID][][]int32
}

func newState() *state {
	return &state{topics: map[string]*Topic{}, byID: map[[16]byte]*Topic{}}
}

// errBadRecord marks a record that does not apply to the state: in a log
// being replayed it is corruption; from a live change it is a bug (changes
// are validated first).
var errBadRecord = errors.New("metadata record does not apply")

// apply changes s by r. It is deterministic and does no I/O; on error s is
// unchanged.
func (s *state) apply(r record) error {
	switch r := r.(type) {
	case *TopicRecord:
		if _, ok := s.topics[r.Name]; ok {
			return fmt.Errorf("%w: %w: topic %q created twice", errBadRecord, ErrTopicExists, r.Name)
		}
		if _, ok := s.byID[r.ID]; ok || r.ID == (topicID{}) || r.Partitions < 1 {
			return fmt.Errorf("%w: topic %q with id %x and %d partitions", errBadRecord, r.Name, r.ID[:], r.Partitions)
		}
		t := &Topic{Name: r.Name, ID: r.ID, Partitions: r.Partitions, Configs: maps.Clone(r.Configs)}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		s.topics[t.Name] = t
		s.byID[t.ID] = t
		s.partitions += int64(t.Partitions)
	case *PartitionsRecord:
		t, ok := s.byID[r.ID]
		if !ok || r.Partitions <= t.Partitions {
			return fmt.Errorf("%w: partitions %d for topic id %x", errBadRecord, r.Partitions, r.ID[:])
		}
		s.partitions += int64(r.Partitions - t.Partitions)
		t.Partitions = r.Partitions
	case *ConfigsRecord:
		t, ok := s.byID[r.ID]
		if !ok {
			return fmt.Errorf("%w: configs for unknown topic id %x", errBadRecord, r.ID[:])
		}
		t.Configs = maps.Clone(r.Configs)
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
	case *RemoveTopicRecord:
		t, ok := s.byID[r.ID]
		if !ok {
			return fmt.Errorf("%w: removal of unknown topic id %x", errBadRecord, r.ID[:])
		}
		delete(s.topics, t.Name)
		delete(s.byID, t.ID)
		delete(s.replicas, t.ID)
		s.partitions -= int64(t.Partitions)
	case *ProducerIDsRecord:
		if r.BlockEnd < s.producerIDBlockEnd {
			return fmt.Errorf("%w: producer id block end %d below %d", errBadRecord, r.BlockEnd, s.producerIDBlockEnd)
		}
		s.producerIDBlockEnd = r.BlockEnd
	case *AccessControlEntryRecord, *RemoveAccessControlEntryRecord:
		return s.applyACL(r)
	case *ClientQuotaRecord:
		return s.applyQuota(r)
	default:
		if ok, err := s.applyScram(r); ok { // scram.go
			return err
		}
		if ok, err := s.applyCluster(r); ok { // cluster.go
			return err
		}
		return fmt.Errorf("%w: %T", errBadRecord, r)
	}
	return nil
}

func sortTopicRecords(ts []TopicRecord) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
}
