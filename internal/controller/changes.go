package controller

import (
	"context"
	"fmt"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/meta"
)

// The cluster's other decisions (docs/replication.md section 4e): topics
// deleted and grown, topic configs, ACLs, SCRAM credentials and client
// quotas. Each is checked on the active controller's applied state by the
// single-node catalogue's own checks (meta.Machine's Plan methods) and
// committed as one entry, answered once applied here. Decisions are taken
// one at a time (decideMu), so each is planned on a state that has every
// earlier decision of this controller; apply checks them again, so a
// decision of a controller that just lost its term is refused alike by
// every replica if it no longer fits.

// decide runs plan under decideMu on the active controller and commits
// the records it returns as one entry (nothing to commit: nil).
func (c *Controller) decide(ctx context.Context, plan func(m *meta.Machine) ([]meta.Record, error)) error {
	c.decideMu.Lock()
	defer c.decideMu.Unlock()
	if !c.Active() {
		return c.notController()
	}
	rs, err := plan(c.machine)
	if err != nil || len(rs) == 0 {
		return err
	}
	return c.propose(ctx, rs...)
}

// DeleteTopic removes a topic and its assignments: every node closes and
// removes its replicas when it applies the removal.
func (c *Controller) DeleteTopic(ctx context.Context, name string) error {
	if meta.IsInternalTopic(name) {
		return fmt.Errorf("%w: %s is internal", meta.ErrInvalidTopic, name)
	}
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		r, err := m.PlanDeleteTopic(name)
		return []meta.Record{r}, err
	})
}

// CreatePartitions grows a topic to count partitions, the new ones placed
// on the unfenced brokers (placeReplicas) with the topic's replication
// factor: the PartitionsRecord and the new partitions' assignments in one
// entry.
func (c *Controller) CreatePartitions(ctx context.Context, name string, count int32) error {
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		t, err := m.CheckPartitions(name, count)
		if err != nil {
			return nil, err
		}
		rf := 1
		if rs := m.Replicas(t.ID); len(rs) > 0 && len(rs[0]) > 0 {
			rf = len(rs[0])
		}
		c.mu.Lock()
		placed, err := placeReplicas(c.liveBrokers(), count-t.Partitions, rf, c.rng)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		rs := []meta.Record{&meta.PartitionsRecord{ID: t.ID, Partitions: count}}
		for i, r := range placed {
			rs = append(rs, &meta.PartitionAssignmentRecord{TopicID: t.ID, Partition: t.Partitions + int32(i), Replicas: r})
		}
		return rs, nil
	})
}

// liveBrokers are the unfenced brokers, where new replicas go.
func (c *Controller) liveBrokers() []meta.Broker {
	var live []meta.Broker
	for _, b := range c.machine.Brokers() {
		if !b.Fenced {
			live = append(live, b)
		}
	}
	return live
}

// SetTopicConfigs replaces a topic's config overrides (AlterConfigs).
func (c *Controller) SetTopicConfigs(ctx context.Context, name string, configs map[string]string) error {
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		r, err := m.PlanSetConfigs(name, configs)
		return []meta.Record{r}, err
	})
}

// AlterTopicConfigs is SetTopicConfigs with the new overrides computed
// from the current ones on the active controller (IncrementalAlterConfigs:
// the operations apply to the state the decision is taken on).
func (c *Controller) AlterTopicConfigs(ctx context.Context, name string, alter func(current map[string]string) (map[string]string, error)) error {
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		t, ok := m.Topic(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s", meta.ErrUnknownTopic, name)
		}
		next, err := alter(t.Configs)
		if err != nil {
			return nil, err
		}
		r, err := m.PlanSetConfigs(name, next)
		return []meta.Record{r}, err
	})
}

// CreateACLs adds the bindings that do not exist yet (validated by the
// caller).
func (c *Controller) CreateACLs(ctx context.Context, bs []acl.Binding) error {
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) { return m.PlanCreateACLs(bs) })
}

// DeleteACLs removes every binding each filter matches and returns them
// per filter.
func (c *Controller) DeleteACLs(ctx context.Context, filters []acl.Filter) ([][]acl.Binding, error) {
	var deleted [][]acl.Binding
	err := c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		var rs []meta.Record
		rs, deleted = m.PlanDeleteACLs(filters)
		return rs, nil
	})
	return deleted, err
}

// AlterScramCredentials applies the changes together (deleting a missing
// credential refuses them all: ErrNoScramCredential).
func (c *Controller) AlterScramCredentials(ctx context.Context, changes []meta.ScramChange) error {
	return c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) { return m.PlanScramChanges(changes) })
}

// AlterClientQuotas validates each alteration on its own (its own error)
// and commits the changes of the valid ones together; a failed commit
// fails every alteration that had a change.
func (c *Controller) AlterClientQuotas(ctx context.Context, alterations []meta.QuotaAlteration) []error {
	var errs []error
	var recFrom []int
	err := c.decide(ctx, func(m *meta.Machine) ([]meta.Record, error) {
		var rs []meta.Record
		rs, recFrom, errs = m.PlanClientQuotas(alterations)
		return rs, nil
	})
	if errs == nil { // not decided here
		errs = make([]error, len(alterations))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err != nil {
		for _, i := range recFrom {
			errs[i] = err
		}
	}
	return errs
}
