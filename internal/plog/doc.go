// Package plog is Sushka's partition log: durable, segmented storage of Kafka
// record batches with group commit (design D2–D4, D8).
//
// # Directory
//
// A partition is a directory (the broker names it TOPIC-PARTITION, as Kafka
// does) holding:
//
//	00000000000000000000.log   segment files, named by the base offset of
//	00000000000000052311.log   their first batch in 20 decimal digits
//	log-start-offset           optional: the log start offset in decimal,
//	                           written by DeleteRecordsBefore (temp file,
//	                           fsync, rename, directory fsync)
//
// # Segment file
//
// A segment is a concatenation of whole record batches exactly as the
// producers sent them, with only the base offset patched (and, on
// LogAppendTime topics, the max timestamp and CRC); the batch layout is
// specified in internal/plog/batch. There is no file header, no footer and
// no index file:
//
//	+-------------------+-------------------+-----+-------------------+.........+
//	| batch @ base      | batch @ base+n1   | ... | last batch        | zeros   |
//	| 12+batchLength B  | 12+batchLength B  |     |                   | (mmap   |
//	+-------------------+-------------------+-----+-------------------+ prealloc)
//
// Invariants: the first batch's baseOffset is the segment's base offset;
// each batch starts at the offset after the previous one's last offset; the
// next segment starts at the offset after this segment's last batch. The
// active (last) segment written through the mmap path is preallocated to
// segment.bytes and ends in zeros; a zero header is not data. A sealed
// segment is truncated to its data and fsynced before the next segment is
// created, so only the last segment can have a torn tail.
//
// # Recovery
//
// Open scans every segment sequentially in large reads, checks each batch
// (magic, length, offset continuity, CRC-32C), and rebuilds the sparse
// offset index (one entry per IndexInterval bytes), the time index and the
// idempotent-producer table. An invalid batch in the last segment is a torn
// or preallocated tail and is truncated (the bytes dropped are logged),
// unless a valid batch follows it: then, as anywhere in a sealed segment,
// it is corruption, and Open returns a *CorruptionError naming the file and
// position instead of silently dropping what follows.
//
// # Writing
//
// One writer goroutine per partition owns the active segment. Append
// validates in the caller's goroutine, then queues; the writer takes
// everything queued, assigns offsets, writes the group with one writev(2)
// (WriteSyscall) or copies it into the mapped segment (WriteMmap), issues one
// fdatasync if any append in the group asked for AckForced, publishes the
// new high watermark and acknowledges in offset order. A failed write or
// fsync is sticky (*IOError): fsync is never retried.
//
// Core code takes its filesystem (internal/vfs) and clock (internal/clock)
// from Config, so tests crash it on an in-memory filesystem.
package plog
