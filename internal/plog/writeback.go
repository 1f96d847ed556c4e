package plog

import "github.com/sushka-io/sushka/internal/vfs"

// Early writeback of the active segment (WriteSyscall, issue 12 item 4;
// Config.EarlyWritebackBytes). Under acks=all, group commit keeps one
// fdatasync in flight per partition: what the writer writes meanwhile waits
// for the next one, which must then write all of it (a group of ~1 MiB at
// 150,000 records/s of 1 KiB) before it can flush the device's cache. The
// writer instead starts the writeback of what it wrote as soon as it wrote
// it (sync_file_range SYNC_FILE_RANGE_WRITE, RocksDB's bytes_per_sync), so
// the disk writes it while the fdatasync before it runs, and the next
// fdatasync waits only for the rest.
//
// It is not a durability mechanism: an acks=all append is acknowledged
// after the publisher's fdatasync covering it, exactly as without it
// (design D14), and an I/O error of the writeback started here is reported
// by that fdatasync (SYNC_FILE_RANGE_WRITE alone leaves the file's
// writeback error for it; the WAIT flags would consume it, errseq, so they
// are not used: SYNC_FILE_RANGE_WAIT_BEFORE, RocksDB's strict_bytes_per_sync,
// would also make the writer, hence acks=0/1 appends and the forming of the
// next group, wait for the disk). A failed start is therefore no error of
// the log: the segment stops starting writeback and the fdatasync does it
// all, as without the setting.
//
// Only whole pages are started: the last, partly written page is left for
// the next start or the fdatasync, because a page under writeback that the
// next write appends into is written twice or, where the device needs
// stable pages, makes that write wait for the disk. Only groups with an
// AckForced append start writeback: acks=0/1 traffic, whose fsyncs are
// paced (Config.SyncInterval) and awaited by nobody, pays one comparison.
// And only while the publisher's fdatasync runs (publisher.syncing): when
// it is idle, the group just handed over is about to be synced anyway, and
// a start would hold up that fdatasync (the publisher, woken by the
// handover, waits for the writer's thread while the writer is in
// sync_file_range: +0.08–0.11 ms of sync wait at p50 when every group
// started writeback; docs/benchmarks.md).
const writebackPageBytes = 4096

// earlyWriteback is the writer's early-writeback state of the active
// segment (writer).
type earlyWriteback struct {
	from   int64 // writeback is started for the bytes before from (page aligned)
	failed bool  // StartWriteback failed: not tried again in this segment
}

// start starts the writeback of the whole pages written since the last
// start, [from, end rounded down to a page), once they are at least
// minBytes; end is where the writes end. It reports the error of a failed
// start (the first only), which the caller may log: the fdatasync reports
// the disk's errors.
func (e *earlyWriteback) start(f vfs.File, end, minBytes int64) error {
	if minBytes <= 0 || e.failed {
		return nil
	}
	to := end &^ (writebackPageBytes - 1)
	if to-e.from < minBytes {
		return nil
	}
	if err := f.StartWriteback(e.from, to-e.from); err != nil {
		e.failed = true
		return err
	}
	e.from = to
	return nil
}

// covered notes that the fdatasync about to start covers the writes up to
// end: the next start begins at end's page.
func (e *earlyWriteback) covered(end int64) {
	e.from = max(e.from, end&^(writebackPageBytes-1))
}

// reset starts over on a new active segment whose writes end at pos, all
// of them synced or to be synced by the publisher (the page holding pos is
// started with the next bytes).
func (e *earlyWriteback) reset(pos int64) {
	*e = earlyWriteback{from: pos &^ (writebackPageBytes - 1)}
}
