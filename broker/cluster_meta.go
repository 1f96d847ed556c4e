package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/controller"
	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/internal/server"
)

// The cluster's configs, ACLs, SCRAM credentials and quotas, and topic
// deletion and growth (api.ClusterMeta; docs/replication.md section 4e):
// read from this node's replica of the quorum, changed through the active
// controller, this node's controller when it is active, else the same
// Kafka request forwarded to the controller's listener (KIP-590's effect,
// as CreateTopic). A change is answered once this node has applied it.

// machine is this node's replica of the quorum's state (nil before start).
func (c *clusterNode) machine() *meta.Machine {
	if c.ctrl == nil {
		return nil
	}
	return c.ctrl.Machine()
}

func (c *clusterNode) ACLs() []acl.Binding {
	if m := c.machine(); m != nil {
		return m.ACLs()
	}
	return nil
}

func (c *clusterNode) ScramCredential(user string, mech sasl.Mechanism) (sasl.Credential, bool) {
	if m := c.machine(); m != nil {
		return m.ScramCredential(user, mech)
	}
	return sasl.Credential{}, false
}

func (c *clusterNode) ScramUsers() map[string][]meta.ScramInfo {
	if m := c.machine(); m != nil {
		return m.ScramUsers()
	}
	return map[string][]meta.ScramInfo{}
}

func (c *clusterNode) ClientQuotas() []meta.ClientQuota {
	if m := c.machine(); m != nil {
		return m.ClientQuotas()
	}
	return nil
}

// appliedMeta is the quorum listener's part for the records of this file:
// the handler's topics, authorizer and quotas follow what is applied.
func (c *clusterNode) appliedMeta(ch controller.Change) {
	switch r := ch.Record.(type) {
	case *meta.ConfigsRecord:
		if mt, ok := c.ctrl.Machine().TopicByID(r.ID); ok {
			c.b.handler.TopicConfigsApplied(mt)
		}
	case *meta.RemoveTopicRecord:
		c.b.handler.TopicRemoved(r.ID)
	case *meta.AccessControlEntryRecord, *meta.RemoveAccessControlEntryRecord, *meta.ClientQuotaRecord:
		c.b.handler.SecurityApplied()
	}
}

// change runs a decision on the active controller: local when this node's
// controller is active, forward otherwise; NOT_CONTROLLER or a failed
// connection is retried on the leader this node learns next, until ctx
// ends. Then it waits until this node's replica satisfies applied (the
// controller answered once it applied the change; this node may be
// behind).
func (c *clusterNode) change(ctx context.Context, local, forward func(ctx context.Context) error, applied func(m *meta.Machine) bool) error {
	for {
		var err error
		retry := false
		if c.ctrl.Active() {
			err = local(ctx)
		} else {
			err = forward(ctx)
			var answer *kerr.Error
			retry = err != nil && !errors.As(err, &answer)
		}
		if err == nil {
			return c.awaitApplied(ctx, applied)
		}
		if !retry && !errors.Is(err, meta.ErrNotController) && !errors.Is(err, kerr.NotController) && !errors.Is(err, errNoController) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: no active controller answered in time (%v)", meta.ErrNotController, err)
		case <-time.After(controllerRetryBackoff):
		}
	}
}

// awaitApplied waits until this node's replica of the quorum satisfies
// applied (nil: nothing to wait for) and the broker has been given what
// the machine holds then (Controller.Listened): the handler's topics,
// logs and authorizer have the change too.
func (c *clusterNode) awaitApplied(ctx context.Context, applied func(m *meta.Machine) bool) error {
	var at uint64
	for {
		if at == 0 && (applied == nil || applied(c.ctrl.Machine())) {
			at = max(c.ctrl.Machine().Applied(), 1)
		}
		if at != 0 && c.ctrl.Listened() >= at {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: changed by the controller, not yet applied on this node", kerr.RequestTimedOut)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// answer is one item's answer in a forwarded request's response.
type answer struct {
	code    int16
	message *string
}

// forward sends req to the active controller and returns the first error
// among the answers of its items (want of them; -1: any number), with its
// code.
func (c *clusterNode) forward(ctx context.Context, req kmsg.Request, want int, answers func(kmsg.Response) []answer) error {
	resp, err := c.toController(ctx, req)
	if err != nil {
		return err
	}
	as := answers(resp)
	if want >= 0 && len(as) != want {
		return fmt.Errorf("%w: the controller answered %d items for %d", kerr.UnknownServerError, len(as), want)
	}
	for _, a := range as {
		if err := relayed(a.code, a.message); err != nil {
			return err
		}
	}
	return nil
}

// forwardTimeout is the forwarded request's own timeout: what is left of
// ctx.
func forwardTimeout(ctx context.Context) int32 {
	if d, ok := ctx.Deadline(); ok {
		return int32(max(time.Until(d).Milliseconds(), 1))
	}
	return 30000
}

func (c *clusterNode) DeleteTopic(ctx context.Context, name string) error {
	var id [16]byte
	if t, ok := c.machine().Topic(name); ok {
		id = t.ID
	}
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.DeleteTopic(ctx, name) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.Version, req.TimeoutMillis, req.TopicNames = 5, forwardTimeout(ctx), []string{name}
			return c.forward(ctx, req, 1, func(resp kmsg.Response) (answers []answer) {
				for _, t := range resp.(*kmsg.DeleteTopicsResponse).Topics {
					answers = append(answers, answer{t.ErrorCode, t.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool { _, ok := m.TopicByID(id); return !ok })
}

func (c *clusterNode) CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error {
	if validateOnly {
		_, err := c.machine().CheckPartitions(name, count)
		return err
	}
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.CreatePartitions(ctx, name, count) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrCreatePartitionsRequest()
			req.Version, req.TimeoutMillis = 1, forwardTimeout(ctx)
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = name, count
			req.Topics = append(req.Topics, rt)
			return c.forward(ctx, req, 1, func(resp kmsg.Response) (answers []answer) {
				for _, t := range resp.(*kmsg.CreatePartitionsResponse).Topics {
					answers = append(answers, answer{t.ErrorCode, t.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool { t, ok := m.Topic(name); return !ok || t.Partitions >= count })
}

// SetTopicConfigs replaces a topic's overrides (AlterConfigs).
func (c *clusterNode) SetTopicConfigs(ctx context.Context, name string, configs map[string]string) error {
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.SetTopicConfigs(ctx, name, configs) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrAlterConfigsRequest()
			req.Version = 1
			rr := kmsg.NewAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
			for k, v := range configs {
				rc := kmsg.NewAlterConfigsRequestResourceConfig()
				rc.Name, rc.Value = k, &v
				rr.Configs = append(rr.Configs, rc)
			}
			req.Resources = append(req.Resources, rr)
			return c.forward(ctx, req, 1, func(resp kmsg.Response) (answers []answer) {
				for _, r := range resp.(*kmsg.AlterConfigsResponse).Resources {
					answers = append(answers, answer{r.ErrorCode, r.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool { t, ok := m.Topic(name); return !ok || maps.Equal(t.Configs, configs) })
}

// AlterTopicConfigs applies IncrementalAlterConfigs' operations on the
// controller's state: alter there, or the operations forwarded as they
// came. Applied here once alter changes nothing more on this node's view.
func (c *clusterNode) AlterTopicConfigs(ctx context.Context, name string, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig,
	alter func(current map[string]string) (map[string]string, error)) error {
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.AlterTopicConfigs(ctx, name, alter) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName, rr.Configs = kmsg.ConfigResourceTypeTopic, name, ops
			req.Resources = append(req.Resources, rr)
			return c.forward(ctx, req, 1, func(resp kmsg.Response) (answers []answer) {
				for _, r := range resp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
					answers = append(answers, answer{r.ErrorCode, r.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool {
			t, ok := m.Topic(name)
			if !ok {
				return true
			}
			next, err := alter(t.Configs)
			return err != nil || maps.Equal(next, t.Configs)
		})
}

func (c *clusterNode) CreateACLs(ctx context.Context, bs []acl.Binding) error {
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.CreateACLs(ctx, bs) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrCreateACLsRequest()
			req.Version = 1
			for _, b := range bs {
				cr := kmsg.NewCreateACLsRequestCreation()
				cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = b.ResourceType, b.ResourceName, b.PatternType
				cr.Principal, cr.Host, cr.Operation, cr.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
				req.Creations = append(req.Creations, cr)
			}
			return c.forward(ctx, req, len(bs), func(resp kmsg.Response) (answers []answer) {
				for _, r := range resp.(*kmsg.CreateACLsResponse).Results {
					answers = append(answers, answer{r.ErrorCode, r.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool {
			have := map[acl.Binding]bool{}
			for _, b := range m.ACLs() {
				have[b] = true
			}
			for _, b := range bs {
				if !have[b] {
					return false
				}
			}
			return true
		})
}

func (c *clusterNode) DeleteACLs(ctx context.Context, filters []acl.Filter) ([][]acl.Binding, error) {
	var deleted [][]acl.Binding
	err := c.change(ctx, func(ctx context.Context) (err error) {
		deleted, err = c.ctrl.DeleteACLs(ctx, filters)
		return err
	}, func(ctx context.Context) error {
		req := kmsg.NewPtrDeleteACLsRequest()
		req.Version = 1
		for _, f := range filters {
			rf := kmsg.NewDeleteACLsRequestFilter()
			rf.ResourceType, rf.ResourceName, rf.ResourcePatternType = f.ResourceType, f.ResourceName, f.PatternType
			rf.Principal, rf.Host, rf.Operation, rf.PermissionType = f.Principal, f.Host, f.Operation, f.Permission
			req.Filters = append(req.Filters, rf)
		}
		resp, err := c.toController(ctx, req)
		if err != nil {
			return err
		}
		deleted = make([][]acl.Binding, len(filters))
		for i, r := range resp.(*kmsg.DeleteACLsResponse).Results {
			if err := relayed(r.ErrorCode, r.ErrorMessage); err != nil {
				return err
			}
			for _, a := range r.MatchingACLs {
				if i < len(deleted) {
					deleted[i] = append(deleted[i], acl.Binding{ResourceType: a.ResourceType, ResourceName: a.ResourceName,
						PatternType: a.ResourcePatternType, Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.PermissionType})
				}
			}
		}
		return nil
	}, func(m *meta.Machine) bool {
		gone := map[acl.Binding]bool{}
		for _, bs := range deleted {
			for _, b := range bs {
				gone[b] = true
			}
		}
		for _, b := range m.ACLs() {
			if gone[b] {
				return false
			}
		}
		return true
	})
	return deleted, err
}

func (c *clusterNode) AlterScramCredentials(ctx context.Context, changes []meta.ScramChange) error {
	return c.change(ctx, func(ctx context.Context) error { return c.ctrl.AlterScramCredentials(ctx, changes) },
		func(ctx context.Context) error {
			req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			for _, ch := range changes {
				if ch.Credential == nil {
					d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
					d.Name, d.Mechanism = ch.User, int8(ch.Mechanism)
					req.Deletions = append(req.Deletions, d)
					continue
				}
				u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
				u.Name, u.Mechanism, u.Iterations = ch.User, int8(ch.Mechanism), ch.Credential.Iterations
				u.Salt, u.SaltedPassword = ch.Credential.Salt, ch.SaltedPassword
				req.Upsertions = append(req.Upsertions, u)
			}
			return c.forward(ctx, req, -1, func(resp kmsg.Response) (answers []answer) {
				for _, r := range resp.(*kmsg.AlterUserSCRAMCredentialsResponse).Results {
					answers = append(answers, answer{r.ErrorCode, r.ErrorMessage})
				}
				return answers
			})
		},
		func(m *meta.Machine) bool {
			for _, ch := range changes {
				got, ok := m.ScramCredential(ch.User, ch.Mechanism)
				if ch.Credential == nil && ok || ch.Credential != nil && (!ok || string(got.StoredKey) != string(ch.Credential.StoredKey)) {
					return false
				}
			}
			return true
		})
}

func (c *clusterNode) AlterClientQuotas(ctx context.Context, alterations []meta.QuotaAlteration) []error {
	var errs []error
	err := c.change(ctx, func(ctx context.Context) error {
		errs = c.ctrl.AlterClientQuotas(ctx, alterations)
		return notControllerOf(errs)
	}, func(ctx context.Context) error {
		req := kmsg.NewPtrAlterClientQuotasRequest()
		for _, a := range alterations {
			e := kmsg.NewAlterClientQuotasRequestEntry()
			for _, p := range a.Entity {
				ee := kmsg.NewAlterClientQuotasRequestEntryEntity()
				ee.Type, ee.Name = p.Type, p.Name
				e.Entity = append(e.Entity, ee)
			}
			for _, op := range a.Ops {
				o := kmsg.NewAlterClientQuotasRequestEntryOp()
				o.Key, o.Remove = op.Key, op.Value == nil
				if op.Value != nil {
					o.Value = *op.Value
				}
				e.Ops = append(e.Ops, o)
			}
			req.Entries = append(req.Entries, e)
		}
		resp, err := c.toController(ctx, req)
		if err != nil {
			return err
		}
		entries := resp.(*kmsg.AlterClientQuotasResponse).Entries
		if len(entries) != len(alterations) {
			return fmt.Errorf("%w: the controller answered %d entities for %d", kerr.UnknownServerError, len(entries), len(alterations))
		}
		errs = make([]error, len(entries))
		for i, e := range entries {
			errs[i] = relayed(e.ErrorCode, e.ErrorMessage)
		}
		return notControllerOf(errs)
	}, func(m *meta.Machine) bool {
		// Applied here once planning the alterations that succeeded
		// again would change nothing.
		var done []meta.QuotaAlteration
		for i, a := range alterations {
			if errs[i] == nil {
				done = append(done, a)
			}
		}
		rs, _, _ := m.PlanClientQuotas(done)
		return len(rs) == 0
	})
	if err != nil {
		errs = make([]error, len(alterations))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// notControllerOf is the NOT_CONTROLLER among per-item answers (the whole
// decision is then retried on the next controller), nil otherwise.
func notControllerOf(errs []error) error {
	for _, err := range errs {
		if errors.Is(err, meta.ErrNotController) || errors.Is(err, kerr.NotController) {
			return err
		}
	}
	return nil
}

// nodesPrincipal is the principal the nodes' own requests have on the
// controller (registration, heartbeats, forwarded changes): they come on
// the first listener, PLAINTEXT in this version, unauthenticated. Kafka's
// rule is that the inter-broker principal is a super user; with
// --authorizer, --super-users must name it, or the nodes cannot register
// and no change made on a node other than the controller goes through.
var nodesPrincipal = server.Anonymous.String()

// warnNodesPrincipal says so at start-up when it is not a super user.
func warnNodesPrincipal(cfg Config, log *slog.Logger) {
	if cfg.Cluster == nil || !cfg.Authorizer || slices.Contains(cfg.SuperUsers, nodesPrincipal) {
		return
	}
	log.Warn("cluster mode with --authorizer: the nodes' own requests (registration, heartbeats, changes forwarded to the controller) "+
		"arrive on the first listener as "+nodesPrincipal+", which is not a super user: they will be refused. "+
		"Give --super-users "+nodesPrincipal+" and keep that listener on the nodes' network (Kafka: the inter-broker principal is a super user)",
		"listener", cfg.Listeners[0].Name)
}
