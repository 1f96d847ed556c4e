package txn

import (
	"math"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/coordloop"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/kvlog"
	"github.com/sushka-io/sushka/internal/meta"
)

// StateTopic is the internal topic holding the transactions' state,
// Kafka's name.
const StateTopic = meta.TransactionStateTopic

// OffsetsTopic is the group coordinator's topic: AddOffsetsToTxn adds a
// group's partition of it to the transaction, and its marker commits the
// group's transactional offsets (as in Kafka).
const OffsetsTopic = meta.OffsetsTopic

// TransactionVersion is the transaction.version feature level the
// coordinator serves: 2, KIP-890 part 2 (an epoch bump by every EndTxn v5,
// partitions added implicitly by Produce v12+ and TxnOffsetCommit v5+).
const TransactionVersion = 2

// Kafka's broker defaults for transactions.
const (
	DefaultMaxTimeout   = 15 * time.Minute   // transaction.max.timeout.ms
	DefaultIDExpiration = 7 * 24 * time.Hour // transactional.id.expiration.ms
	// markerRetryInterval is how long a marker job that failed on some
	// partitions waits before it is run again for them.
	markerRetryInterval = 500 * time.Millisecond
)

// State is a transaction's state, with Kafka's codes (TransactionState in
// the log's value).
type State int8

// Kafka's transaction states.
const (
	StateEmpty State = iota
	StateOngoing
	StatePrepareCommit
	StatePrepareAbort
	StateCompleteCommit
	StateCompleteAbort
	StateDead
	StatePrepareEpochFence
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// String is the state's name as DescribeTransactions and ListTransactions
// show it.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "Unknown"
	}
	return stateNames[s]
}

// ParseState is String's inverse.
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// TopicPartition names one partition of a transaction.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Topics tells the coordinator which partitions exist (AddPartitionsToTxn
// refuses unknown ones). It must be cheap and must not block.
type Topics interface {
	Partitions(topic string) (id [16]byte, partitions int32, ok bool)
}

// Config configures a Coordinator. Zero values take Kafka's defaults.
type Config struct {
	NodeID int32
	Host   string
	Port   int32

	// StatePartitions is the partition count of __transaction_state
	// (default 1); OffsetsPartitions that of __consumer_offsets (default
	// 1), to place AddOffsetsToTxn's partition.
	StatePartitions   int32
	OffsetsPartitions int32

	// MaxTimeout is transaction.max.timeout.ms: InitProducerID asking for
	// more gets INVALID_TRANSACTION_TIMEOUT.
	MaxTimeout time.Duration
	// IDExpiration is transactional.id.expiration.ms: an id with no
	// transaction in progress and no request for this long is forgotten
	// (its tombstone written). Negative: never.
	IDExpiration time.Duration

	// Topics is the topic catalogue; nil: every partition exists.
	Topics Topics

	// NewProducerID hands out a producer id never handed out before (the
	// catalogue's allocator, which reserves ids in durable blocks).
	NewProducerID func() (int64, error)
}

func (c *Config) setDefaults() {
	if c.StatePartitions <= 0 {
		c.StatePartitions = 1
	}
	if c.OffsetsPartitions <= 0 {
		c.OffsetsPartitions = 1
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.IDExpiration == 0 {
		c.IDExpiration = DefaultIDExpiration
	}
}

// Verify is Produce's question (api.TxnVerifier): may the producer's
// batch go to Partition in its ongoing transaction? With ImplicitAdd
// (Produce v12+, KIP-890 part 2) the partition joins the transaction.
type Verify struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partition       TopicPartition
	ImplicitAdd     bool
}

// Request is one input: a decoded request (Body) or a Verify, and its
// handle.
type Request struct {
	ID     uint64
	Now    time.Time
	Body   kmsg.Request
	Verify *Verify
}

// Response answers the request with handle ID: Body for a kmsg request,
// Code for a Verify.
type Response struct {
	ID   uint64
	Body kmsg.Response
	Code int16
}

// Record is one record of __transaction_state.
type Record = kvlog.Record

// MarkerJob asks the driver to write the end of a transaction (a commit or
// abort marker for ProducerID at ProducerEpoch) to each of Partitions,
// durably, and to report with MarkersWritten.
type MarkerJob struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
	Partitions      []TopicPartition
}

// MarkerResult is what the driver did with a MarkerJob: Failed are the
// partitions whose marker could not be written (a retriable error); a
// partition that no longer exists counts as written, as in Kafka (its
// topic was deleted).
type MarkerResult struct {
	Job    MarkerJob
	Failed []TopicPartition
}

// Ready is what the inputs since the last Ready produced: persist Records
// (all, durably), then start Markers and send Responses, then persist
// Completions before anything of a later Ready.
//
// Completions are the records of transactions whose markers are all
// written (CompleteCommit, CompleteAbort): the EndTxn they answer depends
// only on the prepare and the markers, which are durable, and a completion
// lost to a crash is repaired by the replay (the transaction is found
// prepared and its markers are written again), so the answer need not
// wait for their fsync.
type Ready struct {
	Records     []Record
	Markers     []MarkerJob
	Responses   []Response
	Completions []Record
}

// Empty reports whether there is nothing to do.
func (rd Ready) Empty() bool {
	return len(rd.Records) == 0 && len(rd.Markers) == 0 && len(rd.Responses) == 0 && len(rd.Completions) == 0
}

// transaction is one transactional id's state: Kafka's
// TransactionMetadata.
type transaction struct {
	id string
	// producerID and epoch are the current ones (epoch -1: just created,
	// no InitProducerID has completed). prevProducerID is the id before a
	// rotation (an exhausted epoch), nextProducerID the id a KIP-890
	// part 2 commit will rotate to once complete; -1: none.
	producerID, prevProducerID, nextProducerID int64
	epoch                                      int16
	// lastEpoch is the epoch before the last bump by the same producer
	// (KIP-360): a retried InitProducerID or EndTxn v5 with it is
	// answered, not fenced. -1: none (a new producer fenced the old one).
	// In memory only, as in Kafka.
	lastEpoch     int16
	timeout       time.Duration
	state         State
	partitions    map[TopicPartition]bool
	start         time.Time // zero: no transaction since Empty
	updated       time.Time
	clientVersion int16 // 2: KIP-890 part 2 (EndTxn v5+)

	// The end in progress (state PrepareCommit/PrepareAbort).
	markersOut bool             // a job is with the driver
	retryAt    time.Time        // when the failed partitions are tried again
	unmarked   []TopicPartition // partitions whose marker is not written yet
	endWaiters []endWaiter      // EndTxn requests answered at completion
}

type endWaiter struct {
	id      uint64
	version int16
}

// Coordinator is the transaction coordinator state machine. It is not safe
// for concurrent use: one owner (the Service) drives it.
type Coordinator struct {
	cfg    Config
	loaded bool
	now    time.Time
	txns   map[string]*transaction
	out    Ready
	// unloaded are the __transaction_state partitions whose state is not
	// in memory (their log failed; see UnloadPartition).
	unloaded map[int32]bool
	// loading are the unloaded partitions being replayed
	// (LoadingPartition): their ids answer COORDINATOR_LOAD_IN_PROGRESS.
	loading coordloop.PartitionSet
}

// New returns an empty coordinator; Load the log, then call Loaded.
func New(cfg Config) *Coordinator {
	cfg.setDefaults()
	return &Coordinator{cfg: cfg, txns: make(map[string]*transaction)}
}

// SetAddress changes the address FindCoordinator answers.
func (c *Coordinator) SetAddress(host string, port int32) { c.cfg.Host, c.cfg.Port = host, port }

// Ready returns the outputs accumulated since the last call and forgets
// them.
func (c *Coordinator) Ready() Ready {
	rd := c.out
	c.out = Ready{}
	return rd
}

func (c *Coordinator) respond(id uint64, body kmsg.Response) {
	c.out.Responses = append(c.out.Responses, Response{ID: id, Body: body})
}

func (c *Coordinator) persist(t *transaction) { c.out.Records = append(c.out.Records, c.record(t)) }

func (c *Coordinator) partitionFor(id string) int32 {
	return kvlog.PartitionFor(id, c.cfg.StatePartitions)
}

// checkCoordinator is the error a request for transactional id gets before
// its state is looked at: NOT_COORDINATOR for an id whose partition is
// unavailable, COORDINATOR_LOAD_IN_PROGRESS while loading.
func (c *Coordinator) checkCoordinator(id string) int16 {
	if p := c.partitionFor(id); c.unloaded[p] {
		if c.loading[p] {
			return kerr.CoordinatorLoadInProgress.Code
		}
		return kerr.NotCoordinator.Code
	}
	if !c.loaded {
		return kerr.CoordinatorLoadInProgress.Code
	}
	return 0
}

// Handle takes one request. Its response, now or later, comes out of
// Ready.
func (c *Coordinator) Handle(r Request) {
	if r.Now.After(c.now) {
		c.now = r.Now
	}
	if r.Verify != nil {
		c.out.Responses = append(c.out.Responses, Response{ID: r.ID, Code: c.verify(r.Verify)})
		return
	}
	switch req := r.Body.(type) {
	case *kmsg.FindCoordinatorRequest:
		c.respond(r.ID, c.findCoordinator(req))
	case *kmsg.InitProducerIDRequest:
		c.respond(r.ID, c.initProducerID(req))
	case *kmsg.AddPartitionsToTxnRequest:
		c.respond(r.ID, c.addPartitionsToTxn(req))
	case *kmsg.AddOffsetsToTxnRequest:
		c.respond(r.ID, c.addOffsetsToTxn(req))
	case *kmsg.EndTxnRequest:
		if resp := c.endTxn(r.ID, req); resp != nil {
			c.respond(r.ID, resp)
		}
	case *kmsg.DescribeTransactionsRequest:
		c.respond(r.ID, c.describeTransactions(req))
	case *kmsg.ListTransactionsRequest:
		c.respond(r.ID, c.listTransactions(req))
	default:
		// Not a transaction request: the caller routed it wrong. Never a
		// bare response (error code 0 reads as success):
		// UNKNOWN_SERVER_ERROR in the request's own shape, or, for a type
		// without one, nil, which Service.Do returns as ErrUnsupported
		// (the connection closes).
		c.respond(r.ID, errresp.For(r.Body, kerr.UnknownServerError.Code))
	}
}

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted: the
// epoch cannot be bumped once more and still leave room for the fence of
// a timeout.
func epochExhausted(epoch int16) bool { return epoch >= math.MaxInt16-1 }

// fencedCode is PRODUCER_FENCED as a request of version v gets it: versions
// before KIP-588's (firstFenced) have only INVALID_PRODUCER_EPOCH, as
// Kafka's KafkaApis maps it.
func fencedCode(v, firstFenced int16) int16 {
	if v < firstFenced {
		return kerr.InvalidProducerEpoch.Code
	}
	return kerr.ProducerFenced.Code
}

// --- FindCoordinator (key type 1) ---

func (c *Coordinator) findCoordinator(req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	return coordloop.FindCoordinator(req, c.cfg.NodeID, c.cfg.Host, c.cfg.Port, func(key string) int16 {
		switch {
		case key == "":
			return kerr.InvalidRequest.Code
		case c.unloaded[c.partitionFor(key)] || !c.loaded:
			return kerr.CoordinatorNotAvailable.Code
		}
		return 0
	})
}

// --- InitProducerID ---

// initProducerID is Kafka's TransactionCoordinator.handleInitProducerId
// for a transactional id.
func (c *Coordinator) initProducerID(req *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	fail := func(code int16) *kmsg.InitProducerIDResponse {
		if code == kerr.ProducerFenced.Code {
			code = fencedCode(req.Version, 4)
		}
		resp.ErrorCode = code
		return resp
	}
	if req.TransactionalID == nil || *req.TransactionalID == "" {
		return fail(kerr.InvalidRequest.Code)
	}
	id := *req.TransactionalID
	if code := c.checkCoordinator(id); code != 0 {
		return fail(code)
	}
	timeout := time.Duration(req.TransactionTimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > c.cfg.MaxTimeout {
		return fail(kerr.InvalidTransactionTimeout.Code)
	}
	expected := req.Version >= 3 && req.ProducerID >= 0
	t := c.txns[id]
	if t == nil {
		pid, err := c.cfg.NewProducerID()
		if err != nil {
			return fail(kerr.CoordinatorNotAvailable.Code) // retriable: the allocator's block was not durable
		}
		t = &transaction{id: id, producerID: pid, prevProducerID: -1, nextProducerID: -1, epoch: -1, lastEpoch: -1, partitions: map[TopicPartition]bool{}}
		c.txns[id] = t
	}
	// A producer id and epoch given (KIP-360) must be this id's current
	// producer, or its previous one whose epoch ran out (a retry of the
	// rotation), unless the id was only just created.
	if expected && t.epoch != -1 && req.ProducerID != t.producerID &&
		!(req.ProducerID == t.prevProducerID && epochExhausted(req.ProducerEpoch)) {
		return fail(kerr.ProducerFenced.Code)
	}
	switch t.state {
	case StatePrepareCommit, StatePrepareAbort:
		return fail(kerr.ConcurrentTransactions.Code)
	case StateOngoing:
		// Fence the ongoing transaction's producer and abort it; the
		// client retries (CONCURRENT_TRANSACTIONS) and gets the epoch
		// bumped once more, a new producer id if that exhausts it.
		c.fenceAndAbort(t)
		return fail(kerr.ConcurrentTransactions.Code)
	}
	switch {
	case epochExhausted(t.epoch) && (!expected || req.ProducerEpoch == t.epoch):
		pid, err := c.cfg.NewProducerID()
		if err != nil {
			return fail(kerr.CoordinatorNotAvailable.Code)
		}
		t.lastEpoch = -1
		if expected {
			t.lastEpoch = t.epoch
		}
		t.prevProducerID, t.producerID, t.epoch = t.producerID, pid, 0
	case !expected:
		t.epoch, t.lastEpoch = t.epoch+1, -1
	case t.epoch == -1 || req.ProducerEpoch == t.epoch:
		// The producer continues after an error and nobody else
		// initialised since: bump, remembering the epoch it had.
		t.epoch, t.lastEpoch = t.epoch+1, t.epoch
	case req.ProducerEpoch == t.lastEpoch:
		// A retry of an InitProducerID that succeeded: the same answer.
	default:
		return fail(kerr.ProducerFenced.Code)
	}
	t.state, t.timeout = StateEmpty, timeout
	t.partitions = map[TopicPartition]bool{}
	t.start, t.updated = time.Time{}, c.now
	c.persist(t)
	resp.ProducerID, resp.ProducerEpoch = t.producerID, t.epoch
	return resp
}

// fenceAndAbort bumps an ongoing transaction's epoch (its producer is
// fenced: Kafka's prepareFenceProducerEpoch, PrepareEpochFence in memory
// only) and starts its abort at the new epoch.
func (c *Coordinator) fenceAndAbort(t *transaction) {
	if !epochExhausted(t.epoch) {
		t.epoch++
	}
	t.lastEpoch = -1
	c.prepareEnd(t, false)
}

// prepareEnd moves an ongoing transaction to PrepareCommit or
// PrepareAbort, persists it and asks for its markers (once the record is
// durable).
func (c *Coordinator) prepareEnd(t *transaction, commit bool) {
	t.state = StatePrepareAbort
	if commit {
		t.state = StatePrepareCommit
	}
	t.updated = c.now
	t.unmarked = sortedPartitions(t.partitions)
	c.persist(t)
	if len(t.unmarked) == 0 {
		c.complete(t) // nothing to mark
		return
	}
	c.requestMarkers(t)
}

func (c *Coordinator) requestMarkers(t *transaction) {
	t.markersOut, t.retryAt = true, time.Time{}
	c.out.Markers = append(c.out.Markers, MarkerJob{
		TransactionalID: t.id,
		ProducerID:      t.producerID,
		ProducerEpoch:   t.epoch,
		Commit:          t.state == StatePrepareCommit,
		Partitions:      append([]TopicPartition(nil), t.unmarked...),
	})
}

// MarkersWritten takes the driver's report on a MarkerJob: the transaction
// completes once every partition has its marker (the completion is
// persisted, and the EndTxn requests waiting are answered with it); the
// partitions that failed are tried again after a pause.
func (c *Coordinator) MarkersWritten(res MarkerResult, now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
	t := c.txns[res.Job.TransactionalID]
	if t == nil || !t.markersOut || t.producerID != res.Job.ProducerID || t.epoch != res.Job.ProducerEpoch {
		return // the id was unloaded and loaded again meanwhile: a new job is out
	}
	t.markersOut = false
	if len(res.Failed) > 0 {
		t.unmarked = res.Failed
		t.retryAt = c.now.Add(markerRetryInterval)
		return
	}
	c.complete(t)
}

// complete ends a prepared transaction whose markers are all written:
// CompleteCommit or CompleteAbort is persisted and the EndTxn requests
// waiting are answered.
func (c *Coordinator) complete(t *transaction) {
	t.unmarked = nil
	commit := t.state == StatePrepareCommit
	t.state = StateCompleteAbort
	if commit {
		t.state = StateCompleteCommit
	}
	t.partitions = map[TopicPartition]bool{}
	t.updated = c.now
	if t.nextProducerID >= 0 {
		// KIP-890 part 2: the bump at EndTxn exhausted the epoch; the
		// producer continues with the id reserved for it.
		t.prevProducerID, t.producerID, t.nextProducerID = t.producerID, t.nextProducerID, -1
		t.lastEpoch, t.epoch = -1, 0
	}
	c.out.Completions = append(c.out.Completions, c.record(t))
	for _, w := range t.endWaiters {
		resp := kmsg.NewPtrEndTxnResponse()
		resp.Version = w.version
		resp.ProducerID, resp.ProducerEpoch = t.producerID, t.epoch
		c.respond(w.id, resp)
	}
	t.endWaiters = nil
}

// --- AddPartitionsToTxn, AddOffsetsToTxn ---

// addPartitions is Kafka's handleAddPartitionsToTransaction (and, with
// verifyOnly, handleVerifyPartitionsInTransaction) for one transaction:
// one error code for the whole request, or per partition.
func (c *Coordinator) addPartitions(id string, pid int64, epoch int16, tps []TopicPartition, verifyOnly bool, version, firstFenced int16) (code int16, perPartition map[TopicPartition]int16) {
	if id == "" {
		return kerr.InvalidRequest.Code, nil
	}
	if code := c.checkCoordinator(id); code != 0 {
		return code, nil
	}
	if unknown := c.unknownPartitions(tps); len(unknown) > 0 {
		perPartition = map[TopicPartition]int16{}
		for _, tp := range tps {
			perPartition[tp] = kerr.OperationNotAttempted.Code
		}
		for _, tp := range unknown {
			perPartition[tp] = kerr.UnknownTopicOrPartition.Code
		}
		return 0, perPartition
	}
	t := c.txns[id]
	switch {
	case t == nil || t.producerID != pid:
		return kerr.InvalidProducerIDMapping.Code, nil
	case t.epoch != epoch:
		return fencedCode(version, firstFenced), nil
	case t.state == StatePrepareCommit || t.state == StatePrepareAbort:
		return kerr.ConcurrentTransactions.Code, nil
	}
	if verifyOnly {
		perPartition = map[TopicPartition]int16{}
		for _, tp := range tps {
			perPartition[tp] = 0
			if t.state != StateOngoing || !t.partitions[tp] {
				perPartition[tp] = kerr.InvalidTxnState.Code
			}
		}
		return 0, perPartition
	}
	c.join(t, tps)
	return 0, nil
}

// join adds partitions to t's transaction, starting one if none is
// ongoing, and persists the change (nothing when every partition is in
// already).
func (c *Coordinator) join(t *transaction, tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	if t.state == StateOngoing {
		fresh := false
		for _, tp := range tps {
			fresh = fresh || !t.partitions[tp]
		}
		if !fresh {
			return
		}
	} else {
		t.state, t.start = StateOngoing, c.now
		t.partitions = map[TopicPartition]bool{}
	}
	for _, tp := range tps {
		t.partitions[tp] = true
	}
	t.updated = c.now
	c.persist(t)
}

func (c *Coordinator) unknownPartitions(tps []TopicPartition) []TopicPartition {
	if c.cfg.Topics == nil {
		return nil
	}
	var unknown []TopicPartition
	for _, tp := range tps {
		if tp.Topic == OffsetsTopic {
			continue
		}
		if _, n, ok := c.cfg.Topics.Partitions(tp.Topic); !ok || tp.Partition < 0 || tp.Partition >= n {
			unknown = append(unknown, tp)
		}
	}
	return unknown
}

func (c *Coordinator) addPartitionsToTxn(req *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	// v4+ (KIP-890 part 1): batched, from brokers (or admin tools), each
	// transaction on its own and possibly only verified; v0-3 the
	// request's one transaction.
	return errresp.AddPartitionsToTxn(req, func(rt *kmsg.AddPartitionsToTxnRequestTransaction) func(string, int32) int16 {
		var tps []TopicPartition
		for _, t := range rt.Topics {
			for _, p := range t.Partitions {
				tps = append(tps, TopicPartition{t.Topic, p})
			}
		}
		code, per := c.addPartitions(rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, tps, rt.VerifyOnly, req.Version, 2)
		return func(topic string, p int32) int16 {
			if per != nil {
				return per[TopicPartition{topic, p}]
			}
			return code
		}
	})
}

// OffsetsPartition is the __consumer_offsets partition AddOffsetsToTxn
// adds for group.
func (c *Coordinator) OffsetsPartition(group string) TopicPartition {
	return TopicPartition{OffsetsTopic, kvlog.PartitionFor(group, c.cfg.OffsetsPartitions)}
}

func (c *Coordinator) addOffsetsToTxn(req *kmsg.AddOffsetsToTxnRequest) *kmsg.AddOffsetsToTxnResponse {
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	code, _ := c.addPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch, []TopicPartition{c.OffsetsPartition(req.Group)}, false, req.Version, 2)
	resp.ErrorCode = code
	return resp
}

// --- Verify (Produce, TxnOffsetCommit) ---

// verify answers whether a transactional write to v.Partition may go on
// (KIP-890 part 1), adding the partition first with ImplicitAdd.
func (c *Coordinator) verify(v *Verify) int16 {
	if v.TransactionalID == "" {
		return kerr.InvalidRequest.Code
	}
	if code := c.checkCoordinator(v.TransactionalID); code != 0 {
		return code
	}
	t := c.txns[v.TransactionalID]
	switch {
	case t == nil || t.producerID != v.ProducerID:
		return kerr.InvalidProducerIDMapping.Code
	case t.epoch != v.ProducerEpoch:
		return kerr.ProducerFenced.Code
	case t.state == StatePrepareCommit || t.state == StatePrepareAbort:
		return kerr.ConcurrentTransactions.Code
	case t.state == StateOngoing && t.partitions[v.Partition]:
		return 0
	case v.ImplicitAdd:
		if unknown := c.unknownPartitions([]TopicPartition{v.Partition}); len(unknown) > 0 {
			return kerr.UnknownTopicOrPartition.Code
		}
		c.join(t, []TopicPartition{v.Partition})
		return 0
	}
	return kerr.InvalidTxnState.Code
}

// --- EndTxn ---

// endTxn is Kafka's handleEndTransaction from a client. It returns the
// response now, or nil when the answer waits for the markers.
func (c *Coordinator) endTxn(rid uint64, req *kmsg.EndTxnRequest) *kmsg.EndTxnResponse {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	fail := func(code int16) *kmsg.EndTxnResponse {
		resp.ErrorCode = code
		return resp
	}
	if req.TransactionalID == "" {
		return fail(kerr.InvalidRequest.Code)
	}
	if code := c.checkCoordinator(req.TransactionalID); code != 0 {
		return fail(code)
	}
	t := c.txns[req.TransactionalID]
	// KIP-890 part 2 (EndTxn v5+): every transaction ends with an epoch
	// bump, so a retry after a lost answer comes with the epoch (and
	// perhaps the producer id) from before it.
	bumps := req.Version >= 5
	if t == nil {
		return fail(kerr.InvalidProducerIDMapping.Code)
	}
	complete := StateCompleteAbort
	if req.Commit {
		complete = StateCompleteCommit
	}
	if bumps && t.state == complete && t.lastEpoch >= 0 && req.ProducerEpoch == t.lastEpoch &&
		(req.ProducerID == t.producerID || req.ProducerID == t.prevProducerID) {
		resp.ProducerID, resp.ProducerEpoch = t.producerID, t.epoch
		return resp
	}
	switch {
	case req.ProducerID != t.producerID:
		return fail(kerr.InvalidProducerIDMapping.Code)
	case req.ProducerEpoch != t.epoch:
		return fail(fencedCode(req.Version, 2))
	}
	emptyAbort := bumps && !req.Commit && (t.state == StateEmpty || t.state == StateCompleteCommit || t.state == StateCompleteAbort)
	switch {
	case t.state == StateOngoing || emptyAbort:
		// KIP-890 part 2 also lets a producer abort when it does not know
		// whether any partition joined (a produce that failed may have
		// registered it): with nothing ongoing, the abort bumps the epoch
		// and completes at once.
		if emptyAbort {
			t.partitions = map[TopicPartition]bool{}
		}
		if bumps {
			t.clientVersion = 2
			t.lastEpoch = t.epoch
			if epochExhausted(t.epoch + 1) {
				pid, err := c.cfg.NewProducerID()
				if err != nil {
					return fail(kerr.CoordinatorNotAvailable.Code)
				}
				t.nextProducerID = pid
			}
			t.epoch++
		}
		t.endWaiters = append(t.endWaiters, endWaiter{id: rid, version: req.Version})
		c.prepareEnd(t, req.Commit)
		return nil
	case t.state == StateCompleteCommit || t.state == StateCompleteAbort:
		if t.state != complete {
			return fail(kerr.InvalidTxnState.Code)
		}
		resp.ProducerID, resp.ProducerEpoch = t.producerID, t.epoch
		return resp // a retry of an end that completed
	case t.state == StatePrepareCommit || t.state == StatePrepareAbort:
		if (t.state == StatePrepareCommit) != req.Commit {
			return fail(kerr.InvalidTxnState.Code)
		}
		return fail(kerr.ConcurrentTransactions.Code)
	}
	return fail(kerr.InvalidTxnState.Code) // Empty: nothing to end
}

// --- Tick ---

// Tick lets time pass to now: ongoing transactions past their timeout are
// aborted with their producer fenced, failed markers are retried, idle ids
// expire.
func (c *Coordinator) Tick(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
	if !c.loaded {
		return
	}
	for _, t := range c.sortedTxns() {
		switch {
		case t.state == StateOngoing && !c.now.Before(t.start.Add(t.timeout)):
			c.fenceAndAbort(t)
		case (t.state == StatePrepareCommit || t.state == StatePrepareAbort) && !t.markersOut && !t.retryAt.IsZero() && !c.now.Before(t.retryAt):
			c.requestMarkers(t)
		case c.cfg.IDExpiration > 0 && (t.state == StateEmpty || t.state == StateCompleteCommit || t.state == StateCompleteAbort) &&
			!c.now.Before(t.updated.Add(c.cfg.IDExpiration)):
			t.state = StateDead
			c.out.Records = append(c.out.Records, c.tombstone(t.id))
			delete(c.txns, t.id)
		}
	}
}

// NextDeadline is the earliest time a Tick has something to do; zero if
// nothing is scheduled.
func (c *Coordinator) NextDeadline() time.Time {
	var next time.Time
	for _, t := range c.txns {
		switch t.state {
		case StateOngoing:
			next = coordloop.Earliest(next, t.start.Add(t.timeout))
		case StatePrepareCommit, StatePrepareAbort:
			if !t.markersOut {
				next = coordloop.Earliest(next, t.retryAt)
			}
		default:
			if c.cfg.IDExpiration > 0 {
				next = coordloop.Earliest(next, t.updated.Add(c.cfg.IDExpiration))
			}
		}
	}
	return next
}

func (c *Coordinator) sortedTxns() []*transaction {
	ts := make([]*transaction, 0, len(c.txns))
	for _, t := range c.txns {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].id < ts[j].id })
	return ts
}

func sortedPartitions(set map[TopicPartition]bool) []TopicPartition {
	tps := make([]TopicPartition, 0, len(set))
	for tp := range set {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	return tps
}
