package raftnode

import "testing"

// appliedIndexForTest is what a state machine over this storage applied
// before a stop, for the restart test: the committed index (the test's
// Apply applied everything committed before the node stopped).
func (s *MemStorage) appliedIndexForTest(t *testing.T) uint64 {
	t.Helper()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	return hs.GetCommit()
}
