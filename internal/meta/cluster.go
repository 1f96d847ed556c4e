package meta

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// The cluster's records (issue 14 step 4, docs/replication.md section 4):
// which brokers exist, whether they are fenced, and which brokers hold each
// partition. They are KRaft's RegisterBrokerRecord, FenceBrokerRecord,
// UnfenceBrokerRecord and the replicas of its PartitionRecord, written by
// the controller (internal/controller) into the replicated metadata log. The
// single-node catalogue never writes them: its snapshots and log are byte
// for byte what they were.
const (
	typeRegisterBroker      recordType = 11 // a broker registered (RegisterBrokerRecord)
	typeFenceBroker         recordType = 12 // a broker fenced (FenceBrokerRecord)
	typeUnfenceBroker       recordType = 13 // a broker unfenced (UnfenceBrokerRecord)
	typePartitionAssignment recordType = 14 // a partition's replicas (PartitionAssignmentRecord)
)

// Errors of the cluster's controller, with the Kafka codes api/errors.go
// maps them to.
var (
	ErrNotController = errors.New("this node is not the active controller") // NOT_CONTROLLER
	// ErrInvalidReplicationFactor: a replication factor below 1 or above
	// the brokers that are registered and not fenced.
	ErrInvalidReplicationFactor = errors.New("invalid replication factor") // INVALID_REPLICATION_FACTOR
	ErrBrokerNotRegistered      = errors.New("broker not registered")      // BROKER_ID_NOT_REGISTERED
	// ErrStaleBrokerEpoch: a heartbeat of an earlier incarnation of a
	// broker that has registered again since.
	ErrStaleBrokerEpoch = errors.New("stale broker incarnation") // STALE_BROKER_EPOCH
)

// BrokerEndpoint is one of a broker's listeners, as Metadata advertises it.
type BrokerEndpoint struct {
	Name             string `json:"name"`
	Host             string `json:"host"`
	Port             int32  `json:"port"`
	SecurityProtocol string `json:"security_protocol"`
}

// RegisterBrokerRecord registers a broker, or registers it again after a
// restart (a new Incarnation). A registered broker starts fenced: it holds
// no leadership and gets no new replicas until the controller has heard
// its heartbeat (UnfenceBrokerRecord).
type RegisterBrokerRecord struct {
	ID int32 `json:"id"`
	// Incarnation is new at every start of the broker's process (KRaft's
	// incarnation id): a heartbeat from an older one is stale.
	Incarnation string           `json:"incarnation"`
	Listeners   []BrokerEndpoint `json:"listeners,omitempty"`
	Rack        string           `json:"rack,omitempty"`
}

// FenceBrokerRecord fences a broker's incarnation: its session timed out.
type FenceBrokerRecord struct {
	ID          int32  `json:"id"`
	Incarnation string `json:"incarnation"`
}

// UnfenceBrokerRecord unfences a broker's incarnation: it heartbeats again.
type UnfenceBrokerRecord struct {
	ID          int32  `json:"id"`
	Incarnation string `json:"incarnation"`
}

// PartitionAssignmentRecord names the brokers holding one partition, the
// first the preferred leader.
type PartitionAssignmentRecord struct {
	TopicID   topicID `json:"topic_id"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
}

func (RegisterBrokerRecord) recordType() recordType      { return typeRegisterBroker }
func (FenceBrokerRecord) recordType() recordType         { return typeFenceBroker }
func (UnfenceBrokerRecord) recordType() recordType       { return typeUnfenceBroker }
func (PartitionAssignmentRecord) recordType() recordType { return typePartitionAssignment }

// decodeClusterRecord returns an empty record of a cluster type, or nil.
func decodeClusterRecord(typ recordType) record {
	switch typ {
	case typeRegisterBroker:
		return &RegisterBrokerRecord{}
	case typeFenceBroker:
		return &FenceBrokerRecord{}
	case typeUnfenceBroker:
		return &UnfenceBrokerRecord{}
	case typePartitionAssignment:
		return &PartitionAssignmentRecord{}
	}
	return nil
}

// Broker is a registered broker as the records leave it.
type Broker struct {
	ID          int32
	Incarnation string
	Listeners   []BrokerEndpoint
	Rack        string
	Fenced      bool
}

func (b Broker) clone() Broker {
	b.Listeners = slices.Clone(b.Listeners)
	return b
}

// applyCluster applies the cluster's records; ok is false for other types.
func (s *state) applyCluster(r record) (ok bool, err error) {
	switch r := r.(type) {
	case *RegisterBrokerRecord:
		if r.ID < 0 || r.Incarnation == "" {
			return true, fmt.Errorf("%w: broker %d registered with incarnation %q", errBadRecord, r.ID, r.Incarnation)
		}
		if s.brokers == nil {
			s.brokers = map[int32]Broker{}
		}
		s.brokers[r.ID] = Broker{ID: r.ID, Incarnation: r.Incarnation, Listeners: slices.Clone(r.Listeners), Rack: r.Rack, Fenced: true}
	case *FenceBrokerRecord:
		return true, s.setFenced(r.ID, r.Incarnation, true)
	case *UnfenceBrokerRecord:
		return true, s.setFenced(r.ID, r.Incarnation, false)
	case *PartitionAssignmentRecord:
		t, ok := s.byID[r.TopicID]
		if !ok || r.Partition < 0 || r.Partition >= t.Partitions || len(r.Replicas) == 0 {
			return true, fmt.Errorf("%w: replicas %v of partition %d of topic id %x", errBadRecord, r.Replicas, r.Partition, r.TopicID[:])
		}
		for i, id := range r.Replicas {
			if _, ok := s.brokers[id]; !ok || slices.Contains(r.Replicas[:i], id) {
				return true, fmt.Errorf("%w: replicas %v of partition %d of topic %q: broker %d unknown or named twice",
					errBadRecord, r.Replicas, r.Partition, t.Name, id)
			}
		}
		if s.replicas == nil {
			s.replicas = map[topicID][][]int32{}
		}
		parts := s.replicas[r.TopicID]
		if missing := int(t.Partitions) - len(parts); missing > 0 {
			parts = append(parts, make([][]int32, missing)...)
		}
		parts[r.Partition] = slices.Clone(r.Replicas)
		s.replicas[r.TopicID] = parts
	default:
		return false, nil
	}
	return true, nil
}

func (s *state) setFenced(id int32, incarnation string, fenced bool) error {
	b, ok := s.brokers[id]
	if !ok || b.Incarnation != incarnation {
		return fmt.Errorf("%w: broker %d incarnation %q (registered: %q) fenced=%v", errBadRecord, id, incarnation, b.Incarnation, fenced)
	}
	b.Fenced = fenced
	s.brokers[id] = b
	return nil
}

// applyAll applies records that take effect together (one raft entry, one
// batch): all of them or none. A topic's creation (its TopicRecord, then
// the assignments of its partitions) is undone by removing the topic, which
// did not exist before; anything else is applied to a copy of the state. It
// returns the state to keep.
func (s *state) applyAll(rs []record) (*state, error) {
	if len(rs) == 1 {
		return s, s.apply(rs[0])
	}
	if t, ok := rs[0].(*TopicRecord); ok && assignmentsOf(t.ID, rs[1:]) {
		if err := s.apply(t); err != nil {
			return s, err
		}
		for _, r := range rs[1:] {
			if err := s.apply(r); err != nil {
				if uerr := s.apply(&RemoveTopicRecord{ID: t.ID}); uerr != nil {
					panic(fmt.Sprintf("meta: undoing the creation of %q: %v", t.Name, uerr)) // it was just created
				}
				return s, err
			}
		}
		return s, nil
	}
	cp := s.copyTopics()
	for _, r := range rs {
		if err := cp.apply(r); err != nil {
			return s, err
		}
	}
	return cp, nil
}

// assignmentsOf reports whether rs are all assignments of the topic id.
func assignmentsOf(id topicID, rs []record) bool {
	for _, r := range rs {
		if a, ok := r.(*PartitionAssignmentRecord); !ok || a.TopicID != id {
			return false
		}
	}
	return true
}

// brokerSnapshot is a broker in a snapshot: its registration and whether
// it is fenced.
type brokerSnapshot struct {
	RegisterBrokerRecord
	Fenced bool `json:"fenced,omitempty"`
}

// clusterSnapshot returns the brokers and assignments in a snapshot's
// order (sorted: the same state gives the same bytes); both are empty for
// the single-node catalogue.
func (s *state) clusterSnapshot() ([]brokerSnapshot, []PartitionAssignmentRecord) {
	var brokers []brokerSnapshot
	for _, b := range s.brokers {
		brokers = append(brokers, brokerSnapshot{RegisterBrokerRecord: RegisterBrokerRecord{ID: b.ID,
			Incarnation: b.Incarnation, Listeners: b.Listeners, Rack: b.Rack}, Fenced: b.Fenced})
	}
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].ID < brokers[j].ID })
	var assignments []PartitionAssignmentRecord
	for id, parts := range s.replicas {
		for p, replicas := range parts {
			if replicas != nil {
				assignments = append(assignments, PartitionAssignmentRecord{TopicID: id, Partition: int32(p), Replicas: replicas})
			}
		}
	}
	sort.Slice(assignments, func(i, j int) bool {
		a, b := assignments[i], assignments[j]
		if a.TopicID != b.TopicID {
			return string(a.TopicID[:]) < string(b.TopicID[:])
		}
		return a.Partition < b.Partition
	})
	return brokers, assignments
}

// loadBrokers applies a snapshot's brokers (before the topics'
// assignments, which name them).
func (s *state) loadBrokers(brokers []brokerSnapshot) error {
	for i := range brokers {
		b := &brokers[i]
		if err := s.apply(&b.RegisterBrokerRecord); err != nil {
			return err
		}
		if !b.Fenced {
			if err := s.apply(&UnfenceBrokerRecord{ID: b.ID, Incarnation: b.Incarnation}); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyCluster copies the cluster's maps into out (copyTopics).
func (s *state) copyCluster(out *state) {
	out.brokers = maps.Clone(s.brokers) // brokers are replaced, never mutated
	if s.replicas != nil {
		out.replicas = make(map[topicID][][]int32, len(s.replicas))
		for id, parts := range s.replicas {
			out.replicas[id] = slices.Clone(parts) // a partition's replicas are replaced, never mutated
		}
	}
}
