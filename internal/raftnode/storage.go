package raftnode

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Storage is a group's raft log and hard state: what raft reads (raft.Storage)
// plus what the scheduler calls to make a Ready durable.
//
// Save is called by the group's one worker at a time, in Ready order, before
// any message of that Ready is sent (raft's contract: entries and hard state
// are durable before the messages that depend on them leave). snap is nil or
// a snapshot to install (the log is replaced up to its index); entries follow
// it and may overwrite a conflicting tail (the storage truncates everything
// from entries[0].Index on); hs is nil when the hard state did not change.
// mustSync is raft's Ready.MustSync: when false, the write need not be
// fsynced (only the commit index moved). An error is sticky: the group stops
// and sends nothing more.
type Storage interface {
	raft.Storage
	Save(hs *pb.HardState, entries []*pb.Entry, snap *pb.Snapshot, mustSync bool) error
}

// ConfStateSaver is a Storage that records the configuration raft reaches
// by applying each configuration change (plog.RaftStorage: raft-conf), so
// that a group restarted with Applied past the change begins with it
// (raft takes the restart's ConfState from InitialState and re-applies no
// entry at or below Applied). SaveConfState is called by the group's
// worker after raft applied the change at entry index, before the entry
// is given to Apply; an error fails the group.
type ConfStateSaver interface {
	SaveConfState(index uint64, cs *pb.ConfState) error
}

// MemStorage is a group's storage in memory: etcd's raft.MemoryStorage, which
// is the reference implementation of raft.Storage, with Save applying a Ready
// to it. Nothing is fsynced (there is no disk); what it holds survives a Node
// stopped and started again in the same process, so tests restart nodes on it.
// The durable storage over the partition log (internal/plog) is step 2 of
// docs/replication.md.
type MemStorage struct {
	*raft.MemoryStorage
}

// NewMemStorage returns an empty in-memory storage.
func NewMemStorage() *MemStorage { return &MemStorage{raft.NewMemoryStorage()} }

// Save applies a Ready to memory: the snapshot, then the entries (truncating a
// conflicting tail), then the hard state.
func (s *MemStorage) Save(hs *pb.HardState, entries []*pb.Entry, snap *pb.Snapshot, _ bool) error {
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := s.ApplySnapshot(snap); err != nil {
			return err
		}
	}
	if len(entries) > 0 {
		if err := s.Append(entries); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := s.SetHardState(hs); err != nil {
			return err
		}
	}
	return nil
}

// bootstrapIndex is the index (and term) of the snapshot that holds a new
// group's first configuration. raft recommends a first index above 1 holding
// the ConfState over RawNode.Bootstrap (bootstrap.go), as CockroachDB does.
const bootstrapIndex = 1

// bootstrap gives an empty storage the group's first configuration: a
// snapshot at index 1, term 1 whose ConfState names the voters and learners,
// and the hard state that goes with it. Every replica bootstraps with the
// same configuration, so their logs agree at index 1. A storage that holds
// anything is left alone.
func bootstrap(s Storage, voters, learners []uint64) error {
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	hs, _, err := s.InitialState()
	if err != nil {
		return err
	}
	if last != 0 || !raft.IsEmptyHardState(hs) {
		return nil
	}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index:     new(uint64(bootstrapIndex)),
		Term:      new(uint64(bootstrapIndex)),
		ConfState: &pb.ConfState{Voters: append([]uint64(nil), voters...), Learners: append([]uint64(nil), learners...)},
	}}
	state := &pb.HardState{Term: new(uint64(bootstrapIndex)), Commit: new(uint64(bootstrapIndex))}
	return s.Save(state, nil, snap, true)
}
