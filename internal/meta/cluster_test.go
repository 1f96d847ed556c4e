package meta

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/vfs"
)

func clusterRecords() []Record {
	id := topicID{1, 2, 3}
	return []Record{
		&RegisterBrokerRecord{ID: 0, Incarnation: "aa", Rack: "r1",
			Listeners: []BrokerEndpoint{{Name: "PLAINTEXT", Host: "h0", Port: 9092, SecurityProtocol: "PLAINTEXT"}}},
		&RegisterBrokerRecord{ID: 1, Incarnation: "bb"},
		&UnfenceBrokerRecord{ID: 0, Incarnation: "aa"},
		&TopicRecord{Name: "t", ID: id, Partitions: 2},
		&PartitionAssignmentRecord{TopicID: id, Partition: 0, Replicas: []int32{0, 1}},
		&PartitionAssignmentRecord{TopicID: id, Partition: 1, Replicas: []int32{1, 0}},
		&FenceBrokerRecord{ID: 1, Incarnation: "bb"},
	}
}

// TestClusterRecordsRoundTrip: the cluster's records encode, decode and
// apply; a snapshot of the state they build loads to the same state.
func TestClusterRecordsRoundTrip(t *testing.T) {
	m := NewMachine()
	for _, r := range clusterRecords() {
		rs, err := DecodeEntry(EncodeEntry(7, r))
		if err != nil || len(rs) != 1 || !reflect.DeepEqual(rs[0], r) {
			t.Fatalf("%T: decoded %+v, %v", r, rs, err)
		}
		if err := m.Apply(1, rs); err != nil {
			t.Fatalf("%T: %v", r, err)
		}
	}
	want := []Broker{
		{ID: 0, Incarnation: "aa", Rack: "r1", Listeners: []BrokerEndpoint{{Name: "PLAINTEXT", Host: "h0", Port: 9092, SecurityProtocol: "PLAINTEXT"}}},
		{ID: 1, Incarnation: "bb", Fenced: true},
	}
	if got := m.Brokers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("brokers %+v, want %+v", got, want)
	}
	if got := m.Replicas(topicID{1, 2, 3}); !reflect.DeepEqual(got, [][]int32{{0, 1}, {1, 0}}) {
		t.Fatalf("replicas %v", got)
	}

	fs := vfs.NewMem()
	if err := fs.MkdirAll("meta", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSnapshot(fs, "meta", m.st, 7); err != nil {
		t.Fatal(err)
	}
	st, next, err := loadSnapshot(fs, "meta/"+snapshotFile, snapshotVersion)
	if err != nil || next != 7 {
		t.Fatalf("loading the snapshot: %v (next %d)", err, next)
	}
	if !reflect.DeepEqual(st.brokers, m.st.brokers) || !reflect.DeepEqual(st.replicas, m.st.replicas) {
		t.Fatalf("snapshot loaded brokers %+v replicas %v, want %+v %v", st.brokers, st.replicas, m.st.brokers, m.st.replicas)
	}
}

// TestSingleNodeSnapshotUnchanged: a catalogue without cluster records
// writes no cluster fields (the single-node format is as it was).
func TestSingleNodeSnapshotUnchanged(t *testing.T) {
	fs := vfs.NewMem()
	c, err := Open(fs, "meta")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic("t", 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSnapshot(fs, "meta", c.st, c.nextOffset); err != nil {
		t.Fatal(err)
	}
	raw, err := vfs.ReadFile(fs, "meta/"+snapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"brokers", "assignments"} {
		if _, ok := doc[k]; ok {
			t.Fatalf("single-node snapshot has %q: %s", k, raw)
		}
	}
}

// TestApplyEntryAllOrNothing: an entry whose later record does not apply
// changes nothing: a topic's creation with an assignment naming an unknown
// broker leaves no topic, and a TopicRecord for a name that exists is
// refused as TOPIC_ALREADY_EXISTS.
func TestApplyEntryAllOrNothing(t *testing.T) {
	m := NewMachine()
	if err := m.Apply(1, clusterRecords()[:2]); err != nil {
		t.Fatal(err)
	}
	id := topicID{9}
	bad := []Record{
		&TopicRecord{Name: "half", ID: id, Partitions: 2},
		&PartitionAssignmentRecord{TopicID: id, Partition: 0, Replicas: []int32{0}},
		&PartitionAssignmentRecord{TopicID: id, Partition: 1, Replicas: []int32{5}},
	}
	if err := m.Apply(1, bad); !errors.Is(err, errBadRecord) {
		t.Fatalf("creation with an unknown broker: %v", err)
	}
	if _, ok := m.Topic("half"); ok || m.Replicas(id) != nil || m.st.partitions != 0 {
		t.Fatalf("a refused creation left topic %v, replicas %v, %d partitions", ok, m.Replicas(id), m.st.partitions)
	}
	// Other records together apply to a copy: a refused one leaves the
	// first unapplied too.
	mixed := []Record{&UnfenceBrokerRecord{ID: 0, Incarnation: "aa"}, &FenceBrokerRecord{ID: 0, Incarnation: "zz"}}
	if err := m.Apply(1, mixed); err == nil {
		t.Fatal("a fence of an unknown incarnation applied")
	}
	if b, _ := m.Broker(0); !b.Fenced {
		t.Fatal("a refused entry's first record stayed applied")
	}
	good := []Record{&TopicRecord{Name: "t", ID: topicID{8}, Partitions: 1}}
	if err := m.Apply(1, good); err != nil {
		t.Fatal(err)
	}
	err := m.Apply(1, []Record{&TopicRecord{Name: "t", ID: topicID{7}, Partitions: 1}})
	if !errors.Is(err, ErrTopicExists) || !strings.Contains(err.Error(), "created twice") {
		t.Fatalf("a second creation of t: %v, want TOPIC_ALREADY_EXISTS", err)
	}
}
