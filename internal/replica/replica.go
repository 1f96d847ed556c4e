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
// learns of leadership changes through Config.OnLeader.
package replica

import (
	"errors"
	"fmt"

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
}

// Partition is one replica of a replicated partition.
type Partition struct {
	node    *raftnode.Node
	group   uint64
	storage *plog.RaftStorage
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
	self := cfg.Node.ID()
	rs.SetProposer(p.propose)
	err = cfg.Node.AddGroup(raftnode.GroupConfig{
		ID:      cfg.Group,
		Voters:  cfg.Voters,
		Storage: rs,
		Applied: rs.Applied(),
		Apply:   rs.Apply,
		OnLeader: func(leader, term uint64) {
			rs.LeaderChanged(leader == self, term)
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

// propose is the log's Proposer: raftnode's errors as the log's.
func (p *Partition) propose(data []byte, done func(index, term uint64, err error)) {
	p.node.ProposeSaved(p.group, data, func(index, term uint64, err error) {
		done(index, term, proposeError(err))
	})
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

// Close closes the log; its appends in flight are answered ErrNotLeader.
// The group stays on the node until the node stops (raftnode has no
// RemoveGroup yet): close partitions after Node.Stop.
func (p *Partition) Close() error { return p.storage.Close() }
