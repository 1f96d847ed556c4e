package plog

// SnapshotDataForTest is the data of a raft log's snapshot whose first
// entry kept is firstIndex, at offset 0, with no producer (for the tests
// of package plog_test).
func SnapshotDataForTest(firstIndex uint64) []byte {
	empty := newProducerTable()
	return encodeRaftSnapshotData(raftSnapshotData{firstIndex: firstIndex, producers: encodeProducerTable(&empty)})
}
