package txn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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

// ErrClosed is returned by Do and Verify after Close.
var ErrClosed = errors.New("txn: coordinator closed")

// ErrUnsupported is returned by Do for a request type the coordinator has
// no answer for (not a transaction request, and without an error response
// in internal/errresp): the caller closes the connection, as Kafka does for
// a request it cannot answer.
var ErrUnsupported = errors.New("txn: the coordinator cannot answer this request type")

// MarkerWriter writes a transaction's end into one partition: a commit or
// abort marker, durable before it returns (api.Handler.WriteTxnMarker; for
// __consumer_offsets the group coordinator's completion of the producer's
// transactional offsets). It returns 0 or a Kafka error code;
// UNKNOWN_TOPIC_OR_PARTITION means the partition is gone and needs no
// marker.
type MarkerWriter interface {
	WriteTxnMarker(ctx context.Context, topic string, partition int32, m plog.TxnMarker) int16
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Coordinator Config
	FS          vfs.FS
	DataDir     string
	Clock       clock.Clock // default clock.Real{}
	Logger      *slog.Logger
	WritePath   plog.WritePath
	Markers     MarkerWriter

	// CompactAfterBytes and SegmentBytes tune the __transaction_state
	// store (kvlog.StoreConfig); zero takes the defaults.
	CompactAfterBytes int64
	SegmentBytes      int64

	// Replicated, when set, makes __transaction_state its replicated
	// partitions (StatePartitions is then their number; FS, DataDir and
	// the store's tuning are unused): a partition's transactional ids are
	// served only while this node leads it, loaded from its log when
	// elected (prepared transactions then get their markers written, as
	// at a restart), dropped when it resigns (coordloop.Shards;
	// docs/replication.md 4d). The broker reports leadership with
	// LeaderChanged.
	Replicated *coordloop.Replicated
}

// Service is the driver: the one goroutine (a coordloop.Loop) that owns a
// Coordinator and the __transaction_state store. It persists each Ready's
// records (AckForced), then starts its marker jobs (each in a goroutine of
// its own, reporting back through the loop) and releases its responses.
type Service struct {
	cfg   ServiceConfig
	log   *slog.Logger
	clock clock.Clock
	store *kvlog.Store
	loop  *coordloop.Loop[Request, Response]
	// shards follow the partitions' leadership (nil: not replicated).
	shards *coordloop.Shards
	// jobsCtx ends at Close: marker jobs in flight give up, and Close
	// waits for them (jobs: added by the loop's goroutine only, so every
	// Add is done once the loop has stopped).
	jobsCtx    context.Context
	cancelJobs context.CancelFunc
	jobs       sync.WaitGroup

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
func (m machine) Stopped(req Request) Response {
	return errorResponse(req, kerr.CoordinatorNotAvailable.Code)
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
	store, records, err := kvlog.OpenStore(kvlog.StoreConfig{
		Topic:             StateTopic,
		FS:                cfg.FS,
		DataDir:           cfg.DataDir,
		Partitions:        cfg.Coordinator.StatePartitions,
		Clock:             cfg.Clock,
		Logger:            cfg.Logger,
		WritePath:         cfg.WritePath,
		CompactAfterBytes: cfg.CompactAfterBytes,
		SegmentBytes:      cfg.SegmentBytes,
	})
	if err != nil {
		return nil, err
	}
	c := New(cfg.Coordinator)
	if err := c.Load(records); err != nil {
		store.Close()
		return nil, err
	}
	s := &Service{
		cfg:   cfg,
		log:   cfg.Logger,
		clock: cfg.Clock,
		store: store,
		c:     c,
	}
	s.loop = coordloop.New[Request, Response](machine{c, s}, store, cfg.Clock, idleTick, ErrClosed)
	s.jobsCtx, s.cancelJobs = context.WithCancel(context.Background())
	c.Loaded(cfg.Clock.Now()) // prepared transactions ask for their markers again
	s.log.Info("transaction coordinator loaded", "records", len(records), "transactional_ids", len(c.txns))
	s.loop.Start()
	return s, nil
}

// startReplicated starts a Service over replicated partitions: every
// partition unloaded until its shard loads it.
func startReplicated(cfg ServiceConfig) (*Service, error) {
	cfg.Coordinator.StatePartitions = int32(len(cfg.Replicated.Replicas))
	if cfg.Coordinator.StatePartitions == 0 {
		return nil, errors.New("txn: a replicated " + StateTopic + " with no partitions")
	}
	cfg.Coordinator.setDefaults()
	store := kvlog.NewReplicatedStore(kvlog.StoreConfig{Topic: StateTopic, Partitions: cfg.Coordinator.StatePartitions,
		Clock: cfg.Clock, Logger: cfg.Logger})
	c := New(cfg.Coordinator)
	c.Loaded(cfg.Clock.Now())
	s := &Service{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, store: store, c: c}
	s.jobsCtx, s.cancelJobs = context.WithCancel(context.Background())
	s.loop, s.shards = coordloop.NewReplicated[Request, Response](machine{c, s}, store, cfg.Clock, idleTick, ErrClosed, *cfg.Replicated, cfg.Logger)
	s.loop.Start()
	s.shards.Start()
	return s, nil
}

// LeaderChanged reports a change of the leader of __transaction_state
// partition p (replica.Config.OnLeader of its replica): it never blocks.
// A Service that is not replicated ignores it.
func (s *Service) LeaderChanged(p int32, leader, term uint64) {
	if s.shards != nil {
		s.shards.LeaderChanged(p, leader, term)
	}
}

// Store returns the __transaction_state store.
func (s *Service) Store() *kvlog.Store { return s.store }

func (s *Service) do(ctx context.Context, req Request) (Response, error) {
	return s.loop.Call(ctx, req)
}

// Do hands one transaction request to the coordinator and waits for its
// response (an EndTxn waits for its markers).
func (s *Service) Do(ctx context.Context, body kmsg.Request) (kmsg.Response, error) {
	resp, err := s.do(ctx, Request{Body: body})
	if err == nil && resp.Body == nil {
		err = ErrUnsupported
	}
	return resp.Body, err
}

// Verify asks whether a transactional write may go to a partition (and
// adds it with ImplicitAdd, durably, before answering): 0 or the Kafka
// error code.
func (s *Service) Verify(ctx context.Context, v Verify) int16 {
	resp, err := s.do(ctx, Request{Verify: &v})
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	return resp.Code
}

// Inspect runs fn on the driver goroutine with the coordinator and waits
// for it.
func (s *Service) Inspect(fn func(*Coordinator)) error {
	return s.loop.Do(func() { fn(s.c) })
}

// SetAddress changes the address FindCoordinator answers.
func (s *Service) SetAddress(host string, port int32) {
	s.Inspect(func(c *Coordinator) { c.SetAddress(host, port) })
}

// Close stops the driver and its marker jobs (and waits for them: none
// writes into a partition after Close), answers the requests still waiting
// with COORDINATOR_NOT_AVAILABLE and closes the store. Prepared
// transactions stay prepared on disk: the next start writes their markers.
func (s *Service) Close() error {
	if s.shards != nil {
		s.shards.Close()
	}
	s.cancelJobs()
	s.loop.Stop()
	s.jobs.Wait()
	return s.store.Close()
}

// idleTick is the longest the driver goes without a Tick.
const idleTick = time.Minute

func errorResponse(req Request, code int16) Response {
	if req.Verify != nil {
		return Response{ID: req.ID, Code: code}
	}
	return Response{ID: req.ID, Body: errresp.For(req.Body, code)}
}

// flush persists the Ready's records, then starts its marker jobs and
// releases its responses, then persists its completions. A partition whose
// append failed is unloaded (its ids answer NOT_COORDINATOR until it is
// reopened and replayed): the requests of this Ready that touched it fail,
// and their marker jobs are not started (the replay asks for them again).
func (s *Service) flush() {
	rd := s.c.Ready()
	if rd.Empty() {
		return
	}
	var failed map[int32]error
	if len(rd.Records) > 0 {
		failed = s.store.Append(rd.Records)
		s.unload(failed, "persisting to "+StateTopic+" failed; its transactional ids answer NOT_COORDINATOR until the log can be written again")
		if len(failed) > 0 {
			rd.Responses = append(rd.Responses, s.c.Ready().Responses...)
		}
	}
	for _, job := range rd.Markers {
		if failed[s.c.partitionFor(job.TransactionalID)] != nil {
			continue
		}
		s.jobs.Add(1)
		go func() {
			defer s.jobs.Done()
			s.writeMarkers(job)
		}()
	}
	for _, r := range rd.Responses {
		s.loop.Answer(r.ID, func(req Request) Response {
			return answerFailed(req, r, func(id string) bool { return failed[s.c.partitionFor(id)] != nil })
		})
	}
	// The completions after the answers (see Ready), before the next
	// round: later records of the same ids come after them in the log.
	var completions []Record
	for _, r := range rd.Completions {
		if failed[r.Partition] == nil {
			completions = append(completions, r)
		}
	}
	if len(completions) > 0 {
		s.unload(s.store.Append(completions), "persisting a completion to "+StateTopic+" failed; its transactional ids answer NOT_COORDINATOR until the log can be written again (the replay completes the transaction)")
	}
	if len(rd.Records) > 0 || len(completions) > 0 {
		s.unload(s.store.MaybeCompact(), "compacting "+StateTopic+" failed")
	}
}

// unload takes the partitions whose log failed out of service, saying
// why: their ids answer NOT_COORDINATOR until the store reopens them
// (kvlog.Store.ReopenBroken) and they are replayed.
func (s *Service) unload(failed map[int32]error, why string) {
	for p, err := range failed {
		s.c.UnloadPartition(p)
		if s.shards != nil {
			// A replicated partition's write fails when this node no
			// longer leads it; it loads again only from the log, if
			// this node still leads.
			s.log.Info("transaction coordinator: writing to "+StateTopic+" failed; its transactional ids answer NOT_COORDINATOR", "partition", p, "err", err)
			s.shards.Lost(p)
			continue
		}
		s.log.Error("transaction coordinator: "+why, "partition", p, "err", err)
	}
}

// answerFailed is r, req's answer, with what touched a partition whose
// append failed (failedID of its transactional id) failed too:
// NOT_COORDINATOR for a request of one id, and for each transaction of a
// batched AddPartitionsToTxn (v4+, its transactions in any partitions) on
// its own, never an answer of success for records that were lost.
func answerFailed(req Request, r Response, failedID func(id string) bool) Response {
	if b, ok := req.Body.(*kmsg.AddPartitionsToTxnRequest); ok && b.Version >= 4 {
		if resp, ok := r.Body.(*kmsg.AddPartitionsToTxnResponse); ok {
			for i := range resp.Transactions {
				if rt := &resp.Transactions[i]; failedID(rt.TransactionalID) {
					for j := range rt.Topics {
						for k := range rt.Topics[j].Partitions {
							rt.Topics[j].Partitions[k].ErrorCode = kerr.NotCoordinator.Code
						}
					}
				}
			}
		}
		return r
	}
	if id := requestID(req); id != "" && failedID(id) {
		return errorResponse(req, kerr.NotCoordinator.Code)
	}
	return r
}

// requestID is the transactional id a request of one id changes ("" if
// none; a batched AddPartitionsToTxn is answerFailed's).
func requestID(req Request) string {
	if req.Verify != nil {
		return req.Verify.TransactionalID
	}
	switch b := req.Body.(type) {
	case *kmsg.InitProducerIDRequest:
		if b.TransactionalID != nil {
			return *b.TransactionalID
		}
	case *kmsg.AddPartitionsToTxnRequest:
		if b.Version < 4 {
			return b.TransactionalID
		}
	case *kmsg.AddOffsetsToTxnRequest:
		return b.TransactionalID
	case *kmsg.EndTxnRequest:
		return b.TransactionalID
	}
	return ""
}

// markerConcurrency bounds the partitions of one marker job written at
// once: each write waits for its partition's fsync, and the partitions'
// writers sync in parallel.
const markerConcurrency = 32

// writeMarkers runs one marker job, the partitions' markers written
// concurrently (each durable before its write returns), and reports the
// partitions that failed.
func (s *Service) writeMarkers(job MarkerJob) {
	res := MarkerResult{Job: job}
	m := plog.TxnMarker{ProducerID: job.ProducerID, ProducerEpoch: job.ProducerEpoch, Commit: job.Commit}
	codes := make([]int16, len(job.Partitions))
	slots := make(chan struct{}, markerConcurrency)
	var wg sync.WaitGroup
	for i, tp := range job.Partitions {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			codes[i] = s.cfg.Markers.WriteTxnMarker(s.jobsCtx, tp.Topic, tp.Partition, m)
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if code != 0 && code != kerr.UnknownTopicOrPartition.Code {
			tp := job.Partitions[i]
			s.log.Warn("transaction marker not written; retrying", "transactional_id", job.TransactionalID,
				"topic", tp.Topic, "partition", tp.Partition, "err", kerr.ErrorForCode(code))
			res.Failed = append(res.Failed, tp)
		}
	}
	s.loop.Post(func() { s.c.MarkersWritten(res, s.clock.Now()) })
}
