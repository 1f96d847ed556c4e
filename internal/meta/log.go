package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// File names under the meta directory.
const (
	snapshotFile = "snapshot.json"
	logFile      = "metadata.log"
	reserveFile  = "reserve"
	// legacyCatalogFile is the catalogue of earlier versions, migrated by
	// Open.
	legacyCatalogFile = "catalog.json"
)

// Format versions of the JSON documents: 1 is the legacy catalog.json, 2
// a snapshot (the same fields and the offset it was taken at).
const (
	legacyCatalogVersion = 1
	snapshotVersion      = 2
)

// minCompactBytes is the least the log grows before it is compacted into a
// snapshot; past it, the log is compacted once larger than the last
// snapshot, so the bytes written stay linear in the number of changes.
const minCompactBytes = 1 << 20

// reserveBytes is the size of the space reserve (see the package doc):
// room for thousands of change records on a full disk.
const reserveBytes = 1 << 20

// snapshotDoc is a snapshot's (and the legacy catalogue's) format.
type snapshotDoc struct {
	Version int `json:"version"`
	// NextOffset is the offset of the first record the snapshot does not
	// include (absent, 0, in the legacy catalogue).
	NextOffset         int64         `json:"next_offset"`
	ClusterID          string        `json:"cluster_id"`
	ProducerIDBlockEnd int64         `json:"producer_id_block_end"`
	Topics             []TopicRecord `json:"topics"`
	// ACLs are the ACL bindings (acls.go); absent in older snapshots.
	ACLs []AccessControlEntryRecord `json:"acls,omitempty"`
	// ClientQuotas (quotas.go) are absent from snapshots without any.
	ClientQuotas []ClientQuotaRecord `json:"client_quotas,omitempty"`
	// ScramCredentials are the users' SCRAM credentials (scram.go).
	ScramCredentials []UserScramCredentialRecord `json:"scram_credentials,omitempty"`
	// Brokers and Assignments are the cluster's (cluster.go), absent from
	// the single-node catalogue's snapshots.
	Brokers     []brokerSnapshot            `json:"brokers,omitempty"`
	Assignments []PartitionAssignmentRecord `json:"assignments,omitempty"`
}

// open loads the snapshot (migrating a legacy catalogue, or creating the
// first snapshot of a new directory) and replays the log.
func (c *Catalog) open() error {
	snapPath := filepath.Join(c.dir, snapshotFile)
	legacyPath := filepath.Join(c.dir, legacyCatalogFile)
	switch _, err := c.fs.Stat(snapPath); {
	case err == nil:
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("meta: %w", err)
	default:
		// No snapshot: a legacy catalogue becomes the first one, or a new
		// directory gets an empty one with a new cluster ID.
		st := newState()
		if _, err := c.fs.Stat(legacyPath); err == nil {
			if st, _, err = loadSnapshot(c.fs, legacyPath, legacyCatalogVersion); err != nil {
				return err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("meta: %w", err)
		}
		if st.clusterID == "" {
			id, err := newClusterID()
			if err != nil {
				return err
			}
			st.clusterID = id
		}
		if _, err := writeSnapshot(c.fs, c.dir, st, 0); err != nil {
			return err
		}
	}
	// A legacy catalogue next to a snapshot was migrated (the crash came
	// before its removal): the snapshot has everything.
	if _, err := c.fs.Stat(legacyPath); err == nil {
		if err := c.fs.Remove(legacyPath); err != nil {
			return fmt.Errorf("meta: removing the migrated %s: %w", legacyPath, err)
		}
		if err := c.fs.SyncDir(c.dir); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
	}
	if fi, err := c.fs.Stat(snapPath); err == nil {
		c.snapshotBytes = fi.Size()
	}

	logPath := filepath.Join(c.dir, logFile)
	f, err := c.fs.OpenReadWrite(logPath)
	if errors.Is(err, os.ErrNotExist) {
		if f, err = c.fs.Create(logPath); err == nil {
			err = c.fs.SyncDir(c.dir)
		}
	}
	if err != nil {
		return fmt.Errorf("meta: opening %s: %w", logPath, err)
	}
	c.log = f
	st, next, valid, err := load(c.fs, c.dir, f, -1)
	if err != nil {
		return err
	}
	if size, err := f.Size(); err != nil {
		return fmt.Errorf("meta: %w", err)
	} else if size > valid {
		// A torn tail: the write of a commit group that was never
		// acknowledged (its fsync did not return).
		if err := f.Truncate(valid); err != nil {
			return fmt.Errorf("meta: truncating the torn tail of %s: %w", logPath, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
	}
	c.st, c.nextOffset, c.logSize = st, next, valid
	c.nextProducerID = st.producerIDBlockEnd
	c.ensureReserve()
	return nil
}

// load reads the snapshot and applies the log's records from the
// snapshot's offset on, reading at most limit bytes of the log (-1: all of
// it). It returns the state, the offset of the next record and the size of
// the log's valid prefix: the log stops at the first batch that is not
// whole and intact (a torn tail). A record that does not apply, or a gap
// in the offsets, is corruption.
func load(fs vfs.FS, dir string, f vfs.File, limit int64) (*state, int64, int64, error) {
	snapPath := filepath.Join(dir, snapshotFile)
	st, next, err := loadSnapshot(fs, snapPath, snapshotVersion)
	if err != nil {
		return nil, 0, 0, err
	}
	size, err := f.Size()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("meta: %w", err)
	}
	if limit >= 0 && limit < size {
		size = limit
	}
	data := make([]byte, size)
	if n, err := f.ReadAt(data, 0); int64(n) != size {
		return nil, 0, 0, fmt.Errorf("meta: reading %s: %w", f.Name(), err)
	}
	var pos int64
	for pos < size {
		rest := data[pos:]
		h, err := batch.ParseHeader(rest)
		if err != nil || h.Length < batch.MinLength || int64(h.Size()) > int64(len(rest)) {
			break // torn tail
		}
		b := rest[:h.Size()]
		var recs []record
		err = batch.ForEachKeyValue(b, func(_ int32, key, value []byte) error {
			r, err := decodeRecord(key, value)
			recs = append(recs, r)
			return err
		})
		if errors.Is(err, batch.ErrCorrupt) {
			// A torn tail, unless an intact batch follows: then the
			// damage is in the middle of acknowledged history.
			if intactBatchAt(data[pos+int64(len(b)):]) {
				return nil, 0, 0, fmt.Errorf("meta: %s is corrupt at byte %d (an intact batch follows): %w", f.Name(), pos, err)
			}
			break
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("meta: %s at byte %d: %w", f.Name(), pos, err)
		}
		switch {
		case h.LastOffset() < next:
			// Included in the snapshot (a crash came between the
			// snapshot's rename and the log's truncation).
		case h.BaseOffset == next:
			for _, r := range recs {
				if err := st.apply(r); err != nil {
					return nil, 0, 0, fmt.Errorf("meta: %s record %d: %w", f.Name(), next, err)
				}
				next++
			}
		default:
			return nil, 0, 0, fmt.Errorf("meta: %s at byte %d: records from offset %d, expected %d", f.Name(), pos, h.BaseOffset, next)
		}
		pos += int64(len(b))
	}
	return st, next, pos, nil
}

// intactBatchAt reports whether b starts with a whole batch whose CRC
// matches.
func intactBatchAt(b []byte) bool {
	h, err := batch.ParseHeader(b)
	if err != nil || h.Length < batch.MinLength || h.Size() > len(b) {
		return false
	}
	return batch.ForEachKeyValue(b[:h.Size()], func(int32, []byte, []byte) error { return nil }) == nil
}

// loadSnapshot reads a snapshot, or the legacy catalogue (version 1), and
// the offset of the first record it does not include.
func loadSnapshot(fs vfs.FS, path string, version int) (*state, int64, error) {
	raw, err := vfs.ReadFile(fs, path)
	if err != nil {
		return nil, 0, fmt.Errorf("meta: reading %s: %w", path, err)
	}
	var d snapshotDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, 0, fmt.Errorf("meta: %s is not a valid catalogue: %w", path, err)
	}
	if d.Version != version {
		return nil, 0, fmt.Errorf("meta: %s has version %d, want %d", path, d.Version, version)
	}
	st := newState()
	st.clusterID = d.ClusterID
	st.producerIDBlockEnd = d.ProducerIDBlockEnd
	if err := st.loadBrokers(d.Brokers); err != nil {
		return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
	}
	for i := range d.Topics {
		if err := st.apply(&d.Topics[i]); err != nil {
			return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
		}
	}
	for i := range d.Assignments {
		if err := st.apply(&d.Assignments[i]); err != nil {
			return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
		}
	}
	for i := range d.ACLs {
		if err := st.apply(&d.ACLs[i]); err != nil {
			return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
		}
	}
	for i := range d.ClientQuotas {
		if err := st.apply(&d.ClientQuotas[i]); err != nil {
			return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
		}
	}
	for i := range d.ScramCredentials {
		if err := st.apply(&d.ScramCredentials[i]); err != nil {
			return nil, 0, fmt.Errorf("meta: %s: %w", path, err)
		}
	}
	return st, d.NextOffset, nil
}

// writeSnapshot writes st as the snapshot at offset next, atomically:
// temporary file, fsync, rename, directory sync. It returns the
// snapshot's size.
func writeSnapshot(fs vfs.FS, dir string, st *state, next int64) (int64, error) {
	d := snapshotDoc{Version: snapshotVersion, NextOffset: next, ClusterID: st.clusterID,
		ProducerIDBlockEnd: st.producerIDBlockEnd, Topics: make([]TopicRecord, 0, len(st.topics)), ACLs: st.aclRecords()}
	for _, t := range st.topics {
		d.Topics = append(d.Topics, TopicRecord{Name: t.Name, ID: t.ID, Partitions: t.Partitions, Configs: t.Configs})
	}
	// Sorted, so the same state always gives the same bytes.
	sortTopicRecords(d.Topics)
	d.ClientQuotas = st.quotaRecords()
	d.ScramCredentials = st.scramRecords()
	d.Brokers, d.Assignments = st.clusterSnapshot()
	raw, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	path := filepath.Join(dir, snapshotFile)
	tmp := path + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("meta: %w", err)
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		fs.Remove(tmp) // best effort: a leftover is overwritten next time
		return 0, fmt.Errorf("meta: writing the snapshot %s: %w", path, err)
	}
	return int64(len(raw)), nil
}

// changeLocked validates r against the state, applies it and queues its
// record in the open commit group, which it returns: the caller commits it
// (after releasing mu) and reports the change only once that succeeded.
func (c *Catalog) changeLocked(r record) (*commitGroup, error) {
	return c.changeAllLocked([]record{r})
}

// changeAllLocked is changeLocked for records that take effect together:
// they are one batch, so a torn tail keeps all of them or none, and they
// are applied to a copy of the state first, so a record that does not
// apply refuses them all and changes nothing.
func (c *Catalog) changeAllLocked(rs []record) (*commitGroup, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	st := c.st
	if len(rs) > 1 {
		st = c.st.copyTopics()
	}
	kvs := make([]batch.KeyValue, 0, len(rs))
	for _, r := range rs {
		if err := st.apply(r); err != nil {
			return nil, err
		}
		key, value := encodeRecord(r)
		kvs = append(kvs, batch.KeyValue{Key: key, Value: value})
	}
	c.st = st
	c.pending = append(c.pending, batch.BuildRecords(kvs, c.nextOffset, time.Now().UnixMilli())...)
	c.nextOffset += int64(len(rs))
	return c.cur, nil
}

// commit returns once g is durable (or failed): the first waiter to take
// commitMu writes every change queued so far with one write and one fsync.
func (c *Catalog) commit(g *commitGroup) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	select {
	case <-g.done: // an earlier holder of commitMu wrote it
		return g.err
	default:
	}
	c.mu.Lock()
	buf, grp := c.pending, c.cur // grp == g: only the open group is unwritten
	c.pending, c.cur = nil, newCommitGroup()
	c.mu.Unlock()

	err := c.writeLogCommitLocked(buf)
	grp.err = err
	close(grp.done)
	if err == nil {
		c.maybeSnapshotCommitLocked()
	}
	return err
}

// writeLogCommitLocked appends buf to the log and fsyncs it. On failure
// the state goes back to what is durable and the changes queued since buf
// was taken fail too (their records were applied on top of buf's).
func (c *Catalog) writeLogCommitLocked(buf []byte) error {
	if c.log == nil {
		return c.failCommitLocked(errors.New("meta: catalogue closed"), true)
	}
	_, err := c.log.WriteAt(buf, c.logSize)
	if IsNoSpace(err) && c.releaseReserveCommitLocked() {
		_, err = c.log.WriteAt(buf, c.logSize)
	}
	if err != nil {
		// Nothing of buf counts: the log's size is not advanced. Cut what
		// the write may have left, so a crash cannot bring it back.
		sticky := false
		if terr := c.log.Truncate(c.logSize); terr != nil {
			sticky = true
		} else if serr := c.log.Sync(); serr != nil {
			sticky = true
		}
		return c.failCommitLocked(fmt.Errorf("meta: writing %s: %w", c.log.Name(), err), sticky)
	}
	if err := c.log.Sync(); err != nil {
		// What reached the disk is unknown. Cut the file back to what was
		// durable (best effort: its own sync is a new request, not a
		// retry of this one), so the failed changes cannot come back at
		// the next start; the catalogue refuses changes until then.
		if c.log.Truncate(c.logSize) == nil {
			c.log.Sync()
		}
		return c.failCommitLocked(fmt.Errorf("meta: syncing %s: %w", c.log.Name(), err), true)
	}
	c.logSize += int64(len(buf))
	return nil
}

// failCommitLocked reloads the state from the files (the snapshot and the
// log's durable prefix), fails the changes queued since, and returns err.
// sticky refuses every later change (a failed fsync: what reached the disk
// is unknown).
func (c *Catalog) failCommitLocked(err error, sticky bool) error {
	var st *state
	var next int64
	var lerr error
	if c.log != nil {
		st, next, _, lerr = load(c.fs, c.dir, c.log, c.logSize)
	} else {
		lerr = err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if lerr != nil {
		sticky = true
	} else {
		c.st, c.nextOffset = st, next
	}
	if sticky && c.failed == nil {
		c.failed = fmt.Errorf("%w (the catalogue refuses changes until a restart)", err)
	}
	c.pending = nil
	c.cur.err = err
	close(c.cur.done)
	c.cur = newCommitGroup()
	return err
}

// maybeSnapshotCommitLocked compacts the log into a snapshot once it is
// larger than the last snapshot (and minCompactBytes). The snapshot must
// be exactly the state at an offset, so it is skipped while changes are
// queued (the next commit tries again). Failing to write it is not an
// error: the log just grows until the next try.
func (c *Catalog) maybeSnapshotCommitLocked() {
	if c.logSize < max(c.opts.minCompactBytes, c.snapshotBytes) {
		return
	}
	c.mu.Lock()
	if len(c.pending) > 0 || c.failed != nil {
		c.mu.Unlock()
		return
	}
	// A copy taken under mu is the state at next; it is encoded and
	// written without holding mu.
	st := c.st.copyTopics()
	next := c.nextOffset
	c.mu.Unlock()
	size, err := writeSnapshot(c.fs, c.dir, st, next)
	if err != nil {
		// Retry after the log has grown some more.
		c.snapshotBytes = c.logSize + c.opts.minCompactBytes
		return
	}
	c.snapshotBytes = size
	// The snapshot has every record of the log: empty it. A crash before
	// the truncation is durable leaves records below next, which replay
	// skips.
	if err := c.log.Truncate(0); err != nil {
		// The log keeps its records (replay skips them); try again once
		// it has grown some more, not at every commit.
		c.snapshotBytes = c.logSize + c.opts.minCompactBytes
		return
	}
	if err := c.log.Sync(); err != nil {
		c.failCommitLocked(fmt.Errorf("meta: syncing %s: %w", c.log.Name(), err), true)
		return
	}
	c.logSize = 0
	c.ensureReserve()
}

// copyTopics returns a copy of the state that shares the Topic values'
// contents but not the maps: apply replaces a topic's fields in place, so
// the copy's topics are copied too.
func (s *state) copyTopics() *state {
	out := &state{topics: make(map[string]*Topic, len(s.topics)), byID: make(map[[16]byte]*Topic, len(s.byID)),
		partitions: s.partitions, producerIDBlockEnd: s.producerIDBlockEnd, clusterID: s.clusterID,
		quotas: maps.Clone(s.quotas), // quota entries are replaced, never mutated
		scram:  s.copyScram()}
	for name, t := range s.topics {
		ct := *t // Configs maps are replaced, never mutated, by apply
		out.topics[name] = &ct
		out.byID[ct.ID] = &ct
	}
	out.acls = maps.Clone(s.acls) // bindings are values
	s.copyCluster(out)
	return out
}

// ReleaseReserve gives up the space reserve so that a write that failed
// for lack of space can be tried again: DeleteRecords' checkpoint of the
// new log start, which then frees segments. It reports whether there was
// a reserve to release. EnsureReserve takes the space back.
func (c *Catalog) ReleaseReserve() bool {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	return c.releaseReserveCommitLocked()
}

// EnsureReserve writes the space reserve again if it was released and
// there is room (best effort); the callers that free space call it.
func (c *Catalog) EnsureReserve() {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.ensureReserve()
}

// IsNoSpace reports whether err is the disk being full (or over quota).
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// releaseReserveCommitLocked removes the reserve file, if it exists, so a
// metadata write can take its blocks.
func (c *Catalog) releaseReserveCommitLocked() bool {
	if !c.reserveSet {
		return false
	}
	c.reserveSet = false
	return c.fs.Remove(filepath.Join(c.dir, reserveFile)) == nil
}

// ensureReserve writes the reserve file if it is missing, best effort: on
// a full disk it is left out until the next try (at start-up, after every
// snapshot, and on EnsureReserve). commitMu must be held (or the catalogue
// not yet shared).
func (c *Catalog) ensureReserve() {
	if c.reserveSet || c.opts.reserveBytes <= 0 {
		return
	}
	path := filepath.Join(c.dir, reserveFile)
	if fi, err := c.fs.Stat(path); err == nil && fi.Size() == c.opts.reserveBytes {
		c.reserveSet = true
		return
	}
	f, err := c.fs.Create(path)
	if err != nil {
		return
	}
	// Written, not truncated: a sparse file would hold no blocks to give.
	_, err = f.Write(make([]byte, c.opts.reserveBytes))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = c.fs.SyncDir(c.dir)
	}
	if err != nil {
		c.fs.Remove(path)
		return
	}
	c.reserveSet = true
}
