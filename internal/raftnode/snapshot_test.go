package raftnode

import (
	"sync/atomic"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// snapshotHook is a MemStorage that runs onSnapshot when raft asks it for
// the snapshot to send a follower (MsgSnap).
type snapshotHook struct {
	*MemStorage
	onSnapshot atomic.Pointer[func()]
}

func (s *snapshotHook) Snapshot() (*pb.Snapshot, error) {
	if f := s.onSnapshot.Swap(nil); f != nil {
		(*f)()
	}
	return s.MemStorage.Snapshot()
}

// TestSnapshotDropped (docs/replication.md §3e): the leader's MsgSnap to a
// follower behind its compacted log is dropped (the link cut as raft takes
// the snapshot); once the link is back the leader sends it again and the
// follower catches up. Fails without ReportSnapshot after a MsgSnap's send
// (raft's progress for the follower stays in StateSnapshot, paused, for
// ever: the follower never applies another entry).
func TestSnapshotDropped(t *testing.T) {
	hooks := map[uint64]*snapshotHook{}
	c := newCluster(t, clusterOptions{nodes: 3, groups: 1, manual: true, wrap: func(node, _ uint64, s Storage) Storage {
		h := &snapshotHook{MemStorage: s.(*MemStorage)}
		hooks[node] = h
		return h
	}})
	c.electAll(60)
	c.leadAll(1, 30)
	const g = 1
	cut := func(on bool) {
		c.node(1).CutPeer(3, on)
		c.node(3).CutPeer(1, on)
		c.node(2).CutPeer(3, on)
		c.node(3).CutPeer(2, on)
	}
	c.propose(1, g, "before")
	c.tickUntil(20, "applied everywhere", c.everyGroupApplied(1))
	cut(true)
	c.propose(1, g, values("while cut", 20)...)
	c.tickUntil(20, "committed by nodes 1 and 2", func() bool {
		return len(c.appliedOf(1, g)) == 21 && len(c.appliedOf(2, g)) == 21
	})
	// The leader compacts everything applied (etcd's CreateSnapshot and
	// Compact): node 3's next entry is gone from its log.
	ms := hooks[1].MemStorage
	last, _ := ms.LastIndex()
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	if _, err := ms.CreateSnapshot(last, cs, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := ms.Compact(last); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	drop := func() {
		c.node(1).CutPeer(3, true)
		c.node(3).CutPeer(1, true)
		dropped.Store(true)
	}
	hooks[1].onSnapshot.Store(&drop)
	cut(false)
	c.tickUntil(60, "the leader's snapshot taken (and its MsgSnap dropped)", dropped.Load)
	ticks := 0
	c.tickUntil(10, "five ticks with the snapshot lost", func() bool { ticks++; return ticks > 5 })
	c.node(1).CutPeer(3, false)
	c.node(3).CutPeer(1, false)
	applied := c.whenApplied(3, "after")
	c.propose(1, g, "after")
	c.tickUntil(100, "node 3 applies an entry after the snapshot", func() bool {
		select {
		case <-applied:
			return true
		default:
			return false
		}
	})
}
