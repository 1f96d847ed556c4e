package coordloop

import (
	"log/slog"
	"sync"
	"time"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/kvlog"
	"github.com/sushka-io/sushka/internal/plog"
)

// Coordinator shards that move with leadership (docs/replication.md 4d).
//
// When an internal topic's partitions are replicated (internal/replica),
// a coordinator serves the owners (groups, transactional ids) of a
// partition only while this node leads it: each partition is a shard of
// the coordinator's state whose life follows the partition's leadership,
// as Kafka's CoordinatorRuntime (group-coordinator,
// scheduleLoadOperation / scheduleUnloadOperation) drives its
// coordinators from the partition's election and resignation:
//
//   - elected (the replica reports this node leader in a term newer than
//     the shard's epoch): the shard goes LOADING with the term as its
//     epoch; a load waits until the replica takes appends (its term's
//     first entry applied: everything committed is in the log), replays
//     the log up to its high watermark off the loop's goroutine, and hands
//     the records to the loop, which makes the shard ACTIVE only if its
//     epoch is still that term and the replica still leads in it (Kafka's
//     CompleteLoad epoch check). Otherwise the replay is abandoned.
//   - resigned (another leader, none, or a write answered ErrNotLeader):
//     the shard goes UNLOADED at once. The machine's UnloadPartition
//     answers the requests waiting on it NOT_COORDINATOR and forgets its
//     state (timers with it); the store resigns the partition, so the
//     appends for it fail, and the driver answers them NOT_COORDINATOR.
//   - elected again in a newer term: a new load, from the log, never the
//     state of before (which was dropped).

// Replica is one local replica of an internal topic's partition as a
// shard follows it: internal/replica.Partition.
type Replica interface {
	// Log is the partition's log: read by the replay, appended by the
	// store while the shard is active.
	Log() *plog.Log
	// Leading reports whether the replica takes appends (it leads and has
	// applied an entry of its own term).
	Leading() bool
	// Leader is the leader the replica knows (0: none) and its term.
	Leader() (leader, term uint64)
}

// ShardMachine is the coordinator as its shards load and unload it; both
// run on the loop's goroutine.
type ShardMachine interface {
	// LoadPartition replays a partition's records (oldest first) and
	// serves its owners.
	LoadPartition(p int32, records []kvlog.Record) error
	// UnloadPartition forgets a partition's owners and answers the
	// requests waiting on them NOT_COORDINATOR (also called for a
	// partition not loaded: it ends LoadingPartition).
	UnloadPartition(p int32)
	// LoadingPartition marks an unloaded partition as being replayed:
	// its owners answer COORDINATOR_LOAD_IN_PROGRESS until
	// LoadPartition or UnloadPartition.
	LoadingPartition(p int32)
}

// PartitionSet is a set of an internal topic's partitions (nil: none):
// the coordinators' unloaded and loading partitions.
type PartitionSet map[int32]bool

// Add puts p in the set, making it if nil.
func (s *PartitionSet) Add(p int32) {
	if *s == nil {
		*s = PartitionSet{}
	}
	(*s)[p] = true
}

// Replicated is what a coordinator's Service is given to serve an
// internal topic's replicated partitions (group.ServiceConfig,
// txn.ServiceConfig).
type Replicated struct {
	// Self is this node's raft id, as Replica.Leader names leaders.
	Self uint64
	// Replicas are the internal topic's partitions, one per partition
	// (their number is the topic's partition count); a nil entry is a
	// partition with no replica here (never led).
	Replicas []Replica
	// AfterReplay, when set, is called by a load after it read the log
	// and before it hands the records to the loop (tests: leadership lost
	// while a replay runs).
	AfterReplay func(p int32, term uint64)
}

// ShardsConfig configures the shards of a coordinator.
type ShardsConfig struct {
	Replicated
	// Store is the coordinator's store (kvlog.NewReplicatedStore).
	Store   *kvlog.Store
	Machine ShardMachine
	// Post runs a function on the coordinator's loop (Loop.Post).
	Post   func(fn func()) bool
	Clock  clock.Clock // default clock.Real{}
	Logger *slog.Logger
}

type shardState int

const (
	shardUnloaded shardState = iota
	shardLoading
	shardActive
)

type shard struct {
	state shardState
	epoch uint64        // the term the shard loads or serves
	stop  chan struct{} // closed when the load of epoch is abandoned
}

type leadership struct{ leader, term uint64 }

// Shards drives a coordinator's partitions from their replicas'
// leadership.
type Shards struct {
	cfg ShardsConfig
	log *slog.Logger

	mu     sync.Mutex
	latest []leadership // what the replicas last reported, per partition
	closed bool
	loads  sync.WaitGroup

	// Owned by the loop's goroutine.
	shards []shard
}

// leadingPoll bounds how long a load waits before it looks at the
// replica again (it wakes when the high watermark moves, which taking
// appends does, or when it is abandoned).
const leadingPoll = 20 * time.Millisecond

// NewReplicated returns the loop of m, whose store is a replicated one,
// and the shards that drive m's partitions from rep's replicas; start the
// loop, then the shards.
func NewReplicated[Req, Resp any, M interface {
	Machine[Req, Resp]
	ShardMachine
}](m M, store *kvlog.Store, clk clock.Clock, idle time.Duration, closed error, rep Replicated, logger *slog.Logger) (*Loop[Req, Resp], *Shards) {
	loop := New[Req, Resp](m, store, clk, idle, closed)
	return loop, NewShards(ShardsConfig{Replicated: rep, Store: store, Machine: m, Post: loop.Post, Clock: clk, Logger: logger})
}

// NewShards returns the shards of cfg's partitions, all unloaded (the
// machine's UnloadPartition for each: call it before the loop starts);
// Start reconciles them with their replicas' leadership.
func NewShards(cfg ShardsConfig) *Shards {
	for p := range cfg.Replicas {
		cfg.Machine.UnloadPartition(int32(p))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Shards{cfg: cfg, log: cfg.Logger, latest: make([]leadership, len(cfg.Replicas)), shards: make([]shard, len(cfg.Replicas))}
}

// Start looks at every replica's leadership once (a change reported
// before the coordinator existed is not missed) and loads the partitions
// this node leads.
func (s *Shards) Start() {
	for p, r := range s.cfg.Replicas {
		if r != nil {
			leader, term := r.Leader()
			s.LeaderChanged(int32(p), leader, term)
		}
	}
}

// LeaderChanged tells the shards of a change of partition p's leader
// (replica.Config.OnLeader). It never blocks: the change is handed to the
// loop by a goroutine of its own, and the loop acts on the latest
// leadership reported, so the order in which such hand-offs arrive does
// not matter.
func (s *Shards) LeaderChanged(p int32, leader, term uint64) {
	if p < 0 || int(p) >= len(s.latest) {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if term >= s.latest[p].term {
		s.latest[p] = leadership{leader, term}
	}
	s.mu.Unlock()
	go s.cfg.Post(func() { s.reconcile(p) })
}

func (s *Shards) leadershipOf(p int32) leadership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest[p]
}

// reconcile brings shard p to the latest leadership reported. Loop
// goroutine.
func (s *Shards) reconcile(p int32) {
	lt := s.leadershipOf(p)
	sh := &s.shards[p]
	if lt.leader != s.cfg.Self || s.cfg.Replicas[p] == nil {
		s.unload(p, "another leader")
		return
	}
	if sh.state != shardUnloaded && sh.epoch == lt.term {
		return // loading or serving this term already
	}
	if lt.term < sh.epoch {
		return // Kafka's "current epoch is larger": a stale report
	}
	s.unload(p, "a newer term") // an older term's state is never served again
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.loads.Add(1)
	s.mu.Unlock()
	*sh = shard{state: shardLoading, epoch: lt.term, stop: make(chan struct{})}
	s.cfg.Machine.LoadingPartition(p)
	s.log.Info(s.cfg.Store.Topic()+" partition elected: loading", "partition", p, "term", lt.term)
	go s.load(p, lt.term, sh.stop)
}

// Lost takes shard p out of service after a write to its partition failed
// (the store resigned it): if this node still leads it, it loads again.
// Loop goroutine.
func (s *Shards) Lost(p int32) {
	if p < 0 || int(p) >= len(s.shards) {
		return
	}
	s.unload(p, "a write failed")
	s.reconcile(p)
}

// unload makes shard p unloaded: a load in flight is abandoned, a served
// partition is forgotten. Loop goroutine.
func (s *Shards) unload(p int32, why string) {
	sh := &s.shards[p]
	switch sh.state {
	case shardUnloaded:
		return
	case shardLoading:
		close(sh.stop)
		s.cfg.Machine.UnloadPartition(p) // no longer loading
	case shardActive:
		s.cfg.Store.Resign(p)
		s.cfg.Machine.UnloadPartition(p)
	}
	s.log.Info(s.cfg.Store.Topic()+" partition resigned: unloaded", "partition", p, "term", sh.epoch, "why", why)
	sh.state, sh.stop = shardUnloaded, nil
}

// load waits until the replica takes appends in term, replays its log and
// hands the records to the loop. Its own goroutine.
func (s *Shards) load(p int32, term uint64, stop chan struct{}) {
	defer s.loads.Done()
	r := s.cfg.Replicas[p]
	poll := time.NewTimer(leadingPoll)
	defer poll.Stop()
	for {
		moved := r.Log().Wait()
		// The replica's Leader catches up with what OnLeader reported
		// only after that Ready's apply: a lag is waited out, a newer
		// term ends the load (its reconcile follows).
		leader, t := r.Leader()
		if t > term {
			return
		}
		if leader == s.cfg.Self && t == term && r.Leading() {
			break
		}
		poll.Reset(leadingPoll)
		select {
		case <-moved:
		case <-poll.C:
		case <-stop:
			return
		}
	}
	started := s.cfg.Clock.Now()
	records, err := kvlog.ReplayLog(r.Log(), p)
	if s.cfg.AfterReplay != nil {
		s.cfg.AfterReplay(p, term)
	}
	s.cfg.Post(func() { s.loaded(p, term, stop, records, err, s.cfg.Clock.Now().Sub(started)) })
}

// loaded makes shard p active with the replayed records if it still loads
// term and the replica still leads in it; otherwise the replay is
// abandoned. Loop goroutine.
func (s *Shards) loaded(p int32, term uint64, stop chan struct{}, records []kvlog.Record, err error, took time.Duration) {
	sh := &s.shards[p]
	if sh.state != shardLoading || sh.epoch != term || sh.stop != stop {
		s.log.Info(s.cfg.Store.Topic()+" partition replay abandoned", "partition", p, "term", term)
		return
	}
	r := s.cfg.Replicas[p]
	if leader, t := r.Leader(); err == nil && (leader != s.cfg.Self || t != term || !r.Leading()) {
		s.log.Info(s.cfg.Store.Topic()+" partition replay abandoned: leadership moved", "partition", p, "term", term)
		sh.state, sh.stop = shardUnloaded, nil
		s.cfg.Machine.UnloadPartition(p)
		s.reconcile(p) // loads again if this node still leads
		return
	}
	if err == nil {
		s.cfg.Store.Lead(p, r.Log(), records)
		if err = s.cfg.Machine.LoadPartition(p, records); err != nil {
			s.cfg.Store.Resign(p)
			s.cfg.Machine.UnloadPartition(p)
		}
	}
	if err != nil {
		// Kafka's FAILED: the partition stays unserved until this node is
		// elected again.
		s.log.Error(s.cfg.Store.Topic()+" partition replay failed; its owners answer NOT_COORDINATOR", "partition", p, "term", term, "err", err)
		sh.state, sh.stop = shardUnloaded, nil
		s.cfg.Machine.UnloadPartition(p)
		return
	}
	sh.state = shardActive
	s.log.Info(s.cfg.Store.Topic()+" partition loaded", "partition", p, "term", term, "records", len(records), "took", took.Round(time.Millisecond))
}

// Active reports whether shard p serves (and in which term). Loop
// goroutine.
func (s *Shards) Active(p int32) (term uint64, ok bool) {
	if p < 0 || int(p) >= len(s.shards) {
		return 0, false
	}
	sh := s.shards[p]
	return sh.epoch, sh.state == shardActive
}

// Close abandons the loads in flight and waits for them; reports after it
// are ignored. Call it before stopping the loop.
func (s *Shards) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	abandon := func() {
		for p := range s.shards {
			if s.shards[p].state == shardLoading {
				close(s.shards[p].stop)
				s.shards[p].state, s.shards[p].stop = shardUnloaded, nil
				s.cfg.Machine.UnloadPartition(int32(p))
			}
		}
	}
	done := make(chan struct{})
	if s.cfg.Post(func() { abandon(); close(done) }) {
		<-done
	} else {
		abandon() // the loop has stopped: nothing else touches the shards
	}
	s.loads.Wait()
}
