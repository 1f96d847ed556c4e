// Package api serves the Kafka API keys, one file per key in the style of
// franz-go's kfake: NN_name.go opens with the versions served and the notes
// on what each version changed, and registers its handler with that version
// range (regKey). The directory listing is the coverage table; the registry
// is the only list of keys: ApiVersions, the server's decoding (Versions)
// and dispatch (Handle) all read it. errors.go is the one mapping from
// errors to Kafka error codes.
//
// The Handler holds the broker's topics: the catalogue (internal/meta) and
// one open partition log (internal/plog) per partition, stored under
// DATA/<topic>-<partition>/ like Kafka. Admin changes (create, delete,
// alter, grow) are serialised by one lock; produce and fetch look partitions
// up under a read lock and then work on the partition log alone.
//
// Single node today, but nothing assumes it (design D11): every partition
// names its leader (this node), replicas and ISR, and Metadata lists brokers.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/group"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/quota"
	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/txn"
	"github.com/sushka-io/sushka/internal/vfs"
)

// LeaderEpoch is every partition's leader epoch: one node, never re-elected.
const LeaderEpoch = 0

// DefaultMaxFetchWait is the default Config.MaxFetchWait: Kafka clients'
// default request.timeout.ms (30 s), past which the client has given up on
// the fetch anyway.
const DefaultMaxFetchWait = 30 * time.Second

// DefaultMaxPartitionsPerRequest is the default Config.MaxPartitionsPerRequest:
// a broker holds no more partitions than that by default (--max-partitions),
// so no client needs to name more in one request.
const DefaultMaxPartitionsPerRequest = 100_000

// Metrics receives the handler's measurements; nil methods are not called.
type Metrics interface {
	ProducedBytes(topic string, n int)
	FetchedBytes(topic string, n int64)
	AppendLatency(d time.Duration)
	// AppendTiming receives the steps of one acknowledged append, enqueued
	// at enqueued (00_produce.go): queue, write, fsync wait and fsync.
	AppendTiming(enqueued time.Time, t plog.AppendTiming)
	// FetchWake receives a long-poll fetch's wake-up: from the high
	// watermark advance that woke it to its answer (timing.go).
	FetchWake(d time.Duration)
	// SASLAuthentication counts one SASL authentication's outcome
	// (36_sasl_authenticate.go): ok or failed, first or a
	// re-authentication.
	SASLAuthentication(mechanism string, reauthentication, ok bool)
}

// Config configures the Handler.
type Config struct {
	FS      vfs.FS
	DataDir string
	Catalog *meta.Catalog
	Logger  *slog.Logger
	Metrics Metrics

	NodeID            int32
	AutoCreateTopics  bool
	DefaultPartitions int32
	// MaxPartitionsPerTopic bounds CreateTopics and CreatePartitions: each
	// partition is a directory, open files and a writer, so one request
	// must not be able to exhaust the node. Default 10000.
	MaxPartitionsPerTopic int32
	MaxRequestBytes       int32
	// MaxFetchWait caps a Fetch's long poll (MaxWaitMillis): a client
	// asking for hours holds the broker's resources no longer than this.
	// Default DefaultMaxFetchWait.
	MaxFetchWait time.Duration
	// MaxPartitionsPerRequest bounds the distinct partitions (or config
	// resources) one request may name (tooManyPartitions). Default
	// DefaultMaxPartitionsPerRequest.
	MaxPartitionsPerRequest int
	// FetchSessionSlots is max.incremental.fetch.session.cache.slots: the
	// fetch sessions (KIP-227) the broker keeps (fetchsession.go). Default
	// DefaultFetchSessionSlots; negative: none (every fetch is full).
	FetchSessionSlots int
	// FetchSessionEviction is min.incremental.fetch.session.eviction.ms: a
	// session unused (or, among those of equal standing, created) longer
	// ago may be evicted for a new one. Default DefaultFetchSessionEviction.
	FetchSessionEviction time.Duration
	// Clock tells the fetch sessions' ages. Default clock.Real.
	Clock clock.Clock
	// ProducerIDExpiration is producer.id.expiration.ms: an idempotent
	// producer idle for this long is forgotten by each partition. Default
	// plog.DefaultProducerIDExpiration.
	ProducerIDExpiration time.Duration
	// SyncInterval is every partition log's Config.SyncInterval (pacing of
	// fsyncs without acks=all appends). Default plog.DefaultSyncInterval;
	// negative: none.
	SyncInterval time.Duration
	// EarlyWritebackBytes is every partition log's
	// Config.EarlyWritebackBytes (sync_file_range before an acks=all
	// fsync). Default plog.DefaultEarlyWritebackBytes; negative: off.
	EarlyWritebackBytes int64
	// RecoveryThreads is how many partition logs New opens (recovers) at
	// once (Kafka's num.recovery.threads.per.data.dir). Default
	// plog.DefaultRecoveryThreads.
	RecoveryThreads int
	Defaults        Defaults

	// Cluster, when set, makes the handler a node of a multi-node cluster
	// (cluster.go): brokers, controller, partitions and topic creation
	// come from the metadata quorum. Nil: a single node.
	Cluster Cluster

	// TxnVerifier is the transaction coordinator seen from Produce
	// (txn.go); nil: transactional produce is refused.
	TxnVerifier TxnVerifier

	// WritePath overrides the partition log's write path (zero: the log's
	// default).
	WritePath plog.WritePath
	// FileCache bounds the open sealed-segment files of every partition
	// (nil: plog.DefaultFileCache).
	FileCache *plog.FileCache

	// Authorizer configures ACL checks (authz.go); the zero value is off:
	// everything allowed.
	Authorizer acl.Config
	// Quotas measures clients against the catalogue's client quotas, which
	// New loads into it (nil: a quota.Manager with Kafka's windows).
	Quotas *quota.Manager
	// SASLMechanisms are the SASL mechanisms SaslHandshake accepts on SASL
	// listeners (sasl.enabled.mechanisms; nil: sasl.DefaultMechanisms).
	// They verify against the catalogue's SCRAM credentials.
	SASLMechanisms []string
	// ConnectionsMaxReauth is connections.max.reauth.ms: the session
	// lifetime SaslAuthenticate v1+ gives (0: none, Kafka's default).
	ConnectionsMaxReauth time.Duration
	// FailedAuthenticationDelay is
	// connection.failed.authentication.delay.ms: how long a failed SASL
	// authentication waits before its answer and the close. Default
	// DefaultFailedAuthenticationDelay; negative: none.
	FailedAuthenticationDelay time.Duration
}

// DefaultFailedAuthenticationDelay is Kafka's
// connection.failed.authentication.delay.ms default.
const DefaultFailedAuthenticationDelay = 100 * time.Millisecond

// Handler serves the Kafka API keys; it implements server.Handler.
type Handler struct {
	cfg Config
	log *slog.Logger

	// adminMu serialises changes to the set of topics and partitions and
	// to configs, so the catalogue and the open logs change together.
	adminMu sync.Mutex

	advertised atomic.Pointer[[]Endpoint] // set by SetAdvertised before serving

	mu     sync.RWMutex // guards topics and byID (not the logs' contents)
	topics map[string]*topic
	byID   map[[16]byte]*topic

	// groups is the group coordinator with __consumer_offsets (groups.go);
	// set in New and never changed: handlers read it without a lock, and
	// after Close it answers ErrClosed (COORDINATOR_NOT_AVAILABLE).
	groups *group.Service
	// fetchSessions is the fetch session cache (fetchsession.go).
	fetchSessions *fetchSessions
	// txns is the transaction coordinator with __transaction_state
	// (txns.go); set in New after groups and never changed, as groups.
	txns *txn.Service

	// authz checks every request (authz.go); its bindings are the
	// catalogue's, reloaded under aclMu after each ACL change.
	authz *acl.Authorizer
	aclMu sync.Mutex
	// quotas enforces the catalogue's client quotas (throttle.go); set in
	// New, updated by AlterClientQuotas.
	quotas *quota.Manager
	// sasl serves the SASL exchanges of SASL listeners
	// (17_sasl_handshake.go, 36_sasl_authenticate.go).
	sasl *sasl.Server
}

// topic is an open topic: its catalogue entry and one log per partition.
type topic struct {
	meta  meta.Topic // a snapshot; replaced (not mutated) under mu
	parts []*plog.Log
	// reps are the replicated partitions' replicas here (cluster mode,
	// rf > 1: HostPartition), by partition; nil, or nil entries, for
	// plain logs.
	reps []ReplicatedPartition
}

// Endpoint is where clients reach this broker through one listener: an
// entry of Kafka's advertised.listeners.
type Endpoint struct {
	Listener string // the listener's name (server.Session.Listener)
	Protocol server.SecurityProtocol
	Host     string
	Port     int32
}

// SetAdvertised sets the endpoints clients are told to connect to, one per
// listener, the first the default. Metadata, DescribeCluster and
// FindCoordinator answer each request with the endpoint of the listener it
// came through (its Session's), as Kafka does, so a client bootstrapped on
// a listener stays on it; a request without a session, or of a listener
// with no endpoint, gets the first.
func (h *Handler) SetAdvertised(endpoints ...Endpoint) {
	if len(endpoints) == 0 {
		return
	}
	endpoints = slices.Clone(endpoints)
	h.advertised.Store(&endpoints)
	// The coordinators' own answers name the default; FindCoordinator
	// puts the request's listener's endpoint in (10_find_coordinator.go).
	host, port := endpoints[0].Host, endpoints[0].Port
	if h.groups != nil {
		h.groups.SetAddress(host, port)
	}
	if h.txns != nil {
		h.txns.SetAddress(host, port)
	}
}

// endpoints are the advertised endpoints, the default first.
func (h *Handler) endpoints() []Endpoint {
	if eps := h.advertised.Load(); eps != nil {
		return *eps
	}
	return []Endpoint{{Listener: server.Plaintext.String(), Protocol: server.Plaintext, Host: "127.0.0.1", Port: 9092}}
}

// advertisedAddr is the endpoint req's listener advertises (nil req, or a
// listener without one: the default).
func (h *Handler) advertisedAddr(req *server.Request) (string, int32) {
	eps := h.endpoints()
	if req != nil && req.Session != nil {
		for _, ep := range eps {
			if ep.Listener == req.Session.Listener {
				return ep.Host, ep.Port
			}
		}
	}
	return eps[0].Host, eps[0].Port
}

// New opens the logs of every topic in the catalogue.
func New(cfg Config) (*Handler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxPartitionsPerTopic <= 0 {
		cfg.MaxPartitionsPerTopic = 10000
	}
	if err := cfg.Defaults.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxFetchWait <= 0 {
		cfg.MaxFetchWait = DefaultMaxFetchWait
	}
	if cfg.MaxPartitionsPerRequest <= 0 {
		cfg.MaxPartitionsPerRequest = DefaultMaxPartitionsPerRequest
	}
	if cfg.ProducerIDExpiration <= 0 {
		cfg.ProducerIDExpiration = plog.DefaultProducerIDExpiration
	}
	switch {
	case cfg.FetchSessionSlots == 0:
		cfg.FetchSessionSlots = DefaultFetchSessionSlots
	case cfg.FetchSessionSlots < 0:
		cfg.FetchSessionSlots = 0 // none
	}
	if cfg.FetchSessionEviction <= 0 {
		cfg.FetchSessionEviction = DefaultFetchSessionEviction
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	switch {
	case cfg.SyncInterval == 0:
		cfg.SyncInterval = plog.DefaultSyncInterval
	case cfg.SyncInterval < 0:
		cfg.SyncInterval = 0 // plog: no pacing
	}
	switch {
	case cfg.EarlyWritebackBytes == 0:
		cfg.EarlyWritebackBytes = plog.DefaultEarlyWritebackBytes
	case cfg.EarlyWritebackBytes < 0:
		cfg.EarlyWritebackBytes = 0 // plog: off
	}
	if cfg.RecoveryThreads <= 0 {
		cfg.RecoveryThreads = plog.DefaultRecoveryThreads()
	}
	if cfg.Quotas == nil {
		cfg.Quotas = quota.New(quota.Config{})
	}
	cfg.Quotas.SetQuotas(metaReadsOf(&cfg).ClientQuotas())
	switch {
	case cfg.FailedAuthenticationDelay == 0:
		cfg.FailedAuthenticationDelay = DefaultFailedAuthenticationDelay
	case cfg.FailedAuthenticationDelay < 0:
		cfg.FailedAuthenticationDelay = 0
	}
	saslServer, err := sasl.NewServer(metaReadsOf(&cfg), cfg.SASLMechanisms)
	if err != nil {
		return nil, fmt.Errorf("SASL: %w", err)
	}
	h := &Handler{
		cfg:    cfg,
		log:    cfg.Logger,
		topics: make(map[string]*topic),
		byID:   make(map[[16]byte]*topic),
		authz:  acl.New(cfg.Authorizer),
		quotas: cfg.Quotas,
		sasl:   saslServer,

		fetchSessions: newFetchSessions(cfg.FetchSessionSlots, cfg.FetchSessionEviction, cfg.Clock),
	}
	h.reloadACLsLocked()                        // no other goroutine has h yet
	if err := h.finishDeletions(); err != nil { // 20_delete_topics.go
		return nil, err
	}
	h.openTopics(cfg.Catalog.Topics())
	if err := h.startGroups(); err != nil {
		h.Close()
		return nil, err
	}
	if err := h.startTxns(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// topicsNamedTwice returns the topics that items (a request's topic list)
// name more than once. CreateTopics and CreatePartitions answer each such
// entry INVALID_REQUEST (errNamedTwice), as Kafka does, and act on none.
func topicsNamedTwice[T any](items []T, topic func(T) string) map[string]bool {
	seen := make(map[string]int, len(items))
	for _, it := range items {
		seen[topic(it)]++
	}
	twice := map[string]bool{}
	for name, n := range seen {
		if n > 1 {
			twice[name] = true
		}
	}
	return twice
}

// errNamedTwice is the error message for a topic topicsNamedTwice found.
func errNamedTwice(topic string) error {
	return fmt.Errorf("topic %q is named more than once in the request", topic)
}

// checkPartitionLimit refuses partition counts above the configured bound.
func (h *Handler) checkPartitionLimit(n int32) error {
	if n > h.cfg.MaxPartitionsPerTopic {
		return fmt.Errorf("%w: %d partitions requested, this broker allows at most %d per topic (--max-partitions-per-topic)", meta.ErrBadPartitions, n, h.cfg.MaxPartitionsPerTopic)
	}
	return nil
}

func (h *Handler) partitionDir(name string, p int32) string {
	return filepath.Join(h.cfg.DataDir, fmt.Sprintf("%s-%d", name, p))
}

// openTopics opens the logs of every partition of topics, up to
// RecoveryThreads at once (plog.OpenAll), and adds the topics. Everything
// that needs them open (the coordinators and their replay) starts after.
func (h *Handler) openTopics(topics []meta.Topic) {
	var cfgs []plog.Config
	for _, mt := range topics {
		for p := int32(0); p < mt.Partitions; p++ {
			cfgs = append(cfgs, h.logConfig(mt, p))
		}
	}
	start := time.Now()
	logs, errs := plog.OpenAll(cfgs, h.cfg.RecoveryThreads)
	i := 0
	for _, mt := range topics {
		t := &topic{meta: mt}
		for p := int32(0); p < mt.Partitions; p, i = p+1, i+1 {
			l := logs[i]
			if err := errs[i]; err != nil {
				err = fmt.Errorf("opening partition log %s: %w", cfgs[i].Dir, err) // as openLog
				// One partition that cannot be opened (corruption in the
				// middle of its log, an unreadable file) must not take the
				// broker down: it answers KAFKA_STORAGE_ERROR until an
				// operator repairs it; the others serve.
				h.log.Error("partition refuses to serve: its log could not be opened; produce and fetch get KAFKA_STORAGE_ERROR until it is repaired",
					"topic", mt.Name, "partition", p, "err", err)
				l = plog.Failed(cfgs[i], err)
			}
			t.parts = append(t.parts, l)
		}
		h.topics[mt.Name] = t
		h.byID[mt.ID] = t
	}
	if len(cfgs) > 0 {
		h.log.Info("partition logs opened", "partitions", len(cfgs), "recovery_threads", min(h.cfg.RecoveryThreads, len(cfgs)), "took", time.Since(start).Round(time.Millisecond))
	}
}

func (h *Handler) openLog(mt meta.Topic, p int32) (*plog.Log, error) {
	cfg := h.logConfig(mt, p)
	// plog.Open creates the directory and syncs its parent, so a topic
	// acknowledged by CreateTopics survives a crash: no MkdirAll here.
	l, err := plog.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("opening partition log %s: %w", cfg.Dir, err)
	}
	return l, nil
}

// Close syncs and closes every partition log and the group coordinator.
func (h *Handler) Close() error {
	// The coordinators first: their drivers look topics up under mu (the
	// transaction coordinator's marker jobs write to the group's).
	txnsErr := h.closeTxns()
	groupsErr := h.closeGroups()
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	errs := []error{txnsErr, groupsErr}
	for _, t := range h.topics {
		for p, l := range t.parts {
			if l == nil {
				continue // cluster mode: a partition without a replica here
			}
			if err := t.closePartition(int32(p)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	h.topics = map[string]*topic{}
	h.byID = map[[16]byte]*topic{}
	return errors.Join(errs...)
}

// EnforceRetention applies retention and segment.ms to every partition.
func (h *Handler) EnforceRetention() {
	h.mu.RLock()
	var logs []*plog.Log
	for _, t := range h.topics {
		for _, l := range t.parts {
			// Cluster mode: nil for a partition hosted elsewhere. A
			// replicated partition's retention is each replica's own,
			// taken as a raft snapshot (docs/replication.md §3e).
			if l != nil {
				logs = append(logs, l)
			}
		}
	}
	h.mu.RUnlock()
	for _, l := range logs {
		if err := l.EnforceRetention(); err != nil && !errors.Is(err, plog.ErrClosed) {
			h.log.Warn("retention failed", "err", err)
		}
	}
}

// lookup returns a topic by name.
func (h *Handler) lookup(name string) *topic {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.topics[name]
}

// lookupID returns a topic by ID.
func (h *Handler) lookupID(id [16]byte) *topic {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.byID[id]
}

// partition returns a partition's log, or nil.
func (t *topic) partition(p int32) *plog.Log {
	if t == nil || p < 0 || int(p) >= len(t.parts) {
		return nil
	}
	return t.parts[p]
}

// sortedTopics returns a snapshot of the open topics sorted by name.
func (h *Handler) sortedTopics() []*topic {
	h.mu.RLock()
	ts := make([]*topic, 0, len(h.topics))
	for _, t := range h.topics {
		ts = append(ts, t)
	}
	h.mu.RUnlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].meta.Name < ts[j].meta.Name })
	return ts
}

// createTopic creates a topic and opens its logs; adminMu must be held.
func (h *Handler) createTopicLocked(name string, partitions int32, configs map[string]string) (*topic, error) {
	mt, err := h.cfg.Catalog.CreateTopic(name, partitions, configs)
	if err != nil {
		return nil, err
	}
	t := &topic{meta: mt}
	for p := int32(0); p < partitions; p++ {
		// A directory left over from a topic of the same name deleted while
		// the broker was down (or a crash mid-delete) must not leak data.
		if err := h.cfg.FS.RemoveAll(h.partitionDir(name, p)); err != nil {
			h.abortCreateLocked(t)
			return nil, err
		}
		l, err := h.openLog(mt, p)
		if err != nil {
			h.abortCreateLocked(t)
			return nil, err
		}
		t.parts = append(t.parts, l)
	}
	h.mu.Lock()
	h.topics[name] = t
	h.byID[mt.ID] = t
	h.mu.Unlock()
	h.log.Info("topic created", "topic", name, "partitions", partitions, "configs", configs)
	return t, nil
}

func (h *Handler) abortCreateLocked(t *topic) {
	for p, l := range t.parts {
		l.Close()
		h.cfg.FS.RemoveAll(h.partitionDir(t.meta.Name, int32(p)))
	}
	h.cfg.Catalog.DeleteTopic(t.meta.Name)
}

// autoCreate creates topic name with the default partition count if auto
// creation is on; it returns the topic (existing or new) or an error code.
func (h *Handler) autoCreate(name string) (*topic, int16) {
	if h.clusterMode() {
		// Through the controller, without adminMu: this node's apply of
		// the creation takes it (HostPartition).
		if err := meta.ValidateTopicName(name); err != nil {
			return nil, kerr.InvalidTopicException.Code
		}
		if _, err := h.createInCluster(context.Background(), name, h.cfg.DefaultPartitions, 1, nil, false); err != nil && !errors.Is(err, meta.ErrTopicExists) {
			h.log.Warn("auto topic creation failed", "topic", name, "err", err)
			return nil, errorCode(err)
		}
		if t := h.lookup(name); t != nil {
			return t, 0
		}
		return nil, kerr.LeaderNotAvailable.Code // created, not yet applied here: the client retries
	}
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	if t := h.lookup(name); t != nil {
		return t, 0
	}
	if err := meta.ValidateTopicName(name); err != nil {
		return nil, kerr.InvalidTopicException.Code
	}
	t, err := h.createTopicLocked(name, h.cfg.DefaultPartitions, nil)
	if err != nil {
		h.log.Warn("auto topic creation failed", "topic", name, "err", err)
		return nil, errorCode(err)
	}
	return t, 0
}

// --- server.Handler ---

// apiKey is one served API key: the versions served and the handler. Each
// NN_name.go file registers its key in its init (regKey); ApiVersions lists
// exactly these keys, the server decodes only these versions (Versions) and
// Handle dispatches through the same entry, so a key is advertised if and
// only if it is dispatched.
type apiKey struct {
	minVersion, maxVersion int16
	// ordered: requests of this key on one connection are started in
	// arrival order (see Handler.Ordered).
	ordered bool
	// clusterOnly: served only by a node of a cluster (Config.Cluster):
	// a single node neither advertises nor decodes it (62, 63).
	clusterOnly bool
	// authz is what the key needs (authz.go's table).
	authz  authzRule
	handle func(h *Handler, ctx context.Context, req *server.Request) server.Response
}

// apiKeys is the registry, indexed by API key; nil for keys not served.
// Written only by init functions, read-only afterwards.
var apiKeys [kmsg.MaxKey + 1]*apiKey

// keyHandler is a handler for one request type: the method expression of
// a Handler method, (*Handler).handleX.
type keyHandler[Req kmsg.Request] func(h *Handler, ctx context.Context, creq *server.Request, req Req) server.Response

// regKey registers API key with its version range and handler, and returns
// the entry for options (ordered). It panics (at init, so at every start and
// in every test) on a key registered twice, a handler for another request
// type, versions kmsg cannot decode, or a key without its authorization
// rule (authzRules).
func regKey[Req kmsg.Request](key, minVersion, maxVersion int16, handle keyHandler[Req]) *apiKey {
	if key < 0 || int(key) >= len(apiKeys) {
		panic(fmt.Sprintf("api key %d outside kmsg's keys", key))
	}
	if apiKeys[key] != nil {
		panic(fmt.Sprintf("api key %d registered twice", key))
	}
	body := kmsg.RequestForKey(key)
	if _, ok := body.(Req); !ok || body == nil {
		var want Req
		panic(fmt.Sprintf("api key %d (%s) registered with a handler for %T", key, kmsg.NameForKey(key), want))
	}
	if minVersion < 0 || minVersion > maxVersion || maxVersion > body.MaxVersion() {
		panic(fmt.Sprintf("api key %d (%s): versions %d..%d, kmsg decodes 0..%d", key, kmsg.NameForKey(key), minVersion, maxVersion, body.MaxVersion()))
	}
	if ruleFor(key).gate != nil && errresp.For(body, kerr.ClusterAuthorizationFailed.Code) == nil {
		panic(fmt.Sprintf("api key %d (%s) is refused whole by its authorization gate but has no error response: add it to internal/errresp", key, kmsg.NameForKey(key)))
	}
	k := &apiKey{
		minVersion: minVersion,
		maxVersion: maxVersion,
		authz:      ruleFor(key),
		handle: func(h *Handler, ctx context.Context, req *server.Request) server.Response {
			return handle(h, ctx, req, req.Body.(Req))
		},
	}
	apiKeys[key] = k
	return k
}

// replying adapts a handler that needs only the decoded body and always
// answers with one kmsg response.
func replying[Req kmsg.Request](handle func(h *Handler, req Req) kmsg.Response) keyHandler[Req] {
	return func(h *Handler, _ context.Context, _ *server.Request, req Req) server.Response {
		return reply(handle(h, req))
	}
}

// replyingFor adapts a handler that needs the request (its principal, for
// authorization) and the decoded body and always answers with one kmsg
// response.
func replyingFor[Req kmsg.Request](handle func(h *Handler, creq *server.Request, req Req) kmsg.Response) keyHandler[Req] {
	return func(h *Handler, _ context.Context, creq *server.Request, req Req) server.Response {
		return reply(handle(h, creq, req))
	}
}

// servedKey returns the registry entry of key, or nil.
func servedKey(key int16) *apiKey {
	if key < 0 || int(key) >= len(apiKeys) {
		return nil
	}
	return apiKeys[key]
}

// served is key's entry if this handler serves it: every registered key,
// the cluster-only ones only in cluster mode.
func (h *Handler) served(key int16) *apiKey {
	k := servedKey(key)
	if k == nil || k.clusterOnly && !h.clusterMode() {
		return nil
	}
	return k
}

// Versions implements server.Handler.
func (h *Handler) Versions(key int16) (int16, int16, bool) {
	k := h.served(key)
	if k == nil {
		return 0, 0, false
	}
	return k.minVersion, k.maxVersion, true
}

// Ordered implements server.Handler: produce requests on one connection
// reach the logs in arrival order, as Kafka guarantees by handling one
// request per connection at a time. Idempotent producers pipeline up to five
// batches per partition and rely on it.
func (h *Handler) Ordered(key int16) bool {
	k := servedKey(key)
	return k != nil && k.ordered
}

// Handle implements server.Handler.
func (h *Handler) Handle(ctx context.Context, req *server.Request) server.Response {
	k := h.served(req.Key)
	if k == nil {
		// The server decodes only keys Versions serves, so this is a bug.
		h.log.Error("closing connection: no handler", "key", req.Key, "client", req.Remote)
		return server.Response{None: true, Close: true}
	}
	if k.authz.gate != nil {
		if refused := k.authz.gate(h, req); refused != nil {
			return reply(refused) // authz.go: refused whole, before the handler
		}
	}
	if h.quotas.Enabled() {
		return h.throttledHandle(ctx, k, req) // throttle.go
	}
	return k.handle(h, ctx, req)
}

func reply(r kmsg.Response) server.Response { return server.Response{Body: r} }

// errorReply is body's answer with every error code set to code
// (internal/errresp), or, for a request type without an error response, the
// connection closed, as Kafka does for a request it cannot answer: never a
// bare response, whose error code 0 a client reads as success.
func errorReply(body kmsg.Request, code int16) server.Response {
	if r := errresp.For(body, code); r != nil {
		return reply(r)
	}
	return server.Response{None: true, Close: true}
}

func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
