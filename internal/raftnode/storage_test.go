package raftnode

import "testing"

// appliedIndexForTest is what a state machine over storage s applied
// before a stop, for the restart test: the committed index (the test's
// Apply applied everything committed before the node stopped; a plog
// storage records its last commit index when closed).
func appliedIndexForTest(t testing.TB, s Storage) uint64 {
	t.Helper()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	return hs.GetCommit()
}
