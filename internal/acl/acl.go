// Package acl is the broker's authorizer, Kafka's model of it
// (StandardAuthorizer, KIP-290 prefixed patterns, KIP-430 authorized
// operations): bindings of a resource pattern (type, name, LITERAL or
// PREFIXED; LITERAL "*" is every name) to an entry (principal "User:x" or
// "User:*", host or "*", operation, ALLOW or DENY).
//
// A request is authorized when no matching DENY binding exists and a
// matching ALLOW binding does; an ALLOW of READ, WRITE, DELETE or ALTER
// implies DESCRIBE, of ALTER_CONFIGS DESCRIBE_CONFIGS, and ALL implies every
// operation (a DENY implies nothing but its own operation, or everything for
// ALL). Super users are allowed everything; a resource no binding names is
// denied unless AllowIfNoACL (Kafka's allow.everyone.if.no.acl.found). A
// disabled authorizer allows everything, as Kafka without
// authorizer.class.name.
//
// The bindings are kept as an immutable index (by resource type, then
// literal name, then prefix), replaced whole on every change (Set): a check
// reads one atomic pointer and allocates nothing, so Produce and Fetch pay
// it per topic. The durable bindings are records of the metadata log
// (internal/meta/acls.go); this package only matches them.
package acl

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's enums, as the protocol numbers them (kmsg's types, so requests
// and responses need no conversion).
type (
	ResourceType = kmsg.ACLResourceType
	PatternType  = kmsg.ACLResourcePatternType
	Operation    = kmsg.ACLOperation
	Permission   = kmsg.ACLPermissionType
)

// Resource types.
const (
	AnyResource     = kmsg.ACLResourceTypeAny
	Topic           = kmsg.ACLResourceTypeTopic
	Group           = kmsg.ACLResourceTypeGroup
	Cluster         = kmsg.ACLResourceTypeCluster
	TransactionalID = kmsg.ACLResourceTypeTransactionalId
	DelegationToken = kmsg.ACLResourceTypeDelegationToken
	UserResource    = kmsg.ACLResourceTypeUser
)

// Pattern types.
const (
	AnyPattern = kmsg.ACLResourcePatternTypeAny
	Match      = kmsg.ACLResourcePatternTypeMatch
	Literal    = kmsg.ACLResourcePatternTypeLiteral
	Prefixed   = kmsg.ACLResourcePatternTypePrefixed
)

// Operations.
const (
	AnyOperation    = kmsg.ACLOperationAny
	All             = kmsg.ACLOperationAll
	Read            = kmsg.ACLOperationRead
	Write           = kmsg.ACLOperationWrite
	Create          = kmsg.ACLOperationCreate
	Delete          = kmsg.ACLOperationDelete
	Alter           = kmsg.ACLOperationAlter
	Describe        = kmsg.ACLOperationDescribe
	ClusterAction   = kmsg.ACLOperationClusterAction
	DescribeConfigs = kmsg.ACLOperationDescribeConfigs
	AlterConfigs    = kmsg.ACLOperationAlterConfigs
	IdempotentWrite = kmsg.ACLOperationIdempotentWrite
	CreateTokens    = kmsg.ACLOperationCreateTokens
	DescribeTokens  = kmsg.ACLOperationDescribeTokens
)

// Permissions.
const (
	AnyPermission = kmsg.ACLPermissionTypeAny
	Deny          = kmsg.ACLPermissionTypeDeny
	Allow         = kmsg.ACLPermissionTypeAllow
)

// ClusterName is the one name of the CLUSTER resource, Kafka's.
const ClusterName = "kafka-cluster"

// Wildcard is the resource name of a LITERAL pattern matching every name,
// and the host matching every host.
const Wildcard = "*"

// WildcardPrincipal matches every principal (of type User).
const WildcardPrincipal = "User:*"

// Limits on what a binding or filter may name, so that a request cannot
// grow the index (or the metadata log) without bound through one field.
const (
	MaxNameBytes = 1024 // resource names, principals, hosts
)

// Binding is one ACL: a resource pattern and an entry.
type Binding struct {
	ResourceType ResourceType
	ResourceName string
	PatternType  PatternType
	Principal    string // "Type:name", e.g. "User:alice"; "User:*" is everyone
	Host         string // an IP address, or "*"
	Operation    Operation
	Permission   Permission
}

func (b Binding) String() string {
	return fmt.Sprintf("(%s:%s:%s, %s from %s: %s %s)", b.ResourceType, b.PatternType, b.ResourceName,
		b.Principal, b.Host, b.Permission, b.Operation)
}

// Compare orders bindings by resource (type, name, pattern), then entry
// (principal, host, operation, permission): DescribeACLs groups them by
// resource in this order.
func Compare(a, b Binding) int {
	return cmp.Or(
		cmp.Compare(a.ResourceType, b.ResourceType),
		strings.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType),
		strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission))
}

// ValidPrincipal reports whether p has Kafka's "Type:name" form
// (KafkaPrincipal's toString: a non-empty type, a colon, a non-empty name).
func ValidPrincipal(p string) error {
	i := strings.IndexByte(p, ':')
	if i <= 0 || i == len(p)-1 {
		return fmt.Errorf("principal %q is not of the form Type:name (such as User:alice)", p)
	}
	return nil
}

// Validate applies Kafka's rules for a new binding (AclControlManager's
// validateNewAcl, CreateAclsRequest): concrete enums, a non-empty name, a
// principal of the form Type:name, a host, the cluster named kafka-cluster.
func (b Binding) Validate() error {
	switch b.ResourceType {
	case Topic, Group, Cluster, TransactionalID, DelegationToken, UserResource:
	default:
		return fmt.Errorf("invalid resource type %s (%d)", b.ResourceType, int8(b.ResourceType))
	}
	switch b.PatternType {
	case Literal, Prefixed:
	default:
		return fmt.Errorf("invalid pattern type %s (%d): a binding is LITERAL or PREFIXED", b.PatternType, int8(b.PatternType))
	}
	if b.Operation <= AnyOperation || b.Operation > DescribeTokens {
		return fmt.Errorf("invalid operation %s (%d)", b.Operation, int8(b.Operation))
	}
	if b.Permission != Allow && b.Permission != Deny {
		return fmt.Errorf("invalid permission type %s (%d): ALLOW or DENY", b.Permission, int8(b.Permission))
	}
	if b.ResourceName == "" {
		return fmt.Errorf("resource name should not be empty")
	}
	if b.ResourceType == Cluster && b.ResourceName != ClusterName {
		return fmt.Errorf("the only valid name for the CLUSTER resource is %s, not %q", ClusterName, b.ResourceName)
	}
	if err := ValidPrincipal(b.Principal); err != nil {
		return err
	}
	if b.Host == "" {
		return fmt.Errorf("host should not be empty (use %q for every host)", Wildcard)
	}
	if b.Host != Wildcard {
		if _, err := netip.ParseAddr(b.Host); err != nil {
			return fmt.Errorf("host %q is neither an IP address nor %q", b.Host, Wildcard)
		}
	}
	for _, s := range [...]string{b.ResourceName, b.Principal, b.Host} {
		if len(s) > MaxNameBytes {
			return fmt.Errorf("a name of %d bytes, longer than %d", len(s), MaxNameBytes)
		}
	}
	return nil
}

// Filter selects bindings (DescribeAcls, DeleteAcls): ANY enums and nil
// strings match everything; pattern type MATCH selects every binding that
// would apply to the named resource (literal, wildcard and prefixes).
type Filter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// Validate refuses a filter with an unknown field (Kafka: INVALID_REQUEST)
// or names too long to name anything.
func (f Filter) Validate() error {
	switch {
	case f.ResourceType < AnyResource || f.ResourceType > UserResource:
		return fmt.Errorf("unknown resource type %d in the filter", int8(f.ResourceType))
	case f.PatternType < AnyPattern || f.PatternType > Prefixed:
		return fmt.Errorf("unknown pattern type %d in the filter", int8(f.PatternType))
	case f.Operation < AnyOperation || f.Operation > DescribeTokens:
		return fmt.Errorf("unknown operation %d in the filter", int8(f.Operation))
	case f.Permission < AnyPermission || f.Permission > Allow:
		return fmt.Errorf("unknown permission type %d in the filter", int8(f.Permission))
	}
	for _, s := range [...]*string{f.ResourceName, f.Principal, f.Host} {
		if s != nil && len(*s) > MaxNameBytes {
			return fmt.Errorf("a name of %d bytes in the filter, longer than %d", len(*s), MaxNameBytes)
		}
	}
	return nil
}

// Matches is Kafka's AclBindingFilter.matches.
func (f Filter) Matches(b Binding) bool {
	if f.ResourceType != AnyResource && f.ResourceType != b.ResourceType {
		return false
	}
	if f.PatternType != AnyPattern && f.PatternType != Match && f.PatternType != b.PatternType {
		return false
	}
	if f.ResourceName != nil {
		name := *f.ResourceName
		switch {
		case f.PatternType == AnyPattern || f.PatternType == b.PatternType:
			if name != b.ResourceName {
				return false
			}
		case b.PatternType == Literal: // MATCH
			if name != b.ResourceName && b.ResourceName != Wildcard {
				return false
			}
		case b.PatternType == Prefixed: // MATCH
			if !strings.HasPrefix(name, b.ResourceName) {
				return false
			}
		default:
			return false
		}
	}
	if f.Principal != nil && *f.Principal != b.Principal {
		return false
	}
	if f.Host != nil && *f.Host != b.Host {
		return false
	}
	if f.Operation != AnyOperation && f.Operation != b.Operation {
		return false
	}
	return f.Permission == AnyPermission || f.Permission == b.Permission
}
