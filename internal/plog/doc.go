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
// everything queued (a group), assigns offsets and writes the group with one
// writev(2) (WriteSyscall) or copies it into the mapped segment (WriteMmap).
//
// Visible means durable (design D14): a batch is published (below the high
// watermark, returned by Read, waking Wait) only once it is fsynced, so no
// reader ever sees a record that a crash could take away and whose offset a
// different record could then take. Each group runs in this order:
//
//  1. write the group;
//  2. acknowledge its AckNone and AckWritten appends (they asked for the
//     page cache only);
//  3. fdatasync the active segment if the group wrote anything;
//  4. publish the group: new high watermark, readers woken;
//  5. acknowledge its AckForced appends.
//
// This is adaptive group commit: there is no timer, and while one group's
// fsync runs the next appends queue up and are written together. An
// AckWritten producer learns its offset before the batch is visible; Read of
// an offset written but not yet durable returns no chunks (not
// ErrOffsetOutOfRange), and a fetch waits for it as for any new data. A
// segment roll seals (fsyncs) the old segment and publishes what it holds
// before the next segment is created. Recovery fsyncs the last segment before
// publishing it, since after a process crash the page cache may still hold
// batches that were never synced. A failed write or fsync is sticky
// (*IOError): fsync is never retried, and what it would have covered is
// never published.
//
// Core code takes its filesystem (internal/vfs) and clock (internal/clock)
// from Config, so tests crash it on an in-memory filesystem.
package plog
