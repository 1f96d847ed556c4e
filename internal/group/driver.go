package group

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/coordloop"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/kvlog"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/vfs"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("group: coordinator closed")

// ErrUnsupported is returned by Do for a request type the coordinator has
// no answer for (not a group request, and without an error response in
// internal/errresp): the caller closes the connection, as Kafka does for a
// request it cannot answer.
var ErrUnsupported = errors.New("group: the coordinator cannot answer this request type")

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Coordinator Config
	FS          vfs.FS
	DataDir     string
	Clock       clock.Clock // default clock.Real{}
	Logger      *slog.Logger
	WritePath   plog.WritePath

	// CompactAfterBytes and OffsetsSegmentBytes tune the
	// __consumer_offsets store (StoreConfig); zero takes the defaults.
	CompactAfterBytes   int64
	OffsetsSegmentBytes int64
	// OffsetsMaxBatchBytes bounds one batch of __consumer_offsets
	// (StoreConfig.MaxBatchBytes); zero takes the default, 64 MiB.
	OffsetsMaxBatchBytes int

	// Replicated, when set, makes __consumer_offsets its replicated
	// partitions (OffsetsPartitions is then their number; FS, DataDir and
	// the store's tuning are unused): a partition's groups are served only
	// while this node leads it, loaded from its log when elected, dropped
	// when it resigns (coordloop.Shards; docs/replication.md 4d). The
	// broker reports leadership with LeaderChanged.
	Replicated *coordloop.Replicated
}

// Service is the driver: the one goroutine (a coordloop.Loop) that owns a
// Coordinator and the __consumer_offsets Store. It feeds requests and ticks
// to the state machine, persists each Ready's records (AckForced) and only
// then releases its responses.
type Service struct {
	cfg   ServiceConfig
	log   *slog.Logger
	store *Store
	loop  *coordloop.Loop[Request, kmsg.Response]
	// shards follow the partitions' leadership (nil: not replicated).
	shards *coordloop.Shards

	// Owned by the loop's goroutine.
	c *Coordinator
}

// machine is the coordinator as its loop drives it (coordloop.Machine):
// its Tick, NextDeadline and LoadPartition, the Service's Flush.
type machine struct {
	*Coordinator
	s *Service
}

func (m machine) Handle(id uint64, now time.Time, req Request) Request {
	req.ID, req.Now = id, now
	m.Coordinator.Handle(req)
	return req
}
func (m machine) Flush() { m.s.flush() }
func (m machine) Stopped(req Request) kmsg.Response {
	return errresp.For(req.Body, kerr.CoordinatorNotAvailable.Code)
}

// Start opens the store, replays it into a new coordinator and starts the
// driver.
func Start(cfg ServiceConfig) (*Service, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Replicated != nil {
		return startReplicated(cfg)
	}
	cfg.Coordinator.setDefaults()
	started := time.Now()
	store, records, err := OpenStore(StoreConfig{
		FS:         cfg.FS,
		DataDir:    cfg.DataDir,
		Partitions: cfg.Coordinator.OffsetsPartitions,
		Clock:      cfg.Clock,
		Logger:     cfg.Logger,
		WritePath:  cfg.WritePath,

		CompactAfterBytes: cfg.CompactAfterBytes,
		SegmentBytes:      cfg.OffsetsSegmentBytes,
		MaxBatchBytes:     cfg.OffsetsMaxBatchBytes,
	})
	if err != nil {
		return nil, err
	}
	c := New(cfg.Coordinator)
	if err := c.Load(records); err != nil {
		store.Close()
		return nil, err
	}
	c.Loaded(cfg.Clock.Now())
	s := &Service{
		cfg:   cfg,
		log:   cfg.Logger,
		store: store,
		c:     c,
	}
	s.loop = coordloop.New[Request, kmsg.Response](machine{c, s}, store, cfg.Clock, idleTick, ErrClosed)
	s.log.Info("group coordinator loaded", "records", len(records), "groups", len(c.groups), "took", time.Since(started).Round(time.Millisecond))
	s.loop.Start()
	return s, nil
}

// startReplicated starts a Service over replicated partitions: every
// partition unloaded until its shard loads it.
func startReplicated(cfg ServiceConfig) (*Service, error) {
	cfg.Coordinator.OffsetsPartitions = int32(len(cfg.Replicated.Replicas))
	if cfg.Coordinator.OffsetsPartitions == 0 {
		return nil, errors.New("group: a replicated " + OffsetsTopic + " with no partitions")
	}
	cfg.Coordinator.setDefaults()
	store := kvlog.NewReplicatedStore(StoreConfig{Topic: OffsetsTopic, Partitions: cfg.Coordinator.OffsetsPartitions,
		Clock: cfg.Clock, Logger: cfg.Logger, MaxBatchBytes: cfg.OffsetsMaxBatchBytes})
	c := New(cfg.Coordinator)
	c.Loaded(cfg.Clock.Now())
	s := &Service{cfg: cfg, log: cfg.Logger, store: store, c: c}
	s.loop, s.shards = coordloop.NewReplicated[Request, kmsg.Response](machine{c, s}, store, cfg.Clock, idleTick, ErrClosed, *cfg.Replicated, cfg.Logger)
	s.loop.Start()
	s.shards.Start()
	return s, nil
}

// LeaderChanged reports a change of the leader of __consumer_offsets
// partition p (replica.Config.OnLeader of its replica): it never blocks.
// A Service that is not replicated ignores it.
func (s *Service) LeaderChanged(p int32, leader, term uint64) {
	if s.shards != nil {
		s.shards.LeaderChanged(p, leader, term)
	}
}

// Store returns the __consumer_offsets store.
func (s *Service) Store() *Store { return s.store }

// Do hands one group request to the coordinator and waits for its response
// (a JoinGroup waits for the rebalance). ctx ending (the connection closed)
// abandons the wait; the coordinator still answers into the void.
func (s *Service) Do(ctx context.Context, clientID, clientHost string, body kmsg.Request) (kmsg.Response, error) {
	resp, err := s.loop.Call(ctx, Request{ClientID: clientID, ClientHost: clientHost, Body: body})
	if err == nil && resp == nil {
		err = ErrUnsupported
	}
	return resp, err
}

// Inspect runs fn on the driver goroutine with the coordinator (admin,
// tests) and waits for it.
func (s *Service) Inspect(fn func(*Coordinator)) error {
	return s.loop.Do(func() { fn(s.c) })
}

// SetAddress changes the address FindCoordinator answers.
func (s *Service) SetAddress(host string, port int32) {
	s.Inspect(func(c *Coordinator) { c.SetAddress(host, port) })
}

// Close stops the driver, answers the requests still waiting with
// COORDINATOR_NOT_AVAILABLE and closes the store.
func (s *Service) Close() error {
	if s.shards != nil {
		s.shards.Close()
	}
	s.loop.Stop()
	return s.store.Close()
}

// idleTick is the longest the driver goes without a Tick: Kafka's
// offsets.retention.check.interval.ms, so expired offsets go on time.
const idleTick = 10 * time.Minute

// flush persists the Ready's records, then releases its responses. What
// could not be persisted fails alone (see reload.go): a record too large
// for a batch fails its group's requests, a storage error those of its
// partition, and the state in memory goes back to what is durable.
func (s *Service) flush() {
	rd := s.c.Ready()
	if rd.Empty() {
		return
	}
	// tooLarge holds, per group, the kinds of record (isOffsetKey) that
	// could not be written because one of them exceeds a batch: all the
	// group's records of that kind in this Ready are dropped, the others
	// (independent keys) are written.
	tooLarge := map[string]map[bool]bool{}
	failedParts := map[int32]bool{}
	if len(rd.Records) > 0 {
		keep := rd.Records[:0:0]
		for _, r := range rd.Records {
			if len(r.Key)+len(r.Value) <= s.store.MaxRecordBytes() {
				continue
			}
			name, _ := RecordGroup(r.Key)
			if tooLarge[name] == nil {
				tooLarge[name] = map[bool]bool{}
				s.log.Warn("group coordinator: a record is too large for "+OffsetsTopic+"; the group's requests fail and it goes back to its durable state",
					"group", name, "bytes", len(r.Key)+len(r.Value), "max_bytes", s.store.MaxRecordBytes())
			}
			tooLarge[name][isOffsetKey(r.Key)] = true
		}
		for _, r := range rd.Records {
			if name, _ := RecordGroup(r.Key); !tooLarge[name][isOffsetKey(r.Key)] {
				keep = append(keep, r)
			}
		}
		for p, err := range s.store.Append(keep) {
			s.unload(p, err)
			failedParts[p] = true
		}
		for name := range tooLarge {
			if failedParts[s.c.partitionFor(name)] {
				continue // unloaded with its partition
			}
			if err := s.c.ReloadGroup(name, s.store.LiveRecords(name), kerr.UnknownServerError.Code); err != nil {
				s.unload(s.c.partitionFor(name), err)
				failedParts[s.c.partitionFor(name)] = true
			}
		}
		// Unloading and reloading answered waiting requests: send those
		// too (they persist nothing).
		rd.Responses = append(rd.Responses, s.c.Ready().Responses...)
	}
	for _, r := range rd.Responses {
		s.loop.Answer(r.ID, func(req Request) kmsg.Response {
			if wm, ok := req.Body.(*kmsg.WriteTxnMarkersRequest); ok && markersFailed(wm, failedParts) {
				return errresp.For(req.Body, kerr.NotCoordinator.Code)
			}
			for _, name := range requestGroups(req.Body) {
				if failedParts[s.c.partitionFor(name)] {
					return errresp.For(req.Body, kerr.NotCoordinator.Code)
				}
				if failedByTooLarge(req.Body, tooLarge[name]) {
					return errresp.For(req.Body, tooLargeCode(req.Body))
				}
			}
			return r.Body
		})
	}
	if len(rd.Records) > 0 {
		// After the responses: compaction's appends delay no one's ack.
		unloaded := false
		for p, err := range s.store.MaybeCompact() {
			s.unload(p, err)
			unloaded = true
		}
		if unloaded {
			s.flush() // the answers of the requests that were waiting there
		}
	}
}

// unload takes partition p's groups out of service after its log failed;
// the store reopens it (Store.ReopenBroken, each round) and brings them
// back.
func (s *Service) unload(p int32, err error) {
	if s.shards != nil {
		// A replicated partition's write fails when this node no longer
		// leads it: NOT_COORDINATOR, and the shard loads again only
		// from the log, if this node still leads.
		s.log.Info("group coordinator: writing to "+OffsetsTopic+" failed; its groups answer NOT_COORDINATOR",
			"partition", p, "err", err)
		s.c.UnloadPartition(p)
		s.shards.Lost(p)
		return
	}
	s.log.Error("group coordinator: persisting to "+OffsetsTopic+" failed; its groups answer NOT_COORDINATOR until the log can be written again",
		"partition", p, "err", err)
	s.c.UnloadPartition(p)
}

// markersFailed reports whether a WriteTxnMarkers names a
// __consumer_offsets partition whose records failed: its transactions'
// offsets are not durable, and the transaction coordinator must write the
// marker again.
func markersFailed(req *kmsg.WriteTxnMarkersRequest, failedParts map[int32]bool) bool {
	for _, m := range req.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if t.Topic == OffsetsTopic && failedParts[p] {
					return true
				}
			}
		}
	}
	return false
}
