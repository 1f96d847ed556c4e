// Package broker embeds a Sushka broker in a Go program, in the style of
// net/http: configure a Config, call New, Serve on any listener, Shutdown
// to stop.
//
//	b, err := broker.New(broker.Config{DataDir: "data"})
//	l, _ := net.Listen("tcp", "127.0.0.1:9092")
//	go b.Serve(l)
//	…
//	b.Shutdown(ctx)
//
// A Broker opens its topic catalogue and partition logs in New, serves the
// Kafka protocol on every listener passed to Serve, enforces retention in
// the background, and on Shutdown stops accepting, finishes in-flight
// requests, then syncs and closes the logs.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/api"
	"github.com/sushka-io/sushka/internal/clock"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/internal/vfs"
)

// Config configures a Broker. The zero value of every field has a sensible
// meaning (see the field comments); only DataDir is usually set.
type Config struct {
	// DataDir holds the partition directories (<topic>-<partition>/) and
	// meta/. Default "sushka-data".
	DataDir string
	// AdvertisedAddr is the host:port clients are told to connect to. Empty:
	// the address of the first listener passed to Serve. Only without
	// Listeners (each listener has its Advertised then).
	AdvertisedAddr string
	// Listeners are the broker's Kafka listeners (Kafka's listeners,
	// advertised.listeners and listener.security.protocol.map together):
	// each has a name, a security protocol and an advertised endpoint, and
	// is served with ServeListener. Empty: one PLAINTEXT listener named
	// PLAINTEXT, advertised at AdvertisedAddr (Serve serves it).
	Listeners []Listener
	// AutoCreateTopics creates unknown topics named in Metadata requests.
	// It is a pointer so the zero Config means Kafka's default, true.
	AutoCreateTopics *bool
	// DefaultPartitions is the partition count of auto-created topics and
	// of CreateTopics with -1 partitions. Default 1.
	DefaultPartitions int32
	// MaxPartitionsPerTopic bounds the partition count of a topic
	// (CreateTopics, CreatePartitions). Default 10000.
	MaxPartitionsPerTopic int32
	// MaxPartitions bounds the partitions of all topics together
	// (CreateTopics, CreatePartitions, auto-creation answer
	// INVALID_PARTITIONS beyond it). Default meta.DefaultMaxPartitions
	// (100000); negative: no bound.
	MaxPartitions int64
	// NodeID is this broker's node ID. Default 0.
	NodeID int32
	// Cluster, when set, makes the broker a node of a multi-node cluster
	// (cluster.go): the metadata quorum, registration and heartbeats,
	// topics created through the active controller. Nil: a single node.
	Cluster *ClusterConfig
	// MaxRequestBytes closes connections sending larger frames. Default
	// 100 MiB.
	MaxRequestBytes int32
	// MaxInFlight bounds unanswered requests per connection. Default 16.
	MaxInFlight int
	// MaxRequestMemory is the budget of request bytes held in memory by
	// all connections together (Kafka's queued.max.request.bytes): a
	// connection reserves a frame's size before reading it and stops
	// reading while the budget is short. A frame larger than the budget is
	// refused like one above MaxRequestBytes. Default 256 MiB.
	MaxRequestMemory int64
	// MaxConnections and MaxConnectionsPerIP bound open client connections
	// (max.connections, max.connections.per.ip); a connection over a limit
	// is accepted and closed at once. Defaults 10000 and 1000.
	MaxConnections      int
	MaxConnectionsPerIP int
	// IdleTimeout closes connections with nothing in flight and no
	// traffic for that long (connections.max.idle.ms). Default 10 minutes.
	IdleTimeout time.Duration
	// FrameReadTimeout closes a connection whose request frame, once its
	// first byte arrived, is not complete within it. Default 30 s.
	FrameReadTimeout time.Duration
	// WriteTimeout closes a connection whose response makes no progress
	// for that long (a client that stopped reading). Default 30 s.
	WriteTimeout time.Duration
	// FS is the filesystem. Default the OS.
	FS vfs.FS
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Registry receives the broker's Prometheus metrics. Default: a new
	// per-broker registry (see Broker.Registry).
	Registry *prometheus.Registry
	// Log defaults for topics without overrides (Kafka's log.* broker
	// configs). Nil: Kafka's defaults (7 days, unlimited bytes, 1 GiB
	// segments, 1 MiB + 12 batches). Set, each is used as it is with
	// Kafka's meaning, zero included (retention 0: segments are deleted
	// once rolled; retention bytes 0: only the active segment is kept), and
	// New refuses values Kafka refuses (segment bytes below 1 MiB, ...).
	// Ptr makes the pointers.
	RetentionTime   *time.Duration // log.retention.ms; negative: unlimited
	RetentionBytes  *int64         // log.retention.bytes; negative: unlimited
	SegmentBytes    *int64         // log.segment.bytes
	SegmentMaxAge   *time.Duration // log.roll.ms
	MaxMessageBytes *int32         // message.max.bytes
	LogAppendTime   bool           // log.message.timestamp.type=LogAppendTime
	// RetentionCheckInterval is how often retention is enforced. Default
	// 30 s.
	RetentionCheckInterval time.Duration
	// MaxOpenSegmentFiles bounds the idle segment files kept open across
	// all partitions (opened on use, least recently used closed first;
	// files being read or written are open besides). Default
	// DefaultMaxOpenSegmentFiles.
	MaxOpenSegmentFiles int
	// SegmentFileIdleTimeout closes an idle segment file unused for this
	// long, so that idle partitions hold no descriptor. Default
	// DefaultSegmentFileIdleTimeout; negative: idle files are closed only
	// when MaxOpenSegmentFiles needs their room.
	SegmentFileIdleTimeout time.Duration
	// ProducerIDExpiration is producer.id.expiration.ms: an idempotent
	// producer that has not produced to a partition for this long is
	// forgotten there (while running and at start-up). Default 1 day.
	ProducerIDExpiration time.Duration
	// MaxFetchWait caps a Fetch's long poll (its MaxWaitMs). Default 30 s.
	MaxFetchWait time.Duration
	// FetchSessionSlots is max.incremental.fetch.session.cache.slots: the
	// fetch sessions (KIP-227) kept broker-wide. Default
	// DefaultFetchSessionSlots (Kafka's 1000); negative: none.
	FetchSessionSlots int
	// SyncInterval paces the fsyncs of acks=0/1 appends (plog
	// Config.SyncInterval): a partition's fsync that acknowledges no
	// acks=all append starts at least this long after the previous one.
	// Default DefaultSyncInterval; negative: no pacing.
	SyncInterval time.Duration
	// EarlyWritebackBytes starts the writeback of this many bytes written
	// by acks=all appends while their fsync runs (plog
	// Config.EarlyWritebackBytes). Default DefaultEarlyWritebackBytes;
	// negative: off.
	EarlyWritebackBytes int64
	// RecoveryThreads is how many partition logs are opened (recovered:
	// every batch checked, indexes rebuilt) at once at start-up (Kafka's
	// num.recovery.threads.per.data.dir). Default DefaultRecoveryThreads():
	// one per core, 2 to 8.
	RecoveryThreads int

	// Authorizer turns ACL authorization on (--authorizer; Kafka's
	// authorizer.class.name): every request is checked against the ACLs
	// (CreateACLs, `sushka acl`), and nothing is allowed without one.
	// Off (the default), everything is allowed.
	Authorizer bool
	// SuperUsers are principals allowed everything, in Kafka's form
	// ("User:admin"; super.users).
	SuperUsers []string
	// AllowEveryoneIfNoACLFound allows requests on resources no ACL names
	// (allow.everyone.if.no.acl.found). Default false.
	AllowEveryoneIfNoACLFound bool
	// QuotaWindows and QuotaWindowSize are the window client quotas are
	// measured over (Kafka's quota.window.num and
	// quota.window.size.seconds; the quotas themselves are set with
	// AlterClientQuotas). Defaults 11 and 1 s.
	QuotaWindows    int
	QuotaWindowSize time.Duration
	// SASL, on the Listeners of protocol SASL_PLAINTEXT and SASL_SSL.
	// SASLMechanisms are the mechanisms accepted (Kafka's
	// sasl.enabled.mechanisms: "SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN";
	// nil: all three), every one verified against the SCRAM credentials
	// of the metadata log.
	SASLMechanisms []string
	// BootstrapUser and BootstrapPassword, when BootstrapUser is set,
	// give that user SCRAM-SHA-256 and SCRAM-SHA-512 credentials at start
	// if it has none (--bootstrap-user): how a first administrator exists.
	BootstrapUser     string
	BootstrapPassword string
	// ConnectionsMaxReauth is connections.max.reauth.ms: the session
	// lifetime of a SASL authentication (KIP-368); 0: no limit.
	ConnectionsMaxReauth time.Duration
	// FailedAuthenticationDelay is connection.failed.authentication.delay.ms.
	// Default DefaultFailedAuthenticationDelay; negative: none.
	FailedAuthenticationDelay time.Duration
	// MaxSASLReceiveBytes is sasl.server.max.receive.size: the largest
	// frame before authentication. Default DefaultMaxSASLReceiveBytes.
	MaxSASLReceiveBytes int32
}

// Listener is one of the broker's Kafka listeners.
type Listener struct {
	// Name is Kafka's listener name (EXTERNAL, INTERNAL, ...), unique
	// among the listeners; default the protocol's name.
	Name     string
	Protocol server.SecurityProtocol
	// Advertised is the host:port clients that came through this
	// listener are told to connect to (Metadata, DescribeCluster,
	// FindCoordinator). Empty: the address it is served on.
	Advertised string
	// TLS is the TLS configuration of an SSL or SASL_SSL listener
	// (server.NewTLSConfig makes one that reloads its files); required
	// for them, refused for the others.
	TLS *tls.Config
}

// ListenerInfo is a listener as it is served: its address and the
// endpoint it advertises (Broker.Listeners).
type ListenerInfo struct {
	Name       string
	Protocol   server.SecurityProtocol
	Addr       net.Addr // nil until served
	Advertised string   // host:port; "" until served
}

// DefaultRecoveryThreads is Config.RecoveryThreads' default.
var DefaultRecoveryThreads = plog.DefaultRecoveryThreads

// The defaults of Config's fields that come from the packages that use them.
const (
	DefaultMaxOpenSegmentFiles    = plog.DefaultMaxOpenSegmentFiles
	DefaultSegmentFileIdleTimeout = plog.DefaultSegmentFileIdleTimeout
	DefaultProducerIDExpiration   = plog.DefaultProducerIDExpiration
	DefaultMaxFetchWait           = api.DefaultMaxFetchWait
	DefaultSyncInterval           = plog.DefaultSyncInterval
	DefaultEarlyWritebackBytes    = plog.DefaultEarlyWritebackBytes

	DefaultFailedAuthenticationDelay = api.DefaultFailedAuthenticationDelay
	DefaultMaxSASLReceiveBytes       = server.DefaultMaxSASLReceiveBytes
	DefaultFetchSessionSlots         = api.DefaultFetchSessionSlots
)

// Broker is a running broker.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	catalog *meta.Catalog
	handler *api.Handler
	srv     *server.Server
	metrics *metrics
	cluster *clusterNode // nil on a single node

	mu sync.Mutex
	// listeners are cfg.Listeners as served: Addr and Advertised are set
	// when ServeListener starts each.
	listeners []ListenerInfo
	shutdown  bool
	stopBG    chan struct{}
	bgDone    chan struct{}
}

// Bool returns a pointer to b, for Config.AutoCreateTopics.
func Bool(b bool) *bool { return &b }

// Ptr returns a pointer to v, for the optional fields of Config.
func Ptr[T any](v T) *T { return &v }

// New opens (or creates) the data directory: the catalogue and every
// partition log, recovering them.
func New(cfg Config) (*Broker, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "sushka-data"
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AutoCreateTopics == nil {
		cfg.AutoCreateTopics = Bool(true)
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = server.DefaultMaxRequestBytes
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = 30 * time.Second
	}
	if cfg.MaxOpenSegmentFiles <= 0 {
		cfg.MaxOpenSegmentFiles = DefaultMaxOpenSegmentFiles
	}
	switch {
	case cfg.SegmentFileIdleTimeout == 0:
		cfg.SegmentFileIdleTimeout = DefaultSegmentFileIdleTimeout
	case cfg.SegmentFileIdleTimeout < 0:
		cfg.SegmentFileIdleTimeout = 0 // plog: no idle timeout
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if err := validateListeners(&cfg); err != nil {
		return nil, err
	}
	for _, p := range cfg.SuperUsers {
		if err := acl.ValidPrincipal(p); err != nil {
			return nil, fmt.Errorf("broker: super user: %w", err)
		}
	}
	if err := cfg.FS.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: creating data directory: %w", err)
	}
	// The data directory's own entry must survive a crash, or everything
	// acknowledged in a new one could go with it.
	if err := cfg.FS.SyncDir(filepath.Dir(filepath.Clean(cfg.DataDir))); err != nil {
		return nil, fmt.Errorf("broker: syncing the data directory's parent: %w", err)
	}
	catalog, err := meta.Open(cfg.FS, filepath.Join(cfg.DataDir, "meta"))
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if cfg.MaxPartitions == 0 {
		cfg.MaxPartitions = meta.DefaultMaxPartitions
	}
	catalog.SetMaxPartitions(cfg.MaxPartitions)
	if cfg.BootstrapUser != "" {
		created, err := catalog.EnsureScramUser(cfg.BootstrapUser, cfg.BootstrapPassword)
		if err != nil {
			catalog.Close()
			return nil, fmt.Errorf("broker: bootstrap user: %w", err)
		}
		if created {
			cfg.Logger.Info("bootstrap user created with SCRAM-SHA-256 and SCRAM-SHA-512 credentials", "user", cfg.BootstrapUser)
		}
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, catalog: catalog, stopBG: make(chan struct{}), bgDone: make(chan struct{})}
	for _, ln := range cfg.Listeners {
		b.listeners = append(b.listeners, ListenerInfo{Name: ln.Name, Protocol: ln.Protocol})
	}
	b.metrics = newMetrics(cfg.Registry)
	quotas, _ := newQuotaMetrics(cfg.Registry, cfg) // quotas.go
	var cluster api.Cluster
	if cfg.Cluster != nil {
		warnNodesPrincipal(cfg, b.log) // cluster_meta.go
		if b.cluster, err = newClusterNode(b, *cfg.Cluster); err != nil {
			catalog.Close()
			return nil, err
		}
		cluster = b.cluster
	}
	b.handler, err = api.New(api.Config{
		Cluster:               cluster,
		FS:                    cfg.FS,
		DataDir:               cfg.DataDir,
		Catalog:               catalog,
		Logger:                cfg.Logger,
		Metrics:               b.metrics,
		NodeID:                cfg.NodeID,
		AutoCreateTopics:      *cfg.AutoCreateTopics,
		DefaultPartitions:     cfg.DefaultPartitions,
		MaxPartitionsPerTopic: cfg.MaxPartitionsPerTopic,
		MaxRequestBytes:       cfg.MaxRequestBytes,
		Defaults:              defaults(cfg),
		FileCache:             plog.NewIdleFileCache(cfg.MaxOpenSegmentFiles, cfg.SegmentFileIdleTimeout, clock.Real{}),
		ProducerIDExpiration:  cfg.ProducerIDExpiration,
		MaxFetchWait:          cfg.MaxFetchWait,
		SyncInterval:          cfg.SyncInterval,
		EarlyWritebackBytes:   cfg.EarlyWritebackBytes,
		RecoveryThreads:       cfg.RecoveryThreads,
		Authorizer: acl.Config{Enabled: cfg.Authorizer, SuperUsers: cfg.SuperUsers,
			AllowIfNoACL: cfg.AllowEveryoneIfNoACLFound},
		Quotas: quotas,

		SASLMechanisms:            cfg.SASLMechanisms,
		ConnectionsMaxReauth:      cfg.ConnectionsMaxReauth,
		FailedAuthenticationDelay: cfg.FailedAuthenticationDelay,
		FetchSessionSlots:         cfg.FetchSessionSlots,
	})
	if err != nil {
		catalog.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	b.srv = server.New(server.Config{
		Handler:              b.handler,
		MaxRequestBytes:      cfg.MaxRequestBytes,
		MaxInFlight:          cfg.MaxInFlight,
		MaxRequestMemory:     cfg.MaxRequestMemory,
		MaxConnections:       cfg.MaxConnections,
		MaxConnectionsPerIP:  cfg.MaxConnectionsPerIP,
		IdleTimeout:          cfg.IdleTimeout,
		FrameReadTimeout:     cfg.FrameReadTimeout,
		WriteTimeout:         cfg.WriteTimeout,
		Logger:               cfg.Logger,
		OnConnection:         b.metrics.connection,
		OnConnectionRejected: b.metrics.connectionRejected,
		OnRequest:            b.metrics.request,
		OnResponse:           b.metrics.response,
		MaxSASLReceiveBytes:  cfg.MaxSASLReceiveBytes,
	})
	b.metrics.watchServer(cfg.Registry, b.srv)
	if b.cluster != nil {
		if err := b.cluster.start(); err != nil {
			b.handler.Close()
			catalog.Close()
			return nil, err
		}
	}
	go b.background()
	return b, nil
}

func defaults(cfg Config) api.Defaults {
	d := api.KafkaDefaults()
	d.Explicit = map[string]bool{}
	set := func(name string) { d.Explicit[name] = true }
	if cfg.RetentionTime != nil {
		d.RetentionMs = cfg.RetentionTime.Milliseconds()
		if *cfg.RetentionTime < 0 {
			d.RetentionMs = -1
		}
		set("log.retention.ms")
	}
	if cfg.RetentionBytes != nil {
		d.RetentionBytes = *cfg.RetentionBytes
		set("log.retention.bytes")
	}
	if cfg.SegmentBytes != nil {
		d.SegmentBytes = *cfg.SegmentBytes
		set("log.segment.bytes")
	}
	if cfg.SegmentMaxAge != nil {
		d.SegmentMs = cfg.SegmentMaxAge.Milliseconds()
		set("log.roll.ms")
	}
	if cfg.MaxMessageBytes != nil {
		d.MaxMessageBytes = *cfg.MaxMessageBytes
		set("message.max.bytes")
	}
	if cfg.LogAppendTime {
		d.TimestampType = "LogAppendTime"
		set("log.message.timestamp.type")
	}
	if cfg.MaxRequestBytes != server.DefaultMaxRequestBytes {
		set("socket.request.max.bytes")
	}
	if cfg.DefaultPartitions != 1 {
		set("num.partitions")
	}
	if !*cfg.AutoCreateTopics {
		set("auto.create.topics.enable")
	}
	return d
}

// validateListeners gives cfg its one PLAINTEXT listener when it has none,
// and refuses contradictions: duplicate names, TLS where the protocol has
// none or none where it has, AdvertisedAddr beside Listeners.
func validateListeners(cfg *Config) error {
	if len(cfg.Listeners) == 0 {
		cfg.Listeners = []Listener{{Name: server.Plaintext.String(), Protocol: server.Plaintext, Advertised: cfg.AdvertisedAddr}}
	} else if cfg.AdvertisedAddr != "" {
		return errors.New("broker: AdvertisedAddr and Listeners are both set: give each listener its Advertised")
	}
	seen := map[string]bool{}
	for i := range cfg.Listeners {
		ln := &cfg.Listeners[i]
		if ln.Name == "" {
			ln.Name = ln.Protocol.String()
		}
		if seen[ln.Name] {
			return fmt.Errorf("broker: listener name %s used twice", ln.Name)
		}
		seen[ln.Name] = true
		if ln.Protocol.TLS() && ln.TLS == nil {
			return fmt.Errorf("broker: listener %s is %s and needs a TLS configuration (certificate and key)", ln.Name, ln.Protocol)
		}
		if !ln.Protocol.TLS() && ln.TLS != nil {
			return fmt.Errorf("broker: listener %s is %s and has no use for a TLS configuration", ln.Name, ln.Protocol)
		}
	}
	return nil
}

// Serve serves the first listener of Config.Listeners (without
// Listeners: the PLAINTEXT one) on l; see ServeListener.
func (b *Broker) Serve(l net.Listener) error { return b.ServeListener(b.cfg.Listeners[0].Name, l) }

// ServeListener serves the Kafka protocol on l as the listener of
// Config.Listeners named name until Shutdown, then returns
// server.ErrServerClosed (ErrServerClosed). It always returns a non-nil
// error, and l is closed when it returns: a broker that cannot serve does
// not keep its port in LISTEN. The listener's advertised endpoint is
// checked and published first (its Advertised, or l's address); a
// listener served on more than one socket keeps the first one's endpoint.
func (b *Broker) ServeListener(name string, l net.Listener) error {
	ln, err := b.startListener(name, l)
	if err != nil {
		l.Close()
		return err
	}
	return b.srv.ServeListener(l, server.Listener{Name: ln.Name, Protocol: ln.Protocol, TLS: ln.TLS})
}

// startListener records l as the address of listener name and publishes
// the endpoints of every listener served so far.
func (b *Broker) startListener(name string, l net.Listener) (Listener, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shutdown {
		return Listener{}, ErrServerClosed
	}
	i := slices.IndexFunc(b.cfg.Listeners, func(ln Listener) bool { return ln.Name == name })
	if i < 0 {
		return Listener{}, fmt.Errorf("broker: no listener named %q in Config.Listeners", name)
	}
	ln := b.cfg.Listeners[i]
	if b.listeners[i].Addr != nil {
		return ln, nil // served on one more socket: the first one's endpoint stays
	}
	adv := ln.Advertised
	if adv == "" {
		adv = l.Addr().String()
	}
	host, portStr, err := net.SplitHostPort(adv)
	if err != nil {
		return Listener{}, fmt.Errorf("broker: listener %s: advertised address %q: %w", name, adv, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return Listener{}, fmt.Errorf("broker: listener %s: advertised address %q has no usable port", name, adv)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return Listener{}, fmt.Errorf("broker: listener %s: advertised address %q is not reachable by clients; set its advertised address", name, adv)
	}
	b.listeners[i].Addr, b.listeners[i].Advertised = l.Addr(), net.JoinHostPort(host, portStr)
	var endpoints []api.Endpoint
	for j, info := range b.listeners {
		if info.Advertised == "" {
			continue
		}
		h, p, _ := net.SplitHostPort(info.Advertised)
		pn, _ := strconv.Atoi(p)
		endpoints = append(endpoints, api.Endpoint{Listener: info.Name, Protocol: b.cfg.Listeners[j].Protocol, Host: h, Port: int32(pn)})
	}
	b.handler.SetAdvertised(endpoints...)
	return ln, nil
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = server.ErrServerClosed

// Addr is the address the first listener is served on (nil before).
func (b *Broker) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listeners[0].Addr
}

// AdvertisedAddr is the host:port clients of the first listener are told
// to use ("" before it is served).
func (b *Broker) AdvertisedAddr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listeners[0].Advertised
}

// Listeners are the broker's listeners, in Config order, with the
// addresses of those served.
func (b *Broker) Listeners() []ListenerInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.listeners)
}

// ScramUserCount is the number of users with a SCRAM credential.
func (b *Broker) ScramUserCount() int { return len(b.catalog.ScramUsers()) }

// Registry is the broker's Prometheus registry.
func (b *Broker) Registry() *prometheus.Registry { return b.cfg.Registry }

// ClusterID is the cluster's ID: the data directory's on a single node,
// the one every node derives from the controller voters in a cluster.
func (b *Broker) ClusterID() string {
	if b.cluster != nil {
		return b.cluster.clusterID
	}
	return b.catalog.ClusterID()
}

// DataDir is the data directory.
func (b *Broker) DataDir() string { return b.cfg.DataDir }

// CloseClientConnections drops every client connection at once, as a
// network failure would (tests use it to exercise client retries).
func (b *Broker) CloseClientConnections() { b.srv.CloseConnections() }

// Shutdown closes the listeners first, lets in-flight requests finish
// (waiting fetches are answered at once), then syncs and closes every
// partition log. Every wait honours ctx: when it ends, connections are
// dropped at once and Shutdown stops waiting for them, for a retention pass
// in progress and for the logs, which are still synced and closed in the
// background (written data is in the page cache either way); it then
// returns an error wrapping ctx's.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.shutdown {
		b.mu.Unlock()
		return errors.New("broker: already shut down")
	}
	b.shutdown = true
	b.mu.Unlock()
	srvErr := b.srv.Shutdown(ctx)
	var clusterErr error
	if b.cluster != nil {
		// Before the logs: the quorum's apply opens partitions.
		clusterErr = b.cluster.close()
	}
	close(b.stopBG)
	var bgErr error
	select {
	case <-b.bgDone:
	case <-ctx.Done():
		bgErr = fmt.Errorf("broker: retention still running at shutdown: %w", ctx.Err())
	}
	closed := make(chan error, 1)
	go func() {
		<-b.bgDone // retention must not run on closed logs
		closed <- b.handler.Close()
	}()
	var closeErr error
	select {
	case closeErr = <-closed:
	case <-ctx.Done():
		closeErr = fmt.Errorf("broker: partition logs still closing at shutdown: %w", ctx.Err())
	}
	return errors.Join(srvErr, clusterErr, bgErr, closeErr, b.catalog.Close())
}

// background enforces retention periodically.
func (b *Broker) background() {
	defer close(b.bgDone)
	t := time.NewTicker(b.cfg.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stopBG:
			return
		case <-t.C:
			b.handler.EnforceRetention()
		}
	}
}
