package meta

import (
	"fmt"
	"sort"

	"github.com/sushka-io/sushka/internal/acl"
)

// ACLs are records of the metadata log, as KRaft keeps them in
// __cluster_metadata: an AccessControlEntryRecord adds a binding under a
// random ID, a RemoveAccessControlEntryRecord removes the binding of an ID.
// Snapshots hold the bindings with their IDs. See docs/format.md, "ACL
// records".

const (
	typeACL       recordType = 8 // a binding created (AccessControlEntryRecord)
	typeRemoveACL recordType = 9 // a binding deleted (RemoveAccessControlEntryRecord)
)

// AccessControlEntryRecord creates one ACL binding (KRaft's record of the
// same name; the enums are written under Kafka's names).
type AccessControlEntryRecord struct {
	ID           topicID          `json:"id"`
	ResourceType acl.ResourceType `json:"resource_type"`
	ResourceName string           `json:"resource_name"`
	PatternType  acl.PatternType  `json:"pattern_type"`
	Principal    string           `json:"principal"`
	Host         string           `json:"host"`
	Operation    acl.Operation    `json:"operation"`
	Permission   acl.Permission   `json:"permission"`
}

// RemoveAccessControlEntryRecord deletes the binding created with ID.
type RemoveAccessControlEntryRecord struct {
	ID topicID `json:"id"`
}

func (AccessControlEntryRecord) recordType() recordType       { return typeACL }
func (RemoveAccessControlEntryRecord) recordType() recordType { return typeRemoveACL }

func (r *AccessControlEntryRecord) binding() acl.Binding {
	return acl.Binding{ResourceType: r.ResourceType, ResourceName: r.ResourceName, PatternType: r.PatternType,
		Principal: r.Principal, Host: r.Host, Operation: r.Operation, Permission: r.Permission}
}

func aclRecord(id topicID, b acl.Binding) AccessControlEntryRecord {
	return AccessControlEntryRecord{ID: id, ResourceType: b.ResourceType, ResourceName: b.ResourceName, PatternType: b.PatternType,
		Principal: b.Principal, Host: b.Host, Operation: b.Operation, Permission: b.Permission}
}

// applyACL applies the ACL records (apply's cases for them).
func (s *state) applyACL(r record) error {
	if s.acls == nil {
		s.acls = map[topicID]acl.Binding{}
	}
	switch r := r.(type) {
	case *AccessControlEntryRecord:
		b := r.binding()
		if _, ok := s.acls[r.ID]; ok || r.ID == (topicID{}) {
			return fmt.Errorf("%w: acl id %x created twice", errBadRecord, r.ID[:])
		}
		if err := b.Validate(); err != nil {
			return fmt.Errorf("%w: acl %x: %v", errBadRecord, r.ID[:], err)
		}
		s.acls[r.ID] = b
	case *RemoveAccessControlEntryRecord:
		if _, ok := s.acls[r.ID]; !ok {
			return fmt.Errorf("%w: removal of unknown acl id %x", errBadRecord, r.ID[:])
		}
		delete(s.acls, r.ID)
	}
	return nil
}

// aclRecords are the state's bindings as records, in ID order (snapshots:
// the same state always gives the same bytes).
func (s *state) aclRecords() []AccessControlEntryRecord {
	out := make([]AccessControlEntryRecord, 0, len(s.acls))
	for id, b := range s.acls {
		out = append(out, aclRecord(id, b))
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].ID[:]) < string(out[j].ID[:]) })
	return out
}

// ACLs returns every binding, in no particular order (the authorizer
// indexes them; DescribeACLs sorts what it answers).
func (c *Catalog) ACLs() []acl.Binding {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]acl.Binding, 0, len(c.st.acls))
	for _, b := range c.st.acls {
		out = append(out, b)
	}
	return out
}

// CreateACLs adds bindings, validated by the caller (acl.Binding.Validate),
// durably; a binding that exists already is left as it is (Kafka answers it
// success). It returns one error per binding (all the same when the commit
// fails).
func (c *Catalog) CreateACLs(bs []acl.Binding) []error {
	errs := make([]error, len(bs))
	c.mu.Lock()
	// A few bindings are looked for by a scan; many, in a set built once.
	var existing map[acl.Binding]bool
	if len(bs) > 16 {
		existing = make(map[acl.Binding]bool, len(c.st.acls))
		for _, b := range c.st.acls {
			existing[b] = true
		}
	}
	var g *commitGroup
	var queued []int
	for i, b := range bs {
		if existing[b] || existing == nil && c.hasACLLocked(b) {
			continue
		}
		id, err := c.newACLIDLocked()
		if err == nil {
			r := aclRecord(id, b)
			g, err = c.changeLocked(&r)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		if existing != nil {
			existing[b] = true
		}
		queued = append(queued, i)
	}
	c.mu.Unlock()
	if g != nil {
		if err := c.commit(g); err != nil {
			for _, i := range queued {
				errs[i] = err
			}
		}
	}
	return errs
}

// DeleteACLs removes every binding each filter matches, durably, and
// returns them per filter (a binding two filters match is removed, and
// returned, by the first).
func (c *Catalog) DeleteACLs(filters []acl.Filter) ([][]acl.Binding, error) {
	c.mu.Lock()
	rs, out := c.st.aclDeletions(filters)
	if len(rs) == 0 {
		c.mu.Unlock()
		return out, nil
	}
	g, err := c.changeAllLocked(rs)
	c.mu.Unlock()
	if err == nil {
		err = c.commit(g)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// hasACLLocked reports whether b exists: a scan, cheaper for one binding
// than building (or keeping) a set of them all.
func (c *Catalog) hasACLLocked(b acl.Binding) bool {
	for _, e := range c.st.acls {
		if e == b {
			return true
		}
	}
	return false
}

func (c *Catalog) newACLIDLocked() (topicID, error) { return c.st.newACLID(nil) }
