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
//	00000000000000052311.txnindex  optional: the segment's aborted
//	                           transactions (txn.go; docs/format.md)
//
// The partition's recovery point and log start offset are in its data
// directory's checkpoint files (checkpoint.go: Kafka's
// recovery-point-offset-checkpoint and log-start-offset-checkpoint, one
// pair for every partition of the directory, with the clean-shutdown
// marker beside them). The per-partition recovery-point and
// log-start-offset files of earlier versions are read and migrated, never
// written.
//
// The recovery point is an offset below which every batch was durable when
// it was written: the high watermark when the checkpoint was written
// (every batch below it is durable), written at most every
// CheckpointInterval (60 s) and within it after a publication, exact after
// a clean shutdown. A missing or
// unreadable checkpoint means "nothing known": -1.
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
// idempotent-producer table (without the producers idle for
// producer.id.expiration.ms, judged by their last batch's max timestamp, never
// later than now; while running, the writer forgets idle producers by their
// last append time, looking every 10 minutes; a producer with a transaction
// in progress is kept), the transactions in progress (the last stable
// offset) and each segment's aborted-transactions index, whose file it
// rewrites when it differs (txn.go). What an invalid batch means
// depends on where it is:
//
//   - in the last segment at or past the recovery point: the unsynced tail
//     of a crash, whose pages may have reached the disk torn or out of order
//     (an invalid page followed by valid ones). Recovery truncates at the
//     first invalid batch and logs the bytes dropped;
//   - in the last segment below the recovery point, or a log that ends
//     below it: corruption of durable data;
//   - in a sealed segment: corruption, unless the rest of the segment is
//     zeros (a preallocated segment sealed by a crash before its truncation
//     was durable).
//
// On corruption Open returns a *CorruptionError naming the file and
// position instead of silently dropping what follows. Otherwise recovery
// fsyncs the last segment (after a process crash the page cache may hold
// batches that were never synced) and checkpoints the recovery point if it
// moved. The price of the lenient tail, as in Kafka: a durable batch past
// the recovery point (at most 10 seconds of appends) that is damaged in
// place is truncated with what follows, loudly logged, not refused.
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
// different record could then take. Every batch goes through, in order:
//
//  1. written with its group;
//  2. its append acknowledged if AckNone or AckWritten (they asked for the
//     page cache only);
//  3. fdatasync of the active segment (one for everything written so far);
//  4. published: new high watermark, readers woken;
//  5. its append acknowledged if AckForced.
//
// The fsync and the publication belong to a publisher (syncer.go). On
// WriteSyscall it is a goroutine of its own: while it fsyncs, the writer
// writes the next groups, and its next fsync covers them all (adaptive group
// commit, no timer), so AckWritten appends run at page-cache speed and
// become visible one fsync after their write. A publication that has no
// AckForced append to acknowledge waits until Config.SyncInterval (2 ms by
// default) has passed since the previous one started: AckWritten traffic
// alone would otherwise keep the publisher in back-to-back fdatasyncs,
// thousands a second, and on virtio-blk, where each one is a device cache
// flush, that rate stalled the whole machine for milliseconds every 100 ms,
// AckWritten acknowledgements included. An AckForced append handed over
// ends the wait at once. On WriteMmap the writer
// publishes after each group itself, so that stores into the mapping never
// overlap its msync. An AckWritten producer learns its offset before the
// batch is visible; Read of an offset written but not yet durable returns no
// chunks (not ErrOffsetOutOfRange), and a fetch waits for it as for any new
// data. A segment roll seals (fsyncs) the old segment and publishes what it
// holds before the next segment is created, so the publisher only ever
// syncs the active segment. A failed write or fsync is sticky (*IOError):
// fsync is never retried, and nothing is published after it.
//
// A full disk is the one exception: when a write (never an fsync) fails
// with ENOSPC, nothing of its group has been acknowledged, and once space
// is back the writer recovers the partition from what is on disk, exactly
// as Open does, and resumes from there (the failed group's offsets are
// reused; batches written before it are synced and published). It tries on
// an arriving append, one second after the failure and then at doubling
// intervals up to a minute; meanwhile appends fail with the error
// (KAFKA_STORAGE_ERROR, which clients retry). Any fsync failure makes the
// partition's error permanent until restart.
//
// Core code takes its filesystem (internal/vfs) and clock (internal/clock)
// from Config, so tests crash it on an in-memory filesystem.
package plog
