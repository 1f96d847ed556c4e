package batch

import "encoding/binary"

// The broker patches a validated batch in place before it is written: the
// base offset and the partition leader epoch lie before the CRC's range, so
// patching them keeps the CRC valid; the LogAppendTime patch changes covered
// bytes and recomputes the CRC. Each function expects b to be exactly one
// batch that passed Validate, and panics if b is shorter than the header.

// SetBaseOffset stores off as the batch's baseOffset. The CRC does not cover
// it.
func SetBaseOffset(b []byte, off int64) {
	binary.BigEndian.PutUint64(b[OffsetBaseOffset:OffsetBaseOffset+8], uint64(off))
}

// SetPartitionLeaderEpoch stores the leader epoch the batch was appended
// under. The CRC does not cover it.
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[OffsetPartitionLeaderEpoch:OffsetPartitionLeaderEpoch+4], uint32(epoch))
}

// SetLogAppendTime marks the batch's timestamps as the broker's append time
// ts (ms since the epoch), for topics with message.timestamp.type
// LogAppendTime: it sets the timestamp-type attribute bit and maxTimestamp,
// which is then every record's timestamp, as Kafka does; baseTimestamp and
// the records keep the producer's values. It recomputes the CRC.
func SetLogAppendTime(b []byte, ts int64) {
	_ = b[HeaderSize-1]
	attributes := binary.BigEndian.Uint16(b[OffsetAttributes:])
	binary.BigEndian.PutUint16(b[OffsetAttributes:], attributes|uint16(AttrLogAppendTime))
	binary.BigEndian.PutUint64(b[OffsetMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(b[OffsetCRC:], CRC(b))
}
