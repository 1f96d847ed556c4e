package replica

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/sushka-io/sushka/internal/plog"
)

// produce appends n batches of values prefix-0… acks=all on node id's log
// and returns the offset after the last.
func (c *testCluster) produce(id uint64, prefix string, n int) int64 {
	c.t.Helper()
	var end int64
	for i := range n {
		res, err := appendWithin(c.part(id).Log(), value(fmt.Sprintf("%s-%d-%s", prefix, i, bytes.Repeat([]byte("x"), 400))), plog.AckForced)
		if err != nil {
			c.t.Fatal(err)
		}
		end = res.BaseOffset + 1
	}
	return end
}

// TestDeleteRecordsEveryReplica (docs/replication.md §3e): DeleteRecords on
// the leader of a 3-replica partition moves the log start on every replica
// (ListOffsets earliest, LogStartOffset, is the new start everywhere); a
// read below it is OFFSET_OUT_OF_RANGE on each; the segments wholly below
// it are gone on each, and stay gone after a restart; a follower refuses
// DeleteRecords (NOT_LEADER_OR_FOLLOWER). Fails when the followers do not
// apply the LOG_START entry (the leader alone moving its start: 2/2).
func TestDeleteRecordsEveryReplica(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	end := c.produce(1, "a", 60) // 8 KiB segments: several
	c.awaitHWM(end)
	if _, err := c.part(2).Log().DeleteRecordsBefore(10); !errors.Is(err, plog.ErrNotLeader) {
		t.Fatalf("DeleteRecords on a follower: %v, want ErrNotLeader", err)
	}
	target := end - 7 // within a segment: the segments before it go
	start, err := c.part(1).Log().DeleteRecordsBefore(target)
	if err != nil || start != target {
		t.Fatalf("DeleteRecords(%d) = %d, %v", target, start, err)
	}
	c.tickUntil(100, "the log start moved on every replica", func() bool {
		for _, p := range c.parts {
			if p.Log().LogStartOffset() != target {
				return false
			}
		}
		return true
	})
	check := func() {
		t.Helper()
		for i, p := range c.parts {
			l := p.Log()
			if got := l.LogStartOffset(); got != target {
				t.Fatalf("node %d: log start %d, want %d", i+1, got, target)
			}
			if _, err := l.Read(target-1, 1<<20, true); !errors.Is(err, plog.ErrOffsetOutOfRange) {
				t.Fatalf("node %d: read below the log start: %v, want ErrOffsetOutOfRange", i+1, err)
			}
			first, err := p.Storage().FirstIndex()
			if err != nil || first <= 2 {
				t.Fatalf("node %d: first index %d, %v: no snapshot taken", i+1, first, err)
			}
			if n := len(readAll(t, l)); n != int(end-target) {
				t.Fatalf("node %d: %d batches from the log start, want %d", i+1, n, end-target)
			}
		}
		c.sameLogs()
	}
	check()
	for id := uint64(1); id <= 3; id++ {
		c.stop(id)
	}
	for id := uint64(1); id <= 3; id++ {
		c.restart(id)
	}
	check()
	leader := c.awaitLeader(300)
	c.awaitHWM(c.produce(leader, "after", 3))
	c.sameLogs()
}

// TestFollowerInstallsSnapshot (docs/replication.md §3e): a follower stopped;
// an idempotent producer's batches and more appended, then everything below
// the high watermark deleted, so the leader's first index is past the
// follower's log end; the follower restarted installs the leader's
// snapshot (MsgSnap), catches up, holds the same bytes as the others above
// the log start, and, once leading, answers a retry of the producer's last
// batch (below the log start: known from the snapshot alone) with its
// original offset. Fails when the snapshot carries no producer table (the
// retry written again: 1/1), or when it is not installed over a log with
// entries (the group fails).
func TestFollowerInstallsSnapshot(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.awaitHWM(c.produce(1, "before", 5))
	c.stop(3)
	const producer = 11
	var offsets []int64
	for seq := int32(0); seq < 3; seq++ {
		res, err := appendWithin(c.part(1).Log(), idempotent(producer, seq), plog.AckForced)
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, res.BaseOffset)
	}
	end := c.produce(1, "while-down", 40)
	if _, err := c.part(1).Log().DeleteRecordsBefore(-1); err != nil {
		t.Fatal(err)
	}
	c.tickUntil(100, "the log start at the end on nodes 1 and 2", func() bool {
		return c.part(1).Log().LogStartOffset() == end && c.part(2).Log().LogStartOffset() == end
	})
	follower, _ := c.part(3).Storage().LastIndex()
	if first, _ := c.part(1).Storage().FirstIndex(); first <= follower+1 {
		t.Fatalf("the leader's first index %d does not pass the stopped follower's last %d", first, follower)
	}
	end = c.produce(1, "after", 5)
	c.restart(3)
	c.awaitHWM(end)
	if got := c.part(3).Log().LogStartOffset(); got < offsets[2]+1 {
		t.Fatalf("node 3: log start %d after the snapshot, want past %d", got, offsets[2])
	}
	if len(c.sameLogs()) == 0 {
		t.Fatal("no batch above the log start")
	}
	c.elect(3)
	res, err := appendWithin(c.part(3).Log(), idempotent(producer, 2), plog.AckForced)
	if err != nil || res.BaseOffset != offsets[2] {
		t.Fatalf("retry of sequence 2 on the node that installed the snapshot: offset %d, %v; want the original %d", res.BaseOffset, err, offsets[2])
	}
	if _, err := appendWithin(c.part(3).Log(), idempotent(producer, 4), plog.AckForced); !errors.Is(err, plog.ErrOutOfOrderSequence) {
		t.Fatalf("sequence 4 after 2: %v, want ErrOutOfOrderSequence", err)
	}
	next, err := appendWithin(c.part(3).Log(), idempotent(producer, 3), plog.AckForced)
	if err != nil {
		t.Fatal(err)
	}
	c.awaitHWM(next.BaseOffset + 1)
	c.sameLogs()
}
