// Package raftnode runs many raft groups on one node: one group per
// partition (docs/replication.md section 3), consensus from etcd's
// go.etcd.io/raft/v3, each group a RawNode (no goroutine per group) over
// this package's Storage seam.
//
// # Pieces
//
//   - Storage (storage.go): raft.Storage plus Save, which makes a Ready's
//     snapshot, entries and hard state durable. MemStorage is etcd's
//     MemoryStorage behind it: complete, in memory, no fsync; for tests and
//     an in-memory mode. The durable storage over the partition log
//     (internal/plog, the raft index array) is step 2 of the design and
//     plugs in here.
//   - The scheduler (scheduler.go): a fixed pool of workers (GOMAXPROCS)
//     runs the groups that have work (a proposal, a message, a tick). A
//     group is queued at most once and run by one worker at a time, so its
//     Readys are handled in order, each in raft's order: Save (entries and
//     hard state durable) → send the messages → apply the committed entries
//     (GroupConfig.Apply) → Advance (group.go, handleReadys).
//   - The ticker (node.go, Tick): one per node (100 ms; election 10 ticks,
//     heartbeat 1), ticking only the groups that are not quiescent. A group
//     steps its queued messages before its tick, and ticks that piled up
//     while it waited for a worker count as one: an overloaded node's
//     groups see time slow down rather than spurious elections.
//   - Quiescence (CockroachDB's): a leader with everything committed and
//     applied and every follower's log matching its own sends each
//     follower a heartbeat flagged quiesce (carrying the commit index) and
//     stops ticking; a follower caught up with it stops too, one that is
//     not answers flagged wake. A proposal, or any message but a heartbeat
//     response, wakes a group. Liveness of quiescent groups is the node's:
//     each node sends every peer one (empty) frame per tick at least, and a
//     peer not heard from for ElectionTicks ticks is down: every group
//     shared with it wakes, its followers of a leader there forget that
//     leader, and the lowest-numbered voter still up campaigns at once. So
//     an idle node does no per-group work per tick, and its goroutines are
//     O(peers), not O(groups).
//   - The transport (transport.go, frame.go): one TCP connection per ordered
//     pair of nodes, frames of (group, raftpb.Message) batches drained from
//     each peer's bounded queue (coalescing), a dropped message reported to
//     raft as an unreachable peer, reconnection with back-off, frames
//     bounded and checked (frame.go has the format): a bad frame closes its
//     connection with a log line, and a message that makes raft panic fails
//     its group alone.
//
// # Lock order
//
// group.inboxMu → Node.activeMu (a group's quiesced flag and the node's set
// of ticking groups change together); group.inboxMu → group.syncMu (the
// leader's caught-up table, insync.go) → transport.mu (read); Node.groupsMu, transport.mu,
// peer.mu and scheduler.mu are leaves (never held while taking another,
// but transport.mu → peer.mu in tick and addPeer). Nothing is held while
// raft runs, while Storage.Save runs or while a connection is written.
//
// Proposals: Propose answers once raft appended the entry (in memory),
// ProposeSaved once the Save holding it returned, with its index and term
// (a replicated partition's acks=1, and the key to tell its own committed
// entry from a new leader's at the same index). GroupConfig.OnLeader
// observes each change of the known leader or term (internal/replica: the
// broker's NOT_LEADER_OR_FOLLOWER and Metadata). Node.Replicas and
// GroupConfig.OnProgress give a leader's view of its voters' replication
// (the ISR and min.insync.replicas of internal/replica); Node.RemoveGroup
// takes a group off a running node (a deleted partition).
//
// Proposals are not forwarded (raft's DisableProposalForwarding): a replica
// that is not the leader answers ErrProposalDropped, as a Kafka broker that
// does not lead a partition answers NOT_LEADER_OR_FOLLOWER. CheckQuorum and
// PreVote are on: a leader cut off from its majority steps down after an
// election timeout, and a rejoining node does not disrupt a working leader.
package raftnode
