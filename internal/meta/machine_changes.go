package meta

import (
	"crypto/rand"
	"fmt"
	"maps"
	"slices"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/sasl"
)

// The cluster's reads and change plans (docs/replication.md section 4e):
// what the single-node Catalog reads and checks, on the machine's applied
// state. A plan is the records of one decision, checked here as the
// Catalog checks them; the active controller proposes them as one entry,
// and apply checks them again (a concurrent decision may have landed
// first: then every replica refuses them alike).

// ACLs returns every binding (the authorizer's, DescribeAcls').
func (m *Machine) ACLs() []acl.Binding {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Collect(maps.Values(m.st.acls))
}

// ScramCredential returns user's credential for mech (sasl.Store).
func (m *Machine) ScramCredential(user string, mech sasl.Mechanism) (sasl.Credential, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	cred, ok := m.st.scram[scramKey{user, mech}]
	return cred, ok
}

// ScramUsers is Catalog.ScramUsers on the applied state.
func (m *Machine) ScramUsers() map[string][]ScramInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.scramUsers()
}

// ClientQuotas is Catalog.ClientQuotas on the applied state.
func (m *Machine) ClientQuotas() []ClientQuota {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.clientQuotas()
}

// PlanCreateACLs returns the records creating the bindings that do not
// exist yet (an existing one is success, as in Kafka), validated by the
// caller (acl.Binding.Validate).
func (m *Machine) PlanCreateACLs(bs []acl.Binding) ([]Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	existing := map[acl.Binding]bool{}
	for _, b := range m.st.acls {
		existing[b] = true
	}
	var rs []Record
	taken := map[topicID]bool{}
	for _, b := range bs {
		if existing[b] {
			continue
		}
		existing[b] = true
		id, err := m.st.newACLID(taken)
		if err != nil {
			return nil, err
		}
		taken[id] = true
		r := aclRecord(id, b)
		rs = append(rs, &r)
	}
	return rs, nil
}

// PlanDeleteACLs returns the records removing every binding each filter
// matches, and those bindings per filter (a binding two filters match is
// the first's), as Catalog.DeleteACLs.
func (m *Machine) PlanDeleteACLs(filters []acl.Filter) ([]Record, [][]acl.Binding) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.aclDeletions(filters)
}

// aclDeletions is DeleteACLs' plan: the one home of which bindings a
// filter removes.
func (s *state) aclDeletions(filters []acl.Filter) ([]record, [][]acl.Binding) {
	out := make([][]acl.Binding, len(filters))
	ids := slices.Collect(maps.Keys(s.acls))
	slices.SortFunc(ids, func(a, b topicID) int { return acl.Compare(s.acls[a], s.acls[b]) })
	removed := map[topicID]bool{}
	var rs []record
	for fi, f := range filters {
		for _, id := range ids {
			b := s.acls[id]
			if removed[id] || !f.Matches(b) {
				continue
			}
			removed[id] = true
			rs = append(rs, &RemoveAccessControlEntryRecord{ID: id})
			out[fi] = append(out[fi], b)
		}
	}
	return rs, out
}

// newACLID returns a random ACL record id that no binding of s has, nor
// one in taken.
func (s *state) newACLID(taken map[topicID]bool) (topicID, error) {
	for {
		var id topicID
		if _, err := rand.Read(id[:]); err != nil {
			return id, err
		}
		if _, dup := s.acls[id]; !dup && !taken[id] && id != (topicID{}) {
			return id, nil
		}
	}
}

// PlanScramChanges is AlterScramCredentials' plan (scramChangeRecords).
func (m *Machine) PlanScramChanges(changes []ScramChange) ([]Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.scramChangeRecords(changes)
}

// PlanClientQuotas is AlterClientQuotas' plan (quotaAlterationRecords).
func (m *Machine) PlanClientQuotas(alterations []QuotaAlteration) (recs []Record, recFrom []int, errs []error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.quotaAlterationRecords(alterations)
}

// PlanSetConfigs returns the record replacing a topic's config overrides,
// validated (ValidateConfigs) as the single node validates them.
func (m *Machine) PlanSetConfigs(name string, configs map[string]string) (Record, error) {
	if err := ValidateConfigs(configs); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.st.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return &ConfigsRecord{ID: t.ID, Configs: maps.Clone(configs)}, nil
}

// PlanDeleteTopic returns the record removing a topic (with its
// assignments).
func (m *Machine) PlanDeleteTopic(name string) (Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.st.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return &RemoveTopicRecord{ID: t.ID}, nil
}

// CheckPartitions is Catalog.CheckPartitions on the applied state (no
// --max-partitions bound in cluster mode yet).
func (m *Machine) CheckPartitions(name string, n int32) (Topic, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.st.checkPartitions(name, n); err != nil {
		return Topic{}, err
	}
	t, _ := m.st.topic(name)
	return t, nil
}

// checkPartitions is the one home of CreatePartitions' check: the topic
// exists and the count grows.
func (s *state) checkPartitions(name string, n int32) error {
	t, ok := s.topics[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	if n <= t.Partitions {
		return fmt.Errorf("%w: topic %s has %d partitions; the count can only grow", ErrBadPartitions, name, t.Partitions)
	}
	return nil
}
