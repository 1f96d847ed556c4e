package batch

import (
	"encoding/binary"
)

// Control records (KIP-98): a transaction ends in each of its partitions
// with a control batch (attributes transactional | control) of one record
// whose key is
//
//	version int16 (0) | type int16 (0 abort, 1 commit)
//
// and whose value is
//
//	version int16 (0) | coordinatorEpoch int32
//
// The batch carries the producer's id and epoch and no sequence (-1). Only
// the broker writes them; Validate refuses them from producers.
const (
	ControlAbort  int16 = 0
	ControlCommit int16 = 1
)

// BuildControl returns the control batch of a commit or abort marker of
// producerID at producerEpoch, stamped timestamp (ms since the epoch); the
// base offset is 0 until the log assigns it.
func BuildControl(producerID int64, producerEpoch int16, commit bool, coordinatorEpoch int32, timestamp int64) []byte {
	kind := ControlAbort
	if commit {
		kind = ControlCommit
	}
	var value [6]byte
	binary.BigEndian.PutUint32(value[2:], uint32(coordinatorEpoch))
	return frame(header{
		attributes:    AttrTransactional | AttrControl,
		records:       1,
		baseTimestamp: timestamp,
		maxTimestamp:  timestamp,
		producerID:    producerID,
		producerEpoch: producerEpoch,
		baseSequence:  -1,
	}, controlBody(kind, value[:]))
}

// controlBody is the records of a control batch: one uncompressed record
// whose key is version 0 and kind, and whose value is value.
func controlBody(kind int16, value []byte) []byte {
	var key [4]byte
	binary.BigEndian.PutUint16(key[2:], uint16(kind))
	rec := make([]byte, 0, 16+len(value))
	rec = append(rec, 0)              // record attributes: unused
	rec = binary.AppendVarint(rec, 0) // timestampDelta
	rec = binary.AppendVarint(rec, 0) // offsetDelta
	rec = appendNullableBytes(rec, key[:])
	rec = appendNullableBytes(rec, value)
	rec = binary.AppendVarint(rec, 0) // no headers
	body := binary.AppendVarint(make([]byte, 0, len(rec)+2), int64(len(rec)))
	return append(body, rec...)
}

// ParseControl reads the marker of the control batch b (whole, CRC
// checked): whether it commits, and the coordinator epoch. A control
// record it cannot read is KindInvalid.
func ParseControl(b []byte) (commit bool, coordinatorEpoch int32, err error) {
	seen := false
	err = ForEachKeyValue(b, func(_ int32, key, value []byte) error {
		if seen {
			return nil // Kafka: one control record per batch; the first decides
		}
		seen = true
		if len(key) < 4 {
			return errorf(KindInvalid, OffsetRecords, "control record key of %d bytes, want 4", len(key))
		}
		switch kind := int16(binary.BigEndian.Uint16(key[2:])); kind {
		case ControlCommit:
			commit = true
		case ControlAbort:
		default:
			return errorf(KindInvalid, OffsetRecords, "control record type %d is not a transaction marker", kind)
		}
		if len(value) >= 6 {
			coordinatorEpoch = int32(binary.BigEndian.Uint32(value[2:]))
		}
		return nil
	})
	if err == nil && !seen {
		err = errorf(KindInvalid, OffsetRecords, "control batch without a record")
	}
	return commit, coordinatorEpoch, err
}
