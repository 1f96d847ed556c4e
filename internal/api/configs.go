package api

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/plog"
	"github.com/sushka-io/sushka/internal/server"
)

// Defaults are the broker-level topic config defaults (Kafka's log.* broker
// configs). Start from KafkaDefaults and change what the operator set:
// every value is used as it is, zero included, with Kafka's meaning
// (retention.ms 0: delete segments once rolled; retention.bytes 0: keep
// only the active segment; -1: unlimited), and Validate refuses what Kafka
// refuses. Explicit names the broker configs set by the operator, reported
// with source STATIC_BROKER_CONFIG instead of DEFAULT_CONFIG.
type Defaults struct {
	RetentionMs     int64  // log.retention.ms; -1 unlimited
	RetentionBytes  int64  // log.retention.bytes; negative unlimited
	SegmentBytes    int64  // log.segment.bytes
	SegmentMs       int64  // log.roll.ms
	MaxMessageBytes int32  // message.max.bytes
	TimestampType   string // log.message.timestamp.type
	// MinInsyncReplicas is min.insync.replicas: what a replicated
	// partition's acks=all needs in sync (replica.Config).
	MinInsyncReplicas int32
	Explicit          map[string]bool
}

// KafkaDefaults are Apache Kafka's defaults, which are the partition log's
// (plog.DefaultConfig is their one home) but for min.insync.replicas, whose
// home is here (the replicated partition's, internal/replica, takes it from
// the topic's effective configs).
func KafkaDefaults() Defaults {
	d := plog.DefaultConfig(nil, "")
	return Defaults{
		RetentionMs:     d.RetentionTime.Milliseconds(),
		RetentionBytes:  d.RetentionBytes,
		SegmentBytes:    d.SegmentBytes,
		SegmentMs:       d.SegmentMaxAge.Milliseconds(),
		MaxMessageBytes: int32(d.MaxBatchBytes),
		TimestampType:   "CreateTime",
		// Kafka's min.insync.replicas: the leader alone.
		MinInsyncReplicas: 1,
	}
}

// value returns the broker default of a topic config, as a string.
func (d Defaults) value(topicConfig string) string {
	switch topicConfig {
	case "retention.ms":
		return strconv.FormatInt(d.RetentionMs, 10)
	case "retention.bytes":
		return strconv.FormatInt(d.RetentionBytes, 10)
	case "segment.bytes":
		return strconv.FormatInt(d.SegmentBytes, 10)
	case "segment.ms":
		return strconv.FormatInt(d.SegmentMs, 10)
	case "max.message.bytes":
		return strconv.FormatInt(int64(d.MaxMessageBytes), 10)
	case "message.timestamp.type":
		return d.TimestampType
	case "cleanup.policy":
		return "delete"
	case "min.insync.replicas":
		return strconv.FormatInt(int64(d.MinInsyncReplicas), 10)
	}
	return ""
}

// Validate checks every default with the rules of the topic config it
// supplies; the error names the broker config and its allowed values.
func (d Defaults) Validate() error {
	for _, c := range meta.TopicConfigs {
		v := d.value(c.Name)
		if err := c.Check(v); err != nil {
			return fmt.Errorf("invalid value %q for broker config %s: %v", v, c.BrokerName, err)
		}
	}
	return nil
}

// logConfig is the partition log config for a topic's effective configs:
// exactly the values DescribeConfigs reports, none replaced by a default.
func (h *Handler) logConfig(mt meta.Topic, p int32) plog.Config {
	get := func(name string) string {
		if v, ok := mt.Configs[name]; ok {
			return v
		}
		return h.cfg.Defaults.value(name)
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(get(name)), 10, 64) // validated
		return n
	}
	cfg := plog.DefaultConfig(h.cfg.FS, h.partitionDir(mt.Name, p))
	cfg.Logger = h.log.With("topic", mt.Name, "partition", p)
	cfg.SegmentBytes = num("segment.bytes")
	cfg.SegmentMaxAge = millis(num("segment.ms"))
	cfg.RetentionBytes = num("retention.bytes")
	cfg.RetentionTime = millis(num("retention.ms"))
	cfg.MaxBatchBytes = int(num("max.message.bytes"))
	cfg.WritePath = h.cfg.WritePath
	cfg.FileCache = h.cfg.FileCache
	cfg.ProducerIDExpiration = h.cfg.ProducerIDExpiration
	cfg.SyncInterval = h.cfg.SyncInterval
	cfg.EarlyWritebackBytes = h.cfg.EarlyWritebackBytes
	if get("message.timestamp.type") == "LogAppendTime" {
		cfg.TimestampType = plog.LogAppendTime
	}
	return cfg
}

// millis converts a config in milliseconds to a Duration, saturating:
// Kafka users write Long.MAX_VALUE for "forever", which would overflow.
func millis(ms int64) time.Duration {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > maxMs:
		return math.MaxInt64
	case ms < -maxMs:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// Config sources as Kafka numbers them (DescribeConfigs v1+).
const (
	sourceTopic        int8 = 1 // DYNAMIC_TOPIC_CONFIG
	sourceStaticBroker int8 = 4 // STATIC_BROKER_CONFIG
	sourceDefault      int8 = 5 // DEFAULT_CONFIG
)

// Resource types (ConfigResourceType).
const (
	resourceTopic  = kmsg.ConfigResourceTypeTopic
	resourceBroker = kmsg.ConfigResourceTypeBroker
)

type configSynonym struct {
	name, value string
	source      int8
}

type configEntry struct {
	name     string
	value    string
	readOnly bool
	source   int8
	typ      meta.ConfigType
	doc      string
	synonyms []configSynonym
}

// topicConfigEntries lists a topic's effective configs (all, or the named
// ones) with their sources and synonyms, as Kafka reports them.
func (h *Handler) topicConfigEntries(mt meta.Topic, names []string) []configEntry {
	var out []configEntry
	for _, d := range meta.TopicConfigs {
		if len(names) > 0 && !contains(names, d.Name) {
			continue
		}
		def := h.cfg.Defaults.value(d.Name)
		defSource := sourceDefault
		if h.cfg.Defaults.Explicit[d.BrokerName] {
			defSource = sourceStaticBroker
		}
		e := configEntry{name: d.Name, typ: d.Type, doc: d.Doc, value: def, source: defSource}
		if v, ok := mt.Configs[d.Name]; ok {
			e.value, e.source = v, sourceTopic
			e.synonyms = append(e.synonyms, configSynonym{d.Name, v, sourceTopic})
		}
		e.synonyms = append(e.synonyms, configSynonym{d.BrokerName, def, defSource})
		out = append(out, e)
	}
	return out
}

// brokerConfigEntries lists the broker's configs. None can be changed while
// the broker runs, so all are read-only (as Kafka marks non-dynamic
// configs).
func (h *Handler) brokerConfigEntries(names []string) []configEntry {
	d := h.cfg.Defaults
	source := func(name string) int8 {
		if d.Explicit[name] {
			return sourceStaticBroker
		}
		return sourceDefault
	}
	all := []configEntry{
		{name: "node.id", value: strconv.Itoa(int(h.cfg.NodeID)), typ: meta.TypeInt, source: sourceStaticBroker},
		{name: "broker.id", value: strconv.Itoa(int(h.cfg.NodeID)), typ: meta.TypeInt, source: sourceStaticBroker},
		{name: "log.dirs", value: h.cfg.DataDir, typ: meta.TypeString, source: sourceStaticBroker},
		{name: "advertised.listeners", value: h.advertisedListeners(), typ: meta.TypeList, source: sourceStaticBroker},
		{name: "listener.security.protocol.map", value: h.listenerProtocolMap(), typ: meta.TypeList, source: sourceStaticBroker},
		{name: "auto.create.topics.enable", value: strconv.FormatBool(h.cfg.AutoCreateTopics), typ: meta.TypeBoolean, source: source("auto.create.topics.enable")},
		{name: "num.partitions", value: strconv.Itoa(int(h.cfg.DefaultPartitions)), typ: meta.TypeInt, source: source("num.partitions")},
		{name: "default.replication.factor", value: "1", typ: meta.TypeInt, source: sourceDefault},
		{name: "socket.request.max.bytes", value: strconv.Itoa(int(h.cfg.MaxRequestBytes)), typ: meta.TypeInt, source: source("socket.request.max.bytes")},
	}
	for _, td := range meta.TopicConfigs {
		all = append(all, configEntry{name: td.BrokerName, value: d.value(td.Name), typ: td.Type, doc: td.Doc, source: source(td.BrokerName)})
	}
	var out []configEntry
	for _, e := range all {
		if len(names) > 0 && !contains(names, e.name) {
			continue
		}
		e.readOnly = true
		e.synonyms = []configSynonym{{e.name, e.value, e.source}}
		out = append(out, e)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkBrokerResource validates a broker resource name: empty (cluster
// default) or this node's ID.
func (h *Handler) checkBrokerResource(name string) error {
	if name == "" || name == strconv.Itoa(int(h.cfg.NodeID)) {
		return nil
	}
	return fmt.Errorf("unexpected broker id, expected %d or empty string, but received %s", h.cfg.NodeID, name)
}

// rejectConfigAlter answers AlterConfigs and IncrementalAlterConfigs for a
// resource that is not a topic, always INVALID_REQUEST: broker configs
// cannot change while the broker runs (Kafka's answer for non-dynamic
// configs), and other resource types are not supported.
func (h *Handler) rejectConfigAlter(resourceType kmsg.ConfigResourceType, name string) (int16, error) {
	if resourceType != resourceBroker {
		return kerr.InvalidRequest.Code, fmt.Errorf("resource type %v is not supported", resourceType)
	}
	if err := h.checkBrokerResource(name); err != nil {
		return kerr.InvalidRequest.Code, err
	}
	return kerr.InvalidRequest.Code, fmt.Errorf("broker configs cannot be changed while the broker runs; restart it with new flags")
}

// configResources is the one walk of a config request's resources
// (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) and the checks
// the three share. A request naming more distinct resources than one
// request may is refused whole (tooManyPartitions: refused, true).
// Otherwise each distinct resource is handed to answer once, in the
// request's order, with the code it gets before it is served: INVALID_REQUEST
// for one named more than once (Kafka: "each resource must appear at most
// once"; answered once and not served, so repeats cannot multiply the
// work), the denial when the principal may not op on it (configDenied), or
// 0: answer serves it. locked, if not nil, is held while answering.
func configResources[R any](h *Handler, creq *server.Request, resources []R, op acl.Operation, locked sync.Locker,
	key func(*R) (kmsg.ConfigResourceType, string), answer func(rr *R, code int16, err error)) (server.Response, bool) {
	repeated, distinctResources := repeatedResources(resources, func(rr *R) (int8, string) {
		rt, name := key(rr)
		return int8(rt), name
	})
	if refused, ok := h.tooManyPartitions(creq, distinctResources); ok {
		return refused, true
	}
	if locked != nil {
		locked.Lock()
		defer locked.Unlock()
	}
	notServed := ""
	if op == acl.AlterConfigs {
		notServed = ": not altered"
	}
	var answered requestPartitions
	distinct := int32(0)
	for i := range resources {
		rr := &resources[i]
		rt, name := key(rr)
		entry, again := answered.partition(answered.topic(resourceKey(int8(rt), name)), 0, distinct)
		if again {
			continue // answered with its first entry
		}
		distinct++
		if repeated[entry] {
			answer(rr, kerr.InvalidRequest.Code, fmt.Errorf("resource %s named more than once in the request%s", name, notServed))
			continue
		}
		code, err := h.configDenied(creq, rt, name, op)
		answer(rr, code, err)
	}
	return server.Response{}, false
}

// alterTopicConfigsLocked validates and applies a topic's new override set:
// catalogue first (durable), then the partition logs, then the published
// topic value. adminMu must be held (h.adminLocker: in cluster mode the
// change goes through the quorum, and this node's apply of it publishes
// it). incremental are IncrementalAlterConfigs' operations that made
// configs from this node's view (nil for AlterConfigs): in cluster mode the
// controller applies them again to its own state.
func (h *Handler) alterTopicConfigsLocked(name string, configs map[string]string,
	incremental []kmsg.IncrementalAlterConfigsRequestResourceConfig, validateOnly bool) (int16, error) {
	t := h.lookup(name)
	if t == nil {
		return kerr.UnknownTopicOrPartition.Code, fmt.Errorf("unknown topic %s", name)
	}
	if err := meta.ValidateConfigs(configs); err != nil {
		return kerr.InvalidConfig.Code, err
	}
	if validateOnly {
		return 0, nil
	}
	if cm := h.clusterMeta(); cm != nil {
		// Through the quorum; this node's logs take the configs when it
		// applies them (TopicConfigsApplied), before the answer.
		ctx, cancel := clusterChangeContext()
		defer cancel()
		var err error
		if incremental != nil {
			err = cm.AlterTopicConfigs(ctx, name, incremental, func(current map[string]string) (map[string]string, error) {
				return applyIncremental(current, incremental)
			})
		} else {
			err = cm.SetTopicConfigs(ctx, name, configs)
		}
		if err != nil {
			return errorCode(err), err
		}
		h.log.Info("topic configs changed", "topic", name, "configs", configs)
		return 0, nil
	}
	if err := h.cfg.Catalog.SetConfigs(name, configs); err != nil {
		return errorCode(err), err
	}
	h.publishTopicConfigs(t, configs)
	h.log.Info("topic configs changed", "topic", name, "configs", configs)
	return 0, nil
}

// publishTopicConfigs gives t's logs and its published value the new
// overrides.
func (h *Handler) publishTopicConfigs(t *topic, configs map[string]string) {
	nt := &topic{meta: t.meta, parts: t.parts, reps: t.reps}
	nt.meta.Configs = maps.Clone(configs)
	for p, l := range nt.parts {
		if l == nil {
			continue // a partition this node does not hold (cluster mode)
		}
		if r := nt.replicated(int32(p)); r != nil {
			r.SetMinInsyncReplicas(h.minInsyncReplicas(nt.meta))
		}
		// Validated before, so this cannot fail on a healthy log; a Failed
		// log keeps refusing whatever its config.
		if err := l.SetConfig(h.logConfig(nt.meta, int32(p))); err != nil {
			h.log.Error("partition log refused its new config", "topic", nt.meta.Name, "partition", p, "err", err)
		}
	}
	h.mu.Lock()
	h.topics[nt.meta.Name] = nt
	h.byID[nt.meta.ID] = nt
	h.mu.Unlock()
}

// applyIncremental applies IncrementalAlterConfigs operations to a copy of
// the overrides. Its errors are INVALID_REQUEST, except an APPEND or
// SUBTRACT on a config that is not a list, which is INVALID_CONFIG as in
// Kafka (errNotAList).
func applyIncremental(current map[string]string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig) (map[string]string, error) {
	next := maps.Clone(current)
	if next == nil {
		next = map[string]string{}
	}
	for _, op := range ops {
		def, known := meta.LookupConfig(op.Name)
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return nil, fmt.Errorf("null value for %s", op.Name)
			}
			next[op.Name] = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if !known || def.Type != meta.TypeList {
				return nil, fmt.Errorf("%w: config value append or subtract is not allowed for %s", errNotAList, op.Name)
			}
			if op.Value == nil {
				return nil, fmt.Errorf("null value for %s", op.Name)
			}
			items := splitList(next[op.Name])
			for _, v := range splitList(*op.Value) {
				if op.Op == kmsg.IncrementalAlterConfigOpAppend {
					if !contains(items, v) {
						items = append(items, v)
					}
				} else {
					items = remove(items, v)
				}
			}
			next[op.Name] = strings.Join(items, ",")
		default:
			return nil, fmt.Errorf("unknown operation %d for %s", op.Op, op.Name)
		}
	}
	return next, nil
}

// errNotAList is wrapped by applyIncremental for APPEND or SUBTRACT on a
// config that is not a list.
var errNotAList = errors.New("not a list config")

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func remove(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// advertisedListeners is Kafka's advertised.listeners value:
// NAME://host:port for each listener.
func (h *Handler) advertisedListeners() string {
	var parts []string
	for _, ep := range h.endpoints() {
		parts = append(parts, ep.Listener+"://"+net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))))
	}
	return strings.Join(parts, ",")
}

// listenerProtocolMap is Kafka's listener.security.protocol.map value:
// NAME:PROTOCOL for each listener.
func (h *Handler) listenerProtocolMap() string {
	var parts []string
	for _, ep := range h.endpoints() {
		parts = append(parts, ep.Listener+":"+ep.Protocol.String())
	}
	return strings.Join(parts, ",")
}
