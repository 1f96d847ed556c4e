package api

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/errresp"
	"github.com/sushka-io/sushka/internal/server"
)

// Authorization: the one table of what every served API key needs, as
// Kafka's KafkaApis checks it (apache/kafka core/.../KafkaApis.scala, 3.9).
// regKey refuses (panics at init, so every start and every test) a key
// that has no entry here: a key cannot be served without its rule. The
// handlers check with Handler.allowed, one call per check, and answer the
// rule's error where Kafka does (per partition, per group, per resource or
// for the whole request); the authorization table test
// (authz_table_test.go) serves every key to an allowed and a denied
// principal from this table.
//
// Where Sushka differs from Kafka or Kafka's versions differ:
//   - DescribeCluster answers everyone (Kafka does; only its authorized
//     operations need DESCRIBE on the cluster), though the issue listed it
//     under DESCRIBE on the cluster.
//   - ConsumerGroupDescribe checks DESCRIBE on the group only, as Kafka
//     3.9 (4.0 also answers TOPIC_AUTHORIZATION_FAILED for a group whose
//     assignment names topics the principal cannot describe).
//   - ACL hosts are "*" or IP addresses (Kafka stores any string, which
//     then matches no client).
var authzRules = map[int16]authzRule{
	0:  needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Write)).note("per partition; a transactional produce also WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request)"),
	1:  needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Read)).note("per partition; a replica fetch needs CLUSTER_ACTION instead"),
	2:  needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Describe)).note("per partition"),
	3:  needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Describe)).note("topics the principal may not describe are hidden from a request for all topics, TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs CREATE on the cluster or the topic; KIP-430 authorized operations"),
	8:  needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read), on(acl.Topic, acl.Read)).note("READ on the group for the whole request; READ on each topic, per partition"),
	9:  needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Describe), on(acl.Topic, acl.Describe)).note("per group; DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED per partition), topics not described hidden from a fetch of all"),
	10: needs(kerr.GroupAuthorizationFailed, anyOf(grant{acl.Group, acl.Describe}, grant{acl.TransactionalID, acl.Describe})).note("DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key"),
	11: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read)),
	12: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read)),
	13: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read)),
	14: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read)),
	15: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Describe)).note("per group; KIP-430 authorized operations"),
	16: filtering(anyOf(grant{acl.Cluster, acl.Describe}, grant{acl.Group, acl.Describe})).note("DESCRIBE on the cluster lists every group, else the groups the principal may describe"),
	18: noAuthz("before authentication, as Kafka"),
	19: needs(kerr.TopicAuthorizationFailed, anyOf(grant{acl.Cluster, acl.Create}, grant{acl.Topic, acl.Create})).note("per topic; the configs in the answer need DESCRIBE_CONFIGS on the topic"),
	20: needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Delete)).note("per topic"),
	21: needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Delete)).note("per partition"),
	22: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Write)).note("with a transactional id; without one, IDEMPOTENT_WRITE on the cluster or WRITE on any topic (CLUSTER_AUTHORIZATION_FAILED)"),
	23: needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Describe)).note("per partition; a replica's request CLUSTER_ACTION"),
	24: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Write), on(acl.Topic, acl.Write)).note("v0-3: WRITE on the transactional id (all partitions), WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); v4+ (broker verification): CLUSTER_ACTION"),
	25: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Write), on(acl.Group, acl.Read)).note("GROUP_AUTHORIZATION_FAILED without READ on the group"),
	26: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Write)),
	27: needs(kerr.ClusterAuthorizationFailed, anyOf(grant{acl.Cluster, acl.ClusterAction}, grant{acl.Cluster, acl.Alter})).note("per partition"),
	28: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Write), on(acl.Group, acl.Read), on(acl.Topic, acl.Read)).note("GROUP_AUTHORIZATION_FAILED without READ on the group; READ on each topic, per partition"),
	29: needs(kerr.ClusterAuthorizationFailed, on(acl.Cluster, acl.Describe)),
	30: needs(kerr.ClusterAuthorizationFailed, on(acl.Cluster, acl.Alter)).note("per creation"),
	31: needs(kerr.ClusterAuthorizationFailed, on(acl.Cluster, acl.Alter)).note("per filter"),
	32: needs(kerr.TopicAuthorizationFailed, anyOf(grant{acl.Topic, acl.DescribeConfigs}, grant{acl.Cluster, acl.DescribeConfigs})).note("per resource: a topic's DESCRIBE_CONFIGS on the topic, a broker's on the cluster (CLUSTER_AUTHORIZATION_FAILED)"),
	33: needs(kerr.TopicAuthorizationFailed, anyOf(grant{acl.Topic, acl.AlterConfigs}, grant{acl.Cluster, acl.AlterConfigs})).note("per resource, as DescribeConfigs"),
	35: needs(kerr.ClusterAuthorizationFailed, on(acl.Cluster, acl.Describe)),
	37: needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Alter)).note("per topic"),
	42: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Delete)).note("per group"),
	44: needs(kerr.TopicAuthorizationFailed, anyOf(grant{acl.Topic, acl.AlterConfigs}, grant{acl.Cluster, acl.AlterConfigs})).note("per resource, as DescribeConfigs"),
	47: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Delete), on(acl.Topic, acl.Read)).note("DELETE on the group for the whole request; READ on each topic, per partition"),
	62: gatedOnCluster(acl.ClusterAction),
	63: gatedOnCluster(acl.ClusterAction),
	60: filtering(on(acl.Cluster, acl.Describe)).note("answered to everyone, as Kafka; KIP-430 cluster authorized operations only with DESCRIBE on the cluster (0 without)"),
	61: needs(kerr.TopicAuthorizationFailed, on(acl.Topic, acl.Read)).note("per partition"),
	65: needs(kerr.TransactionalIDAuthorizationFailed, on(acl.TransactionalID, acl.Describe)).note("per transactional id"),
	66: filtering(on(acl.TransactionalID, acl.Describe)).note("the transactions the principal may describe"),
	68: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Read), on(acl.Topic, acl.Describe)).note("DESCRIBE on every subscribed topic name, else TOPIC_AUTHORIZATION_FAILED"),
	69: needs(kerr.GroupAuthorizationFailed, on(acl.Group, acl.Describe)).note("per group; KIP-430 authorized operations"),

	// The security keys of the sibling parts (sasl: 17, 36, 50, 51; quota:
	// 48, 49): a rule for a key not registered is unused until it is.
	17: noAuthz("SASL authenticates the connection: served before it, as Kafka"),
	36: noAuthz("SASL authenticates the connection: served before it, as Kafka"),
	48: gatedOnCluster(acl.DescribeConfigs),
	49: gatedOnCluster(acl.AlterConfigs),
	50: gatedOnCluster(acl.Describe),
	51: gatedOnCluster(acl.Alter),
}

// authzRule is what one API key needs: every need must hold, each by one of
// its alternatives; a principal without them gets denied (or, for a
// filtering key, sees only what it may).
type authzRule struct {
	needs     []need
	denied    int16
	filters   bool   // the key answers the visible subset, no error
	none      bool   // the key needs nothing (ApiVersions, SASL)
	notes     string // how and where the key answers a denial
	specified bool   // set by the constructors: the zero rule is no rule
	// gate, if set, is checked by Handle before the key's handler: a
	// refusal for the whole request, or nil (gatedOnCluster).
	gate func(h *Handler, creq *server.Request) kmsg.Response
}

// need is one requirement, met by any of its grants.
type need []grant

// grant is an operation on a resource type (the resource the request names).
type grant struct {
	resource acl.ResourceType
	op       acl.Operation
}

func needs(denied *kerr.Error, ns ...need) authzRule {
	return authzRule{needs: ns, denied: denied.Code, specified: true}
}

func filtering(ns ...need) authzRule { return authzRule{needs: ns, filters: true, specified: true} }

func noAuthz(why string) authzRule { return authzRule{none: true, notes: why, specified: true} }

func on(rt acl.ResourceType, op acl.Operation) need { return need{{rt, op}} }

func anyOf(gs ...grant) need { return need(gs) }

func (r authzRule) note(s string) authzRule { r.notes = s; return r }

// gatedOnCluster is the rule of a cluster-wide admin key that Kafka
// refuses whole without op on the cluster: Handle checks it before the
// handler, and the key's answer with the error is its entry in
// internal/errresp (Kafka's getErrorResponse).
func gatedOnCluster(op acl.Operation) authzRule {
	r := needs(kerr.ClusterAuthorizationFailed, on(acl.Cluster, op)).note("the whole request, before the handler")
	r.gate = func(h *Handler, creq *server.Request) kmsg.Response {
		if h.allowedCluster(creq, op) {
			return nil
		}
		return errresp.For(creq.Body, kerr.ClusterAuthorizationFailed.Code)
	}
	return r
}

// ruleFor returns key's rule; regKey panics on a key without one.
func ruleFor(key int16) authzRule {
	r, ok := authzRules[key]
	if !ok || !r.specified {
		panic(fmt.Sprintf("api key %d (%s) has no authorization rule: add what it needs to authzRules in internal/api/authz.go (Kafka's KafkaApis says which)", key, kmsg.NameForKey(key)))
	}
	return r
}

// allowed reports whether the request's principal, from its client's
// address, may perform op on the resource. It allocates nothing; with the
// authorizer off it is one branch.
func (h *Handler) allowed(creq *server.Request, rt acl.ResourceType, name string, op acl.Operation) bool {
	if !h.authz.Enabled() {
		return true
	}
	p := creq.Principal()
	return h.authz.Authorize(p.Type, p.Name, remoteIP(creq), rt, name, op)
}

// allowedCluster is allowed on the CLUSTER resource.
func (h *Handler) allowedCluster(creq *server.Request, op acl.Operation) bool {
	return h.allowed(creq, acl.Cluster, acl.ClusterName, op)
}

// allowedAnyTopic reports whether the principal may perform op on some
// topic (Kafka's authorizeByResourceType; never on the hot path).
func (h *Handler) allowedAnyTopic(creq *server.Request, op acl.Operation) bool {
	p := creq.Principal()
	return h.authz.AuthorizeAny(p.Type, p.Name, remoteIP(creq), acl.Topic, op)
}

// authorizedOperations is KIP-430's field for a resource: the supported
// operations the principal may perform, as a bit field.
func (h *Handler) authorizedOperations(creq *server.Request, rt acl.ResourceType, name string) int32 {
	p := creq.Principal()
	return h.authz.AuthorizedOperations(p.Type, p.Name, remoteIP(creq), rt, name, acl.SupportedOperations(rt))
}

// remoteIP is the client's address as ACL hosts match it (the zero Addr
// when unknown: only "*" matches).
func remoteIP(creq *server.Request) netip.Addr {
	if a, ok := creq.Remote.(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// Authorizer is the handler's authorizer (the ACL admin keys, tests).
func (h *Handler) Authorizer() *acl.Authorizer { return h.authz }

// reloadACLs gives the authorizer the catalogue's bindings; aclMu is held
// (so a slower reload cannot replace a newer one).
func (h *Handler) reloadACLsLocked() { h.authz.Set(h.metaReads().ACLs()) }

// aclAdminRefused is the ACL admin keys' first check: SECURITY_DISABLED
// without an authorizer (Kafka's answer when no authorizer is configured),
// CLUSTER_AUTHORIZATION_FAILED without op on the cluster.
func (h *Handler) aclAdminRefused(creq *server.Request, op acl.Operation) (int16, string) {
	switch {
	case !h.authz.Enabled():
		return kerr.SecurityDisabled.Code, "no authorizer is configured on the broker (sushka serve --authorizer)"
	case !h.allowedCluster(creq, op):
		return kerr.ClusterAuthorizationFailed.Code, fmt.Sprintf("%s needs %s on the cluster", creq.Principal(), op)
	}
	return 0, ""
}

// topicDenied reports whether the principal may not perform op on a topic
// a request names: t when it exists, else by the name the request gave (an
// unknown topic the principal may not see is TOPIC_AUTHORIZATION_FAILED,
// as in Kafka, which checks before it looks). A topic named by an unknown
// ID is not denied: the request is answered UNKNOWN_TOPIC_ID.
func (h *Handler) topicDenied(creq *server.Request, t *topic, name string, op acl.Operation) bool {
	if t != nil {
		name = t.meta.Name
	} else if name == "" {
		return false
	}
	return !h.allowed(creq, acl.Topic, name, op)
}

// configDenied is the error for a principal that may not perform op
// (DESCRIBE_CONFIGS, ALTER_CONFIGS) on a config resource: a topic's on the
// topic, a broker's (or its loggers') on the cluster, a group's on the
// group, as Kafka's ConfigHelper and KafkaApis check; 0 when allowed.
func (h *Handler) configDenied(creq *server.Request, rt kmsg.ConfigResourceType, name string, op acl.Operation) (int16, error) {
	var code int16
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		if !h.allowed(creq, acl.Topic, name, op) {
			code = kerr.TopicAuthorizationFailed.Code
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger, kmsg.ConfigResourceTypeClientMetrics:
		if !h.allowedCluster(creq, op) {
			code = kerr.ClusterAuthorizationFailed.Code
		}
	case kmsg.ConfigResourceTypeGroupConfig:
		if !h.allowed(creq, acl.Group, name, op) {
			code = kerr.GroupAuthorizationFailed.Code
		}
	}
	if code == 0 {
		return 0, nil
	}
	return code, fmt.Errorf("%s may not %s of %s %q", creq.Principal(), op, rt, name)
}
