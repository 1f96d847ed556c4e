package batch

import (
	"encoding/binary"
)

// Raft's entries that are not records (docs/replication.md section 1) are
// control batches as KRaft writes them in __cluster_metadata: attributes
// control only (not transactional), producer id, epoch and sequence -1, one
// record whose key is
//
//	version int16 (0) | type int16
//
// with the type and value of Kafka's ControlRecordType:
//
//	2 LEADER_CHANGE  LeaderChangeMessage v0 (flexible):
//	                 version int16 (0) | leaderId int32 | voters compact
//	                 array (empty) | grantingVoters compact array (empty) |
//	                 tagged fields (none)
//	6 KRAFT_VOTERS   VotersRecord v0 (flexible): version int16 (0) | voters
//	                 compact array (empty) | tagged fields: one, tag
//	                 RaftPayloadTag, holding etcd's entry type (1 byte:
//	                 1 EntryConfChange, 2 EntryConfChangeV2) and its
//	                 marshalled ConfChange / ConfChangeV2
//
// Raft's empty entry of a new leader is a LEADER_CHANGE record (the storage
// does not know the leader: leaderId -1); a configuration change is a
// KRAFT_VOTERS record carrying etcd's message in the tagged field, which
// Kafka's readers skip as an unknown tag. Every client skips control
// batches; each takes one offset, as a transaction marker does.
const (
	ControlLeaderChange int16 = 2
	ControlKRaftVoters  int16 = 6
	// ControlLogStart is Sushka's own: DeleteRecords on a replicated
	// partition, proposed by the leader so that every replica moves its
	// log start at the same entry. Its value: version int16 (0) |
	// logStartOffset int64. Far above any type Kafka uses (readers skip
	// control batches whatever their type).
	ControlLogStart int16 = 10000

	// RaftPayloadTag is the tagged field of a KRAFT_VOTERS value that holds
	// etcd's configuration change: far above any tag Kafka's schema uses.
	RaftPayloadTag = 10000
)

// BuildLeaderChange returns the control batch of raft's empty entry of a
// new leader, stamped timestamp (ms since the epoch); offset and leader
// epoch are 0 until the log assigns them.
func BuildLeaderChange(leaderID int32, timestamp int64) []byte {
	value := make([]byte, 0, 9)
	value = binary.BigEndian.AppendUint16(value, 0) // version
	value = binary.BigEndian.AppendUint32(value, uint32(leaderID))
	value = binary.AppendUvarint(value, 1) // voters: empty compact array
	value = binary.AppendUvarint(value, 1) // grantingVoters: empty
	value = binary.AppendUvarint(value, 0) // no tagged fields
	return buildRaftControl(ControlLeaderChange, value, timestamp)
}

// BuildKRaftVoters returns the control batch of a configuration change:
// etcd's entry type (entryType) and its marshalled change (data) in the
// VotersRecord's RaftPayloadTag field.
func BuildKRaftVoters(entryType byte, data []byte, timestamp int64) []byte {
	value := make([]byte, 0, 16+len(data))
	value = binary.BigEndian.AppendUint16(value, 0) // version
	value = binary.AppendUvarint(value, 1)          // voters: empty compact array
	value = binary.AppendUvarint(value, 1)          // one tagged field
	value = binary.AppendUvarint(value, RaftPayloadTag)
	value = binary.AppendUvarint(value, uint64(1+len(data)))
	value = append(value, entryType)
	value = append(value, data...)
	return buildRaftControl(ControlKRaftVoters, value, timestamp)
}

// BuildLogStart returns the control batch of a DeleteRecords on a raft
// log: the new log start offset.
func BuildLogStart(logStart, timestamp int64) []byte {
	value := make([]byte, 0, 10)
	value = binary.BigEndian.AppendUint16(value, 0) // version
	value = binary.BigEndian.AppendUint64(value, uint64(logStart))
	return buildRaftControl(ControlLogStart, value, timestamp)
}

func buildRaftControl(kind int16, value []byte, timestamp int64) []byte {
	return frame(header{
		attributes:    AttrControl,
		records:       1,
		baseTimestamp: timestamp,
		maxTimestamp:  timestamp,
		producerID:    -1,
		producerEpoch: -1,
		baseSequence:  -1,
	}, controlBody(kind, value))
}

// ParseRaftControl reads the control batch b (whole, CRC checked) written
// by BuildLeaderChange or BuildKRaftVoters: its control type, and for
// KRAFT_VOTERS etcd's entry type and change (aliasing b). Any other
// control type, or a KRAFT_VOTERS record without the tagged field, is
// KindInvalid.
func ParseRaftControl(b []byte) (kind int16, entryType byte, data []byte, err error) {
	seen := false
	err = ForEachKeyValue(b, func(_ int32, key, value []byte) error {
		if seen {
			return nil // one control record per batch; the first decides
		}
		seen = true
		if len(key) < 4 {
			return errorf(KindInvalid, OffsetRecords, "control record key of %d bytes, want 4", len(key))
		}
		switch kind = int16(binary.BigEndian.Uint16(key[2:])); kind {
		case ControlLeaderChange:
			return nil
		case ControlKRaftVoters:
			entryType, data, err = raftPayload(value)
			return err
		case ControlLogStart:
			if len(value) != 10 || binary.BigEndian.Uint16(value) != 0 {
				return errorf(KindInvalid, OffsetRecords, "LOG_START value of %d bytes", len(value))
			}
			data = value[2:]
			return nil
		default:
			return errorf(KindInvalid, OffsetRecords, "control record type %d is not a raft entry", kind)
		}
	})
	if err == nil && !seen {
		err = errorf(KindInvalid, OffsetRecords, "control batch without a record")
	}
	return kind, entryType, data, err
}

// raftPayload finds the RaftPayloadTag field of a VotersRecord v0 value
// whose voters array is empty (as BuildKRaftVoters writes it).
func raftPayload(value []byte) (byte, []byte, error) {
	bad := func(what string) (byte, []byte, error) {
		return 0, nil, errorf(KindInvalid, OffsetRecords, "KRaftVoters value: %s", what)
	}
	if len(value) < 2 {
		return bad("shorter than its version")
	}
	pos := 2
	voters, n := binary.Uvarint(value[pos:])
	if n <= 0 || voters != 1 {
		return bad("voters array is not empty")
	}
	pos += n
	tags, n := binary.Uvarint(value[pos:])
	if n <= 0 {
		return bad("tagged fields count")
	}
	pos += n
	for range tags {
		tag, n := binary.Uvarint(value[pos:])
		if n <= 0 {
			return bad("tag")
		}
		pos += n
		size, n := binary.Uvarint(value[pos:])
		if n <= 0 || size > uint64(len(value)-pos-n) {
			return bad("tagged field size")
		}
		pos += n
		if tag == RaftPayloadTag && size >= 1 {
			field := value[pos : pos+int(size) : pos+int(size)]
			return field[0], field[1:], nil
		}
		pos += int(size)
	}
	return bad("no raft payload field")
}
