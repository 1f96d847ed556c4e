// Package replica makes a replicated partition: a plog raft log
// (plog.RaftStorage and its Log) served by one raft group of an
// internal/raftnode Node (docs/replication.md section 3c). It is the glue
// between the two packages, which know nothing of each other: plog has the
// log's rules (validation, offsets, producer sequences, transactions, the
// high watermark), raftnode the consensus; here the group's proposals,
// committed entries and leadership are wired to the log.
//
// A broker creates one Partition per local replica of a partition with
// Open, reads and appends through Partition.Log as for a single-node
// partition (Append/Enqueue answer plog.ErrNotLeader, which internal/api
// maps to NOT_LEADER_OR_FOLLOWER, on a replica that does not lead), and
// learns of leadership changes through Config.OnLeader. The leader keeps
// the partition's in-sync replicas (Partition.ISR) from raft's progress and
// applies min.insync.replicas to acks=all appends (docs/replication.md
// §3d); Partition.Close takes the group off the node, so a deleted
// partition closes while the node runs.
package replica

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/raftnode"
)

// Config is one replica of a partition.
type Config struct {
	// Node runs the partition's raft group; its id is this replica's.
	Node *raftnode.Node
	// Group is the group's id, the same on every replica (the partition).
	Group uint64
	// Voters are the replicas' node ids (raft ids) of a new partition, the
	// same on every replica; ignored when the log already holds a group.
	Voters []uint64
	// Log is the partition's log configuration (plog.DefaultConfig; its
	// WritePath must be WriteSyscall).
	Log plog.Config
	// OnLeader, when set, is told of every change of the leader this
	// replica knows (node id, 0 for none) and term, in order, from the
	// group's worker: it must not block (the broker's Metadata cache, the
	// coordinators' moves). It is called after the log itself has learnt
	// of the change (an append refused or taken accordingly).
	OnLeader func(leader, term uint64)
	// MinInsyncReplicas is the topic's min.insync.replicas (Kafka's
	// default is 1, internal/api's Defaults): an acks=all append is refused
	// (plog.ErrNotEnoughReplicas) while fewer replicas are in sync, leader
	// included, and answered only once that many in-sync replicas hold
	// it. 0 and 1 ask nothing beyond raft's commit. SetMinInsyncReplicas
	// changes it (AlterConfigs).
	MinInsyncReplicas int
	// ReplicaLagTimeMax is replica.lag.time.max.ms (a broker config in
	// Kafka): a follower is in sync while it was last known caught up
	// with the leader's log at most this long ago
	// (DefaultReplicaLagTimeMax when 0). Counted in the node's ticks.
	ReplicaLagTimeMax time.Duration
}

// DefaultReplicaLagTimeMax is Kafka's replica.lag.time.max.ms (30 s).
const DefaultReplicaLagTimeMax = 30 * time.Second

// Partition is one replica of a replicated partition.
//
// The acks=all answers waiting for min.insync.replicas (waiters) are under
// mu, taken under the log's locks (AwaitReplicated) and never held while
// answering one (lock order: plog's RaftStorage.rmu → RaftStorage.mu → mu →
// raftnode's group locks, through Node.Replicas).
type Partition struct {
	node     *raftnode.Node
	group    uint64
	storage  *plog.RaftStorage
	minISR   atomic.Int64
	lagTicks int64 // ReplicaLagTimeMax in the node's ticks

	mu       sync.Mutex
	waiters  []waiter                   // (mu) in index order
	progress []raftnode.ReplicaProgress // (mu) Node.Replicas' buffer
	inSync   []raftnode.ReplicaProgress // (mu) inSyncLocked's buffer
}

// waiter is an acks=all answer waiting for min.insync.replicas in-sync
// replicas to hold its entry.
type waiter struct {
	index uint64
	done  func(error)
}

// Open opens (recovering) or creates the partition's raft log in
// cfg.Log.Dir and adds its group to cfg.Node (started or not). The group
// restarts with Applied = the log's applied index: raft delivers the
// committed entries after it again, and the log applies them.
func Open(cfg Config) (*Partition, error) {
	if cfg.Node == nil {
		return nil, errors.New("replica: no raft node")
	}
	rs, err := plog.OpenRaftStorage(cfg.Log)
	if err != nil {
		return nil, err
	}
	p := &Partition{node: cfg.Node, group: cfg.Group, storage: rs}
	p.minISR.Store(int64(cfg.MinInsyncReplicas))
	lag := cfg.ReplicaLagTimeMax
	if lag == 0 {
		lag = DefaultReplicaLagTimeMax
	}
	tick := cfg.Node.TickInterval()
	p.lagTicks = int64((lag + tick - 1) / tick)
	self := cfg.Node.ID()
	rs.SetProposer((*proposer)(p))
	err = cfg.Node.AddGroup(raftnode.GroupConfig{
		ID:         cfg.Group,
		Voters:     cfg.Voters,
		Storage:    rs,
		Applied:    rs.Applied(),
		Apply:      rs.Apply,
		OnProgress: p.progressed,
		OnLeader: func(leader, term uint64) {
			rs.LeaderChanged(leader == self, term)
			if leader != self {
				p.answerWaiters(fmt.Errorf("%w: leadership lost before enough in-sync replicas held the batch", plog.ErrNotLeader))
			}
			if cfg.OnLeader != nil {
				cfg.OnLeader(leader, term)
			}
		},
	})
	if err != nil {
		rs.Close()
		return nil, fmt.Errorf("replica: partition group %d: %w", cfg.Group, err)
	}
	return p, nil
}

// proposer is the log's Proposer (plog.Proposer): the partition's group and
// its in-sync replicas.
type proposer Partition

// Propose proposes through raftnode, its errors as the log's.
func (pr *proposer) Propose(data []byte, done func(index, term uint64, err error)) {
	p := (*Partition)(pr)
	p.node.ProposeSaved(p.group, data, func(index, term uint64, err error) {
		done(index, term, proposeError(err))
	})
}

// EnoughInSync refuses an acks=all append while fewer replicas are in sync
// than min.insync.replicas (Kafka's Partition.appendRecordsToLeader).
func (pr *proposer) EnoughInSync() error {
	p := (*Partition)(pr)
	minISR := int(p.minISR.Load())
	if minISR <= 1 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	inSync, leading := p.inSyncLocked()
	switch {
	case !leading:
		return plog.ErrNotLeader
	case len(inSync) < minISR:
		return fmt.Errorf("%w: %d in sync (%v), min.insync.replicas %d", plog.ErrNotEnoughReplicas, len(inSync), ids(inSync), minISR)
	}
	return nil
}

// AwaitReplicated answers an applied acks=all entry once enough in-sync
// replicas hold it (Kafka's Partition.checkEnoughReplicasReachOffset).
func (pr *proposer) AwaitReplicated(index uint64, done func(error)) (bool, error) {
	p := (*Partition)(pr)
	if p.minISR.Load() <= 1 {
		return true, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ready, err := p.replicatedLocked(index, int(p.minISR.Load())); ready {
		return true, err
	}
	p.waiters = append(p.waiters, waiter{index: index, done: done})
	return false, nil
}

// inSyncLocked is the partition's in-sync replicas as this replica knows
// them (a buffer of p's): the leader, and each voter caught up with the
// leader's log within the lag time; leading false (and none) when this
// replica does not lead.
func (p *Partition) inSyncLocked() (inSync []raftnode.ReplicaProgress, leading bool) {
	progress, term, now := p.node.Replicas(p.group, p.progress[:0])
	p.progress = progress
	inSync = p.inSync[:0]
	for _, r := range progress {
		if r.CaughtUp && now-r.CaughtUpTick <= p.lagTicks {
			inSync = append(inSync, r)
		}
	}
	p.inSync = inSync
	return inSync, term != 0
}

// replicatedLocked decides an acks=all entry at index, applied: ready with
// nil once minISR in-sync replicas hold it; ready with
// ErrNotEnoughReplicasAfterAppend when fewer than minISR are in sync (Kafka
// answers so once its high watermark, which only the in-sync replicas
// hold back, passed the batch); ErrNotLeader when this replica does not
// lead; else not ready (an in-sync follower still catching up).
func (p *Partition) replicatedLocked(index uint64, minISR int) (bool, error) {
	inSync, leading := p.inSyncLocked()
	if !leading {
		return true, fmt.Errorf("%w: leadership lost before enough in-sync replicas held the batch", plog.ErrNotLeader)
	}
	holding := 0
	for _, r := range inSync {
		if r.Match >= index {
			holding++
		}
	}
	switch {
	case holding >= minISR:
		return true, nil
	case len(inSync) < minISR:
		return true, fmt.Errorf("%w: %d in sync (%v), min.insync.replicas %d", plog.ErrNotEnoughReplicasAfterAppend, len(inSync), ids(inSync), minISR)
	}
	return false, nil
}

// progressed is the group's OnProgress: the waiting answers decided by the
// leader's latest view of its followers are given.
func (p *Partition) progressed() {
	p.mu.Lock()
	if len(p.waiters) == 0 {
		p.mu.Unlock()
		return
	}
	type answer struct {
		done func(error)
		err  error
	}
	var answers []answer
	minISR := int(p.minISR.Load())
	p.waiters = slices.DeleteFunc(p.waiters, func(w waiter) bool {
		ready, err := true, error(nil)
		if minISR > 1 {
			ready, err = p.replicatedLocked(w.index, minISR)
		}
		if ready {
			answers = append(answers, answer{w.done, err})
		}
		return ready
	})
	p.mu.Unlock()
	for _, a := range answers {
		a.done(a.err)
	}
}

// answerWaiters answers every waiting acks=all append with err.
func (p *Partition) answerWaiters(err error) {
	p.mu.Lock()
	waiters := p.waiters
	p.waiters = nil
	p.mu.Unlock()
	for _, w := range waiters {
		w.done(err)
	}
}

// ISR is the partition's in-sync replicas (raft ids, ascending) as its
// leader sees them: the leader itself, and each voter known caught up with
// the leader's log within ReplicaLagTimeMax. Nil on a replica that does not
// lead: as in Kafka, where followers do not keep the ISR, the broker reports
// the leader's (Metadata answered on the node that leads).
func (p *Partition) ISR() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	inSync, _ := p.inSyncLocked()
	out := ids(inSync)
	slices.Sort(out)
	return out
}

// SetMinInsyncReplicas changes min.insync.replicas (an AlterConfigs of the
// topic); the waiting acks=all answers are decided again by it.
func (p *Partition) SetMinInsyncReplicas(n int) {
	p.minISR.Store(int64(n))
	p.progressed()
}

func ids(rs []raftnode.ReplicaProgress) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// proposeError maps raftnode's proposal errors to plog's, which
// internal/api maps to Kafka's codes.
func proposeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftnode.ErrProposalTooLarge):
		return fmt.Errorf("%w: %v", plog.ErrBatchTooLarge, err)
	}
	// Not the leader, a transfer under way, the node stopped, the group
	// failed: the client refreshes its metadata and retries elsewhere.
	return fmt.Errorf("%w: %v", plog.ErrNotLeader, err)
}

// Log is the partition's log: Read, ReadCommitted, Wait, HighWatermark (the
// committed end, on every replica), Append and Enqueue (on the leader).
func (p *Partition) Log() *plog.Log { return p.storage.Log() }

// Storage is the partition's raft storage.
func (p *Partition) Storage() *plog.RaftStorage { return p.storage }

// Leading reports whether this replica leads and takes appends (it has
// applied an entry of its own term).
func (p *Partition) Leading() bool { return p.storage.Leading() }

// Leader is the leader this replica knows (0: none) and its term.
func (p *Partition) Leader() (leader, term uint64) { return p.node.Leader(p.group) }

// Close takes the partition's group off the node (raftnode's RemoveGroup:
// its appends in flight are answered ErrNotLeader) and closes the log: a
// deleted partition closes while the node runs. Do not call it from a
// callback of the node's groups (OnLeader, …).
func (p *Partition) Close() error {
	if err := p.node.RemoveGroup(p.group); err != nil && !errors.Is(err, raftnode.ErrUnknownGroup) {
		return err
	}
	p.answerWaiters(fmt.Errorf("%w: the partition closed", plog.ErrNotLeader))
	return p.storage.Close()
}
