package raftnode

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// The in-sync replicas' inputs (docs/replication.md §3d). A group's leader
// notes, for each voter, the last node tick at which the voter was known to
// hold everything the leader's log held then: Kafka's lastCaughtUpTimeMs
// (Replica.updateFetchStateOrThrow), with raft's acknowledgements standing
// for Kafka's fetches. internal/replica turns it into the ISR with its lag
// time (replica.lag.time.max.ms) and min.insync.replicas.
//
// Kafka's rule is "the fetch reached the leader's log end as of the previous
// fetch"; a Kafka follower has one fetch in flight, so each fetch asks for
// what the previous one's answer ended at. Raft pipelines (up to
// MaxInflightMsgs appends in flight), so a follower's every acknowledgement
// may trail the previous one's log end by a round trip while it keeps up. The
// leader therefore sets a target instead: at an acknowledgement it notes its
// log end and the tick (when no target is pending), and the first later
// acknowledgement whose Match reaches that log end makes the voter caught up
// as of the target's tick. An acknowledgement with Match at the log end makes
// it caught up now. Only acknowledgements count (a response to an append,
// not rejected, or to a heartbeat, in the leader's term), and only in
// StateReplicate: a silent follower falls out after the lag time even on an
// idle partition (Kafka keeps one whose log end equals the leader's; raft's
// heartbeats give ours an acknowledgement every tick).

// ReplicaProgress is what a group's leader knows of one of its voters.
type ReplicaProgress struct {
	ID uint64
	// Match is the last index known to be in the voter's log (the leader's
	// own: its last index).
	Match uint64
	// CaughtUp says whether the voter has been known to hold everything
	// the leader's log held at some tick of this leadership, and
	// CaughtUpTick is the latest such tick (the leader itself: now).
	CaughtUp     bool
	CaughtUpTick int64
}

// syncTable is a leader's ReplicaProgress of its voters. Written by the
// group's worker, read by Node.Replicas, under group.syncMu (a leaf, taken
// under group.inboxMu).
type syncTable struct {
	term   uint64 // the leadership it describes; 0: this replica does not lead
	voters []voterSync
}

type voterSync struct {
	ReplicaProgress
	// target is a log end the voter is to reach, noted at targetTick
	// (hasTarget: one is pending).
	target     uint64
	targetTick int64
	hasTarget  bool
}

// acknowledged notes an acknowledgement of v (in StateReplicate) with match,
// the leader's log end being last at tick now.
func (v *voterSync) acknowledged(match, last uint64, now int64) {
	if v.hasTarget && match >= v.target {
		v.caughtUpAt(v.targetTick)
		v.hasTarget = false
	}
	if match >= last {
		v.caughtUpAt(now)
	}
	if !v.hasTarget {
		v.target, v.targetTick, v.hasTarget = last, now, true
	}
}

func (p *ReplicaProgress) caughtUpAt(tick int64) {
	if !p.CaughtUp || tick > p.CaughtUpTick {
		p.CaughtUp, p.CaughtUpTick = true, tick
	}
}

// acknowledges says whether m, from a peer, acknowledges the sender's log
// to its leader (a response to an append, not rejected, or to a heartbeat).
func acknowledges(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MessageType_MsgAppResp:
		return !m.GetReject()
	case pb.MessageType_MsgHeartbeatResp:
		return true
	}
	return false
}

// updateSync brings the sync table up to date after a run's steps: acked
// are the voters whose acknowledgements of the leader's current term this
// run stepped. It reports whether this replica leads.
func (g *group) updateSync(acked []uint64) bool {
	st := g.rn.BasicStatus()
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	t := &g.sync
	if st.RaftState != raft.StateLeader {
		if t.term != 0 {
			t.term = 0
			t.voters = t.voters[:0]
		}
		return false
	}
	if t.term != st.GetTerm() {
		t.term = st.GetTerm()
		t.voters = t.voters[:0] // a new leadership: nobody caught up yet
	}
	// The voters may have changed (a configuration change applied).
	t.voters = slices.DeleteFunc(t.voters, func(v voterSync) bool { return !slices.Contains(g.voters, v.ID) })
	for _, id := range g.voters {
		if !slices.ContainsFunc(t.voters, func(v voterSync) bool { return v.ID == id }) {
			t.voters = append(t.voters, voterSync{ReplicaProgress: ReplicaProgress{ID: id}})
		}
	}
	now, self := g.node.tickNow.Load(), g.node.cfg.ID
	var last uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == self {
			last = pr.Match // raft's own log end, unstable entries included
		}
	})
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		i := slices.IndexFunc(t.voters, func(v voterSync) bool { return v.ID == id })
		if i < 0 {
			return // a learner: not in the ISR
		}
		v := &t.voters[i]
		v.Match = pr.Match
		switch {
		case id == self:
			v.caughtUpAt(now)
		case pr.State == tracker.StateReplicate && slices.Contains(acked, id):
			v.acknowledged(pr.Match, last, now)
		}
	})
	return true
}

// foldHeardLocked runs when a quiescent leader wakes (under inboxMu): while
// it was quiescent every follower held its whole log (it quiesced only
// then, and any entry wakes it), so each was caught up whenever its node
// was heard from.
func (g *group) foldHeardLocked() {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	if g.sync.term == 0 {
		return
	}
	for i := range g.sync.voters {
		g.node.caughtUpWhenHeard(&g.sync.voters[i].ReplicaProgress)
	}
}

// caughtUpWhenHeard makes p, a voter of a quiescent leader, caught up at
// the last tick its node was heard from.
func (n *Node) caughtUpWhenHeard(p *ReplicaProgress) {
	if heard, ok := n.transport.lastHeard(p.ID); ok {
		p.caughtUpAt(heard)
	}
}

// Replicas appends to dst what this replica of the group knows of its
// voters if it leads the group (term is its term; 0, and dst unchanged, when
// it does not lead or has not yet run as leader), and returns the node's
// tick count, the unit of CaughtUpTick (Tick's, TickInterval apart). The
// leader's own entry has its log end as Match and is caught up now.
func (n *Node) Replicas(groupID uint64, dst []ReplicaProgress) (out []ReplicaProgress, term uint64, now int64) {
	now = n.tickNow.Load()
	g := n.group(groupID)
	if g == nil {
		return dst, 0, now
	}
	g.inboxMu.Lock()
	defer g.inboxMu.Unlock()
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	if g.sync.term == 0 {
		return dst, 0, now
	}
	first := len(dst)
	for _, v := range g.sync.voters {
		dst = append(dst, v.ReplicaProgress)
		if v.ID == n.cfg.ID {
			dst[len(dst)-1].CaughtUpTick = now
		}
	}
	if g.quiesced {
		for i := first; i < len(dst); i++ {
			n.caughtUpWhenHeard(&dst[i])
		}
	}
	return dst, g.sync.term, now
}

// TickInterval is the node's tick period (the ticker's; with ManualTicks,
// what one Tick stands for).
func (n *Node) TickInterval() time.Duration { return n.cfg.TickInterval }
