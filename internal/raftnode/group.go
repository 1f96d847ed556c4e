package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// GroupConfig is one raft group of a node (one partition).
type GroupConfig struct {
	// ID names the group on every node (the partition); any value.
	ID uint64
	// Voters are the node ids of the group's first configuration, the same
	// on every node. Used only when Storage is empty.
	Voters []uint64
	// Learners are the group's first non-voting replicas (raft learners:
	// they receive and apply every entry, never vote or lead), the same on
	// every node; used only when Storage is empty. The metadata quorum's
	// brokers that are not controllers are its learners.
	Learners []uint64
	// Storage holds the group's log and hard state.
	Storage Storage
	// Applied is the last index the state machine applied before a restart
	// (raft's Config.Applied); 0 for a new group.
	Applied uint64
	// Apply receives the committed entries in log order, called by the
	// group's worker between Readys' persistence and Advance, never
	// concurrently for one group. It receives every entry, the leaders'
	// empty entries and the configuration changes included (those are
	// already applied to raft). It must not block long: the group waits.
	Apply func(entries []*pb.Entry)
	// OnLeader, when set, is told of every change of the leader this
	// replica knows or of its term: called by the group's worker after the
	// Save of the Ready that changed them and before that Ready's Apply,
	// never concurrently for one group, in order. leader is the leader's
	// node id, 0 when none is known: after an election was lost or begun,
	// when the group fails and at Node.Stop (so that whatever waits on a
	// leader's proposals is answered). Like Apply it must not block.
	OnLeader func(leader, term uint64)
}

// Errors of proposals.
var (
	ErrStopped          = errors.New("raftnode: node stopped")
	ErrUnknownGroup     = errors.New("raftnode: unknown group")
	ErrGroupFailed      = errors.New("raftnode: group failed")
	ErrProposalTooLarge = errors.New("raftnode: proposal larger than a peer frame")
	// ErrProposalDropped is raft's: this replica is not the leader (proposals
	// are not forwarded) or a leadership transfer is under way.
	ErrProposalDropped = raft.ErrProposalDropped
)

type proposal struct {
	data []byte
	cc   pb.ConfChangeI // a configuration change instead of data
	done func(error)
	// saved, instead of done (ProposeSaved): called once the entry is saved
	// in the leader's log, with its index and term.
	saved func(index, term uint64, err error)
}

// answer answers p with err (p was not appended to raft's log).
func (p *proposal) answer(err error) {
	if p.saved != nil {
		p.saved(0, 0, err)
		return
	}
	p.done(err)
}

// group is one raft group on this node.
//
// Ownership: rn, storage, voters, failed and the fields below "worker" belong
// to the worker processing the group (the scheduler runs a group on one
// worker at a time). The inbox fields are under inboxMu, a leaf but for
// Node.activeMu, which is taken under it (lock order: group.inboxMu →
// Node.activeMu), so that the quiesced flag and the node's active set change
// together. sched is under scheduler.mu.
type group struct {
	id   uint64
	node *Node

	sched uint8

	inboxMu     sync.Mutex
	messages    []inMessage
	proposals   []proposal
	unreachable []uint64
	ticks       int
	peerDown    []uint64 // nodes taken for down since the last run
	transferTo  uint64   // a leadership transfer asked for
	inspect     []func() // run by the worker (tests read worker-owned state)
	campaign    bool
	quiesced    bool

	// worker
	rn      *raft.RawNode
	storage Storage
	apply   func([]*pb.Entry)
	voters  []uint64
	// learners are told to quiesce with the voters.
	learners []uint64
	failed   error
	// campaignTicks > 0: this replica is the one to elect itself after its
	// leader's node went down; it campaigns again on each of that many
	// ticks while no leader is known (a pre-vote may reach a peer that has
	// not yet taken the node for down, and be refused).
	campaignTicks int
	// holdTicks > 0: the others hold their own election timers that many
	// ticks, so that their timers, started at the last heartbeat, do not
	// split the vote with the chosen replica's campaign.
	holdTicks int
	spareMsgs []inMessage
	spareProp []proposal
	// appended are this run's proposals raft appended, in order (nil for
	// those that wait for nothing): the last len(appended) entries of the
	// run's first Ready are theirs (handleReadys answers ProposeSaved's
	// after that Ready's Save).
	appended []func(index, term uint64, err error)
	onLeader func(leader, term uint64)
	// notifiedLeader and notifiedTerm are what onLeader was last told.
	notifiedLeader, notifiedTerm uint64

	// Read by anyone (Node.Leader and friends); written by the worker.
	leader atomic.Uint64
	term   atomic.Uint64
	commit atomic.Uint64
}

func newGroup(n *Node, gc GroupConfig) (*group, error) {
	if gc.Storage == nil {
		return nil, fmt.Errorf("raftnode: group %d without storage", gc.ID)
	}
	if err := bootstrap(gc.Storage, gc.Voters, gc.Learners); err != nil {
		return nil, fmt.Errorf("raftnode: group %d: bootstrap: %w", gc.ID, err)
	}
	rc := &raft.Config{
		ID:                        n.cfg.ID,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   gc.Storage,
		Applied:                   gc.Applied,
		MaxSizePerMsg:             n.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           n.cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		Logger:                    n.raftLog,
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("raftnode: group %d: %w", gc.ID, err)
	}
	_, cs, err := gc.Storage.InitialState()
	if err != nil {
		return nil, err
	}
	apply := gc.Apply
	if apply == nil {
		apply = func([]*pb.Entry) {}
	}
	g := &group{id: gc.ID, node: n, rn: rn, storage: gc.Storage, apply: apply, voters: slices.Clone(cs.GetVoters()),
		learners: slices.Clone(cs.GetLearners()), onLeader: gc.OnLeader}
	return g, nil
}

// deliver queues a peer's message; it wakes a quiescent group unless the
// message is one quiescence expects (a heartbeat response, or the quiesce
// heartbeat itself).
func (g *group) deliver(m inMessage) {
	g.inboxMu.Lock()
	g.messages = append(g.messages, m)
	if g.quiesced && wakes(m) {
		g.wakeLocked()
	}
	g.inboxMu.Unlock()
	g.node.sched.enqueue(g)
}

func wakes(m inMessage) bool {
	switch {
	case m.flags&flagWake != 0:
		return true
	case m.flags&flagQuiesce != 0:
		return false
	case m.msg.GetType() == pb.MessageType_MsgHeartbeatResp:
		return false
	}
	return true
}

// wakeLocked ends quiescence: the group ticks again.
func (g *group) wakeLocked() {
	g.quiesced = false
	g.node.activate(g)
}

func (g *group) propose(p proposal) {
	g.inboxMu.Lock()
	if g.node.stopped.Load() {
		// Stop has drained the proposals, or will: not this one.
		g.inboxMu.Unlock()
		p.answer(ErrStopped)
		return
	}
	g.proposals = append(g.proposals, p)
	if g.quiesced {
		g.wakeLocked()
	}
	g.inboxMu.Unlock()
	g.node.sched.enqueue(g)
}

// process is one run of the group on a worker: take the inbox, step raft,
// handle its Readys, then consider quiescence.
func (g *group) process() {
	g.inboxMu.Lock()
	msgs, props, unreachable, ticks, down := g.messages, g.proposals, g.unreachable, g.ticks, g.peerDown
	g.messages, g.proposals, g.unreachable, g.ticks, g.peerDown = g.spareMsgs[:0], g.spareProp[:0], nil, 0, nil
	quiesced, transferTo, inspect, campaign := g.quiesced, g.transferTo, g.inspect, g.campaign
	g.transferTo, g.inspect, g.campaign = 0, nil, false
	g.inboxMu.Unlock()
	defer func() {
		clear(msgs)
		clear(props)
		g.spareMsgs, g.spareProp = msgs[:0], props[:0]
	}()

	if g.failed != nil {
		for _, p := range props {
			p.answer(fmt.Errorf("%w: %v", ErrGroupFailed, g.failed))
		}
		return
	}
	g.node.stats.groupRuns.Add(1)
	// The messages first, then at most one tick: ticks that piled up while
	// the group waited for a worker count as one (CockroachDB coalesces
	// them too), so an overloaded node's groups see time pass more slowly
	// instead of election timeouts that their peers' queued heartbeats
	// would have prevented.
	var quiesceFrom uint64
	for _, m := range msgs {
		if err := g.step(m.msg); err != nil {
			g.fail(err)
			break
		}
		if m.flags&flagQuiesce != 0 {
			quiesceFrom = m.msg.GetFrom()
		}
	}
	if g.failed == nil {
		g.tick(ticks > 0)
		for _, peer := range down {
			g.peerIsDown(peer)
		}
		if transferTo != 0 {
			g.rn.TransferLeader(transferTo)
		}
		if campaign {
			_ = g.rn.Campaign()
		}
		for _, peer := range unreachable {
			g.rn.ReportUnreachable(peer)
		}
	}
	g.appended = g.appended[:0]
	for _, p := range props {
		if g.failed != nil {
			p.answer(fmt.Errorf("%w: %v", ErrGroupFailed, g.failed))
			continue
		}
		var err error
		if p.cc != nil {
			err = g.rn.ProposeConfChange(p.cc)
		} else {
			err = g.rn.Propose(p.data)
		}
		switch {
		case err != nil:
			p.answer(err)
		case p.saved != nil:
			g.appended = append(g.appended, p.saved)
		default:
			g.appended = append(g.appended, nil)
			p.done(nil)
		}
	}
	worked := g.handleReadys()
	for _, f := range inspect {
		f()
	}
	if g.failed != nil {
		return
	}
	if quiesced && worked {
		g.inboxMu.Lock()
		if g.quiesced {
			g.wakeLocked()
		}
		g.inboxMu.Unlock()
		quiesced = false
	}
	switch {
	case quiesceFrom != 0:
		g.followerQuiesce(quiesceFrom)
	case ticks > 0 && !quiesced:
		g.leaderQuiesce()
	}
}

// tick is the group's tick of this run, if it has one.
func (g *group) tick(ticked bool) {
	if !ticked {
		return
	}
	if g.holdTicks > 0 {
		g.holdTicks--
	} else {
		g.rn.Tick()
	}
	if g.campaignTicks > 0 {
		g.campaignTicks--
		if st := g.rn.BasicStatus(); st.Lead != 0 {
			g.campaignTicks = 0
		} else if st.RaftState == raft.StateFollower || st.RaftState == raft.StatePreCandidate {
			// A pre-vote refused in a peer's leader lease gets no answer:
			// ask again.
			_ = g.rn.Campaign()
		}
	}
}

// step gives raft one peer message. A message that makes raft panic (a
// hostile or broken peer: a heartbeat committing past the log's end, …) fails
// this group alone, never the node.
func (g *group) step(m *pb.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raft panicked on %v from node %d: %v", m.GetType(), m.GetFrom(), r)
		}
	}()
	if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) && !errors.Is(err, raft.ErrStepLocalMsg) {
		g.node.cfg.Logger.Debug("raft step", "group", g.id, "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
	}
	return nil
}

func (g *group) fail(err error) {
	g.failed = err
	g.node.stats.groupsFailed.Add(1)
	g.node.cfg.Logger.Error("raft group failed; it stops until the node restarts", "group", g.id, "err", err)
	g.leader.Store(0)
	g.answerAppended(nil, fmt.Errorf("%w: %v", ErrGroupFailed, err))
	g.notifyLeader(0, g.notifiedTerm)
}

// notifyLeader tells onLeader of a change of the known leader or term.
func (g *group) notifyLeader(leader, term uint64) {
	if leader == g.notifiedLeader && term == g.notifiedTerm {
		return
	}
	g.notifiedLeader, g.notifiedTerm = leader, term
	if g.onLeader != nil {
		g.onLeader(leader, term)
	}
}

// answerAppended answers this run's appended ProposeSaved proposals once
// entries, the Ready just saved, holds them (its last len(appended)
// entries); err (or entries too short to hold them all) answers them with
// an error. They are answered once: appended is emptied.
func (g *group) answerAppended(entries []*pb.Entry, err error) {
	if len(g.appended) == 0 {
		return
	}
	first := len(entries) - len(g.appended)
	if err == nil && first < 0 {
		err = fmt.Errorf("raftnode: group %d: %d proposals appended, the Ready holds %d entries", g.id, len(g.appended), len(entries))
	}
	for i, saved := range g.appended {
		if saved == nil {
			continue
		}
		if err != nil {
			saved(0, 0, err)
			continue
		}
		e := entries[first+i]
		saved(e.GetIndex(), e.GetTerm(), nil)
	}
	clear(g.appended)
	g.appended = g.appended[:0]
}

// handleReadys handles every Ready raft has, in raft's order: persist the
// snapshot, entries and hard state (the storage seam), then send the
// messages, then apply the committed entries, then Advance. It reports
// whether there was any.
func (g *group) handleReadys() bool {
	worked := false
	for g.rn.HasReady() {
		worked = true
		rd := g.rn.Ready()
		g.node.stats.readies.Add(1)
		if err := g.storage.Save(rd.HardState, rd.Entries, rd.Snapshot, rd.MustSync); err != nil {
			g.fail(fmt.Errorf("storage: %w", err))
			return worked
		}
		// The run's proposals are in this first Ready's entries: saved
		// now, in the leader's log (acks=1's "written").
		g.answerAppended(rd.Entries, nil)
		if !raft.IsEmptySnap(rd.Snapshot) {
			g.setMembers(rd.Snapshot.GetMetadata().GetConfState()) // a leader's snapshot installed
		}
		for _, m := range rd.Messages {
			g.node.transport.send(g.id, 0, m)
			if m.GetType() == pb.MessageType_MsgSnap {
				// The transport gives no receipt: raft's progress leaves
				// StateSnapshot for a probe now (etcd's raftexample reports
				// after the send too). A follower that installed it answers
				// with its new index; one that did not (a dropped frame) is
				// probed on the next heartbeat and sent a snapshot again.
				g.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFinish)
			}
		}
		leader, term := g.notifiedLeader, g.notifiedTerm
		if rd.SoftState != nil {
			leader = rd.SoftState.Lead
		}
		if rd.HardState != nil && rd.HardState.GetTerm() != 0 {
			term = rd.HardState.GetTerm()
		}
		g.notifyLeader(leader, term)
		if len(rd.CommittedEntries) > 0 {
			g.applyConfChanges(rd.CommittedEntries)
			if g.failed != nil {
				return worked
			}
			g.apply(rd.CommittedEntries)
		}
		if rd.SoftState != nil {
			g.leader.Store(rd.SoftState.Lead)
		}
		if rd.HardState != nil {
			g.term.Store(rd.HardState.GetTerm())
			g.commit.Store(rd.HardState.GetCommit())
		}
		g.rn.Advance(rd)
	}
	return worked
}

func (g *group) applyConfChanges(entries []*pb.Entry) {
	for _, e := range entries {
		var cc interface {
			pb.ConfChangeI
			proto.Message
		}
		switch e.GetType() {
		case pb.EntryType_EntryConfChange:
			cc = new(pb.ConfChange)
		case pb.EntryType_EntryConfChangeV2:
			cc = new(pb.ConfChangeV2)
		default:
			continue
		}
		if err := proto.Unmarshal(e.Data, cc); err != nil {
			g.fail(fmt.Errorf("entry %d: configuration change: %w", e.GetIndex(), err))
			return
		}
		cs := g.rn.ApplyConfChange(cc)
		if saver, ok := g.storage.(ConfStateSaver); ok {
			if err := saver.SaveConfState(e.GetIndex(), cs); err != nil {
				g.fail(fmt.Errorf("entry %d: recording the configuration: %w", e.GetIndex(), err))
				return
			}
		}
		g.setMembers(cs)
	}
}

// setMembers notes the voters and learners of cs (for quiescence and
// liveness).
func (g *group) setMembers(cs *pb.ConfState) {
	g.voters = slices.Clone(cs.GetVoters())
	g.learners = slices.Clone(cs.GetLearners())
}

// peerIsDown is run when node liveness takes peer for down: a follower
// whose leader was on it forgets that leader (so that it grants votes at
// once instead of waiting out the leader's lease), and the lowest-numbered
// voter still up campaigns right away, and again on its next ticks while
// no leader is known; the others hold their election timers for an
// election timeout meanwhile, then elect normally if that failed (split
// views of who is up).
func (g *group) peerIsDown(peer uint64) {
	st := g.rn.BasicStatus()
	if st.Lead != peer || st.RaftState == raft.StateLeader {
		return
	}
	_ = g.rn.ForgetLeader()
	for _, v := range g.voters {
		if v == peer || !g.node.transport.isUp(v) && v != g.node.cfg.ID {
			continue
		}
		if v == g.node.cfg.ID {
			_ = g.rn.Campaign()
			g.campaignTicks = g.node.cfg.ElectionTicks
		} else {
			g.holdTicks = g.node.cfg.ElectionTicks
		}
		return
	}
}

// lastIndex is the last index of the group's log. After handleReadys raft
// has nothing unstable, so the storage's last index is raft's.
func (g *group) lastIndex() uint64 {
	last, err := g.storage.LastIndex()
	if err != nil {
		return 0
	}
	return last
}

// leaderQuiesce quiesces a leader with nothing in flight: everything
// committed and applied, every follower's log matching its own, no transfer
// under way. It sends each follower a heartbeat carrying the commit index,
// flagged quiesce (CockroachDB's quiesce heartbeat), and stops ticking.
func (g *group) leaderQuiesce() {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || st.Applied != st.GetCommit() {
		return
	}
	last := g.lastIndex()
	if st.GetCommit() != last {
		return
	}
	caughtUp := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != g.node.cfg.ID && (pr.Match != last || pr.State != tracker.StateReplicate) {
			caughtUp = false
		}
	})
	if !caughtUp || !g.setQuiesced() {
		return
	}
	term, commit, from := st.GetTerm(), st.GetCommit(), g.node.cfg.ID
	for _, v := range slices.Concat(g.voters, g.learners) {
		if v == from {
			continue
		}
		g.node.transport.send(g.id, flagQuiesce, &pb.Message{
			Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(v), From: new(from),
			Term: new(term), Commit: new(commit),
		})
	}
}

// followerQuiesce follows the leader's quiesce heartbeat: a follower of that
// leader, in its term, with its log ending at the leader's commit index and
// everything applied, quiesces; one that is not caught up asks the leader to
// wake (flagWake), so the leader heartbeats until it is.
func (g *group) followerQuiesce(leader uint64) {
	st := g.rn.BasicStatus()
	if st.RaftState == raft.StateFollower && st.Lead == leader && st.Applied == st.GetCommit() &&
		g.lastIndex() == st.GetCommit() && g.setQuiesced() {
		return
	}
	from := g.node.cfg.ID
	g.node.transport.send(g.id, flagWake, &pb.Message{
		Type: pb.MessageType_MsgHeartbeatResp.Enum(), To: new(leader), From: new(from), Term: new(st.GetTerm()),
	})
}

// setQuiesced quiesces the group unless work arrived meanwhile.
func (g *group) setQuiesced() bool {
	g.inboxMu.Lock()
	defer g.inboxMu.Unlock()
	if len(g.messages) > 0 || len(g.proposals) > 0 || len(g.peerDown) > 0 {
		return false
	}
	g.quiesced = true
	g.node.deactivate(g)
	return true
}
