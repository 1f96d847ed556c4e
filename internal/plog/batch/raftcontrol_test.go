package batch

import (
	"bytes"
	"testing"
)

func TestRaftControlRoundTrip(t *testing.T) {
	lc := BuildLeaderChange(-1, -1)
	h, err := ParseHeader(lc)
	if err != nil || !h.Control() || h.Transactional() || h.ProducerID != -1 || h.NumRecords != 1 || CRC(lc) != h.CRC {
		t.Fatalf("leader change header %+v, %v", h, err)
	}
	if kind, _, data, err := ParseRaftControl(lc); err != nil || kind != ControlLeaderChange || data != nil {
		t.Fatalf("leader change parsed as %d %x %v", kind, data, err)
	}
	payload := []byte("etcd conf change")
	kv := BuildKRaftVoters(2, payload, -1)
	kind, entryType, data, err := ParseRaftControl(kv)
	if err != nil || kind != ControlKRaftVoters || entryType != 2 || !bytes.Equal(data, payload) {
		t.Fatalf("KRaftVoters parsed as %d %d %q %v", kind, entryType, data, err)
	}
	// An empty change still carries its entry type.
	if _, entryType, data, err := ParseRaftControl(BuildKRaftVoters(1, nil, -1)); err != nil || entryType != 1 || len(data) != 0 {
		t.Fatalf("empty KRaftVoters: %d %q %v", entryType, data, err)
	}
	// A transaction marker is not a raft entry; a damaged batch is refused.
	if _, _, _, err := ParseRaftControl(BuildControl(7, 0, true, 0, 0)); err == nil {
		t.Fatal("a commit marker parsed as a raft control batch")
	}
	kv[len(kv)-3] ^= 1
	if _, _, _, err := ParseRaftControl(kv); err == nil {
		t.Fatal("a damaged KRaftVoters batch parsed")
	}
}
