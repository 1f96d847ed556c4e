package api

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/sasl"
)

// ClusterMeta is the second seam of cluster mode (docs/replication.md
// section 4e): where topic configs, ACLs, SCRAM credentials and client
// quotas are read and changed, and where topics are deleted and grown.
// A Cluster that implements it (broker/cluster_meta.go) serves them from
// the metadata quorum's applied state, the same on every node, and changes
// them through the active controller (forwarded when this node is not
// it), answering once this node has applied the change. Without it (a
// single node) the Handler uses its Catalog (DATA/meta), unchanged.
//
// The request code validates as on a single node before calling a change;
// the controller validates again on its own state (the same checks, in
// internal/meta). The node applies what the quorum commits through the
// Handler's hooks below (TopicConfigsApplied, TopicRemoved,
// SecurityApplied) and HostPartition.
type ClusterMeta interface {
	sasl.Store // SCRAM login
	ACLs() []acl.Binding
	ScramUsers() map[string][]meta.ScramInfo
	ClientQuotas() []meta.ClientQuota

	CreateACLs(ctx context.Context, bs []acl.Binding) error
	DeleteACLs(ctx context.Context, filters []acl.Filter) ([][]acl.Binding, error)
	AlterScramCredentials(ctx context.Context, changes []meta.ScramChange) error
	// AlterClientQuotas answers each alteration its own error.
	AlterClientQuotas(ctx context.Context, alterations []meta.QuotaAlteration) []error
	SetTopicConfigs(ctx context.Context, name string, configs map[string]string) error
	// AlterTopicConfigs is IncrementalAlterConfigs: alter (the operations
	// ops) applied by the controller to the topic's overrides as it has
	// them, so that concurrent changes through other nodes are not lost.
	AlterTopicConfigs(ctx context.Context, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig,
		alter func(current map[string]string) (map[string]string, error)) error
	DeleteTopic(ctx context.Context, name string) error
	// CreatePartitions grows a topic (validateOnly: checks only, on this
	// node's replica of the quorum).
	CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error
}

// clusterMeta is the Cluster's ClusterMeta (nil on a single node).
func (h *Handler) clusterMeta() ClusterMeta {
	cm, _ := h.cfg.Cluster.(ClusterMeta)
	return cm
}

// metaReads is where configs, ACLs, SCRAM credentials and quotas are read:
// the quorum's applied state in cluster mode, the Catalog otherwise.
type metaReads interface {
	sasl.Store
	ACLs() []acl.Binding
	ScramUsers() map[string][]meta.ScramInfo
	ClientQuotas() []meta.ClientQuota
}

func metaReadsOf(cfg *Config) metaReads {
	if cm, ok := cfg.Cluster.(ClusterMeta); ok {
		return cm
	}
	return cfg.Catalog
}

func (h *Handler) metaReads() metaReads { return metaReadsOf(&h.cfg) }

// clusterChangeContext bounds a change through the controller (Kafka's
// default request timeout, as creations).
func clusterChangeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), clusterCreateTimeout)
}

// adminLocker is what the admin keys serialize on: adminMu on a single
// node; nothing in cluster mode, where the quorum orders the changes and
// this node's apply of them takes adminMu (HostPartition) while the
// request waits for it.
func (h *Handler) adminLocker() sync.Locker {
	if h.clusterMode() {
		return noLock{}
	}
	return &h.adminMu
}

type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// TopicConfigsApplied is the broker's hook when the quorum applies a
// topic's new config overrides: the topic's logs take them (retention,
// segment sizes, …) and the published topic carries them.
func (h *Handler) TopicConfigsApplied(mt meta.Topic) {
	if t := h.lookupID(mt.ID); t != nil {
		h.publishTopicConfigs(t, mt.Configs)
	}
}

// TopicRemoved is the broker's hook when the quorum applies a topic's
// removal: its local replicas are closed and their directories removed
// (deleteTopicLocked without the catalogue's record: the quorum's log has
// it, and a restart replays it).
func (h *Handler) TopicRemoved(id [16]byte) {
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	if t := h.lookupID(id); t != nil {
		if err := h.deleteTopicLocked(t); err != nil {
			h.log.Error("removing a deleted topic's replicas", "topic", t.meta.Name, "err", err)
		}
	}
}

// SecurityApplied is the broker's hook when the quorum applies an ACL or
// a client quota: the authorizer and the quota enforcer take the quorum's
// new state (SCRAM logins read it directly).
func (h *Handler) SecurityApplied() {
	h.aclMu.Lock()
	h.reloadACLsLocked()
	h.aclMu.Unlock()
	h.quotas.SetQuotas(h.metaReads().ClientQuotas())
}

// alterQuotasInCluster is AlterClientQuotas in cluster mode: validateOnly
// checks on this node's replica of the quorum (the single node's checks),
// else the controller decides, answered once this node applied it (the
// enforcer takes the quotas then: SecurityApplied).
func (h *Handler) alterQuotasInCluster(cm ClusterMeta, alts []meta.QuotaAlteration, validateOnly bool) []error {
	if validateOnly {
		return meta.CheckQuotaAlterations(alts)
	}
	ctx, cancel := clusterChangeContext()
	defer cancel()
	return cm.AlterClientQuotas(ctx, alts)
}

// alterScram commits SCRAM credential changes: the catalogue's, or the
// quorum's in cluster mode.
func (h *Handler) alterScram(changes []meta.ScramChange) error {
	cm := h.clusterMeta()
	if cm == nil {
		return h.cfg.Catalog.AlterScramCredentials(changes)
	}
	if len(changes) == 0 {
		return nil
	}
	ctx, cancel := clusterChangeContext()
	defer cancel()
	return cm.AlterScramCredentials(ctx, changes)
}
