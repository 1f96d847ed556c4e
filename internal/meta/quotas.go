package meta

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// Client quotas (KIP-13, KIP-55, KIP-546) are records of the metadata log,
// as KRaft keeps them in __cluster_metadata: one ClientQuotaRecord per
// (entity, key) set or removed. An entity is a set of components, each an
// entity type ("user", "client-id") with a name, or no name for the
// type's default (Kafka's <default>). The table of quota keys and the
// validation of an alteration are here, their one home (as Kafka's
// ClientQuotaControlManager and QuotaConfig); internal/quota enforces them.

// typeClientQuota is the ClientQuotaRecord's type (see records.go).
const typeClientQuota recordType = 10

// Entity types of client quotas, Kafka's names.
const (
	QuotaEntityUser     = "user"
	QuotaEntityClientID = "client-id"
	// QuotaEntityIP is Kafka's IP entity (connection_creation_rate); it
	// is refused here: Sushka bounds connections per IP by flag instead.
	QuotaEntityIP = "ip"
)

// Quota keys, Kafka's names (QuotaConfig).
const (
	ProducerByteRate  = "producer_byte_rate"
	ConsumerByteRate  = "consumer_byte_rate"
	RequestPercentage = "request_percentage"
	// ControllerMutationRate (KIP-599) is refused: Sushka does not
	// throttle topic and partition creation.
	ControllerMutationRate = "controller_mutation_rate"
)

// QuotaKeys are the quota keys a user or client-id entity may set, and
// whether each takes whole numbers only (Kafka's LONG keys; the others
// are DOUBLE).
var QuotaKeys = map[string]struct{ Integral bool }{
	ProducerByteRate:  {Integral: true},
	ConsumerByteRate:  {Integral: true},
	RequestPercentage: {Integral: false},
}

// ErrInvalidQuota is an alteration or filter Kafka refuses with
// INVALID_REQUEST (an unknown key or entity type, a value that is not
// positive, an entity named twice...).
var ErrInvalidQuota = errors.New("invalid client quota")

// ErrUnsupportedQuotaEntity is a describe filter on an entity type Kafka
// does not know (UNSUPPORTED_VERSION, as Kafka answers it).
var ErrUnsupportedQuotaEntity = errors.New("unsupported client quota entity type")

// QuotaEntityPart is one component of a quota entity: a type and a name,
// or a nil name for the default of the type.
type QuotaEntityPart struct {
	Type string  `json:"type"`
	Name *string `json:"name"`
}

// ClientQuotaRecord sets Key of Entity to Value, or removes it (KRaft's
// ClientQuotaRecord). Entity is sorted by type.
type ClientQuotaRecord struct {
	Entity []QuotaEntityPart `json:"entity"`
	Key    string            `json:"key"`
	Value  float64           `json:"value,omitempty"`
	Remove bool              `json:"remove,omitempty"`
}

func (ClientQuotaRecord) recordType() recordType { return typeClientQuota }

// ClientQuota is one entity's quotas. Values returned by the Catalog are
// copies.
type ClientQuota struct {
	Entity []QuotaEntityPart // sorted by type
	Values map[string]float64
}

// QuotaAlteration is one entity's part of an AlterClientQuotas request: the
// keys to set (Value) or remove (nil).
type QuotaAlteration struct {
	Entity []QuotaEntityPart
	Ops    []QuotaOp
}

// QuotaOp sets Key to *Value, or removes it when Value is nil.
type QuotaOp struct {
	Key   string
	Value *float64
}

// quotaEntityKey is an entity's key in the state: its sorted components,
// with a default written apart from any name (a name cannot hold \x00).
func quotaEntityKey(entity []QuotaEntityPart) string {
	var b strings.Builder
	for _, p := range entity {
		b.WriteString(p.Type)
		if p.Name == nil {
			b.WriteString("\x00d")
		} else {
			b.WriteString("\x00n")
			b.WriteString(*p.Name)
		}
		b.WriteByte(0)
	}
	return b.String()
}

// normalizeQuotaEntity validates an entity's components as Kafka's
// ClientQuotaControlManager does and returns them sorted by type.
func normalizeQuotaEntity(entity []QuotaEntityPart) ([]QuotaEntityPart, error) {
	if len(entity) == 0 {
		return nil, fmt.Errorf("%w: empty client quota entity", ErrInvalidQuota)
	}
	out := make([]QuotaEntityPart, 0, len(entity))
	for _, p := range entity {
		switch p.Type {
		case QuotaEntityUser, QuotaEntityClientID:
		case QuotaEntityIP:
			return nil, fmt.Errorf("%w: ip quotas (connection_creation_rate) are not supported; bound connections per IP with --max-connections-per-ip", ErrInvalidQuota)
		default:
			return nil, fmt.Errorf("%w: unhandled client quota entity type %q", ErrInvalidQuota, p.Type)
		}
		for _, q := range out {
			if q.Type == p.Type {
				return nil, fmt.Errorf("%w: duplicate entity entry %s", ErrInvalidQuota, p.Type)
			}
		}
		if p.Name != nil && *p.Name == "" {
			return nil, fmt.Errorf("%w: empty %s not supported", ErrInvalidQuota, p.Type)
		}
		if p.Name != nil && strings.IndexByte(*p.Name, 0) >= 0 {
			return nil, fmt.Errorf("%w: %s name contains a NUL byte", ErrInvalidQuota, p.Type)
		}
		if p.Name != nil {
			name := *p.Name
			p.Name = &name
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// validateQuotaValue applies Kafka's rules to one key's new value.
func validateQuotaValue(key string, value float64) error {
	k, ok := QuotaKeys[key]
	switch {
	case key == ControllerMutationRate:
		return fmt.Errorf("%w: %s is not supported (Sushka does not throttle topic creation)", ErrInvalidQuota, key)
	case !ok:
		return fmt.Errorf("%w: invalid configuration key %s", ErrInvalidQuota, key)
	case math.IsNaN(value) || math.IsInf(value, 0):
		return fmt.Errorf("%w: quota %s must be a finite number", ErrInvalidQuota, key)
	case value <= 0:
		return fmt.Errorf("%w: quota %s must be greater than 0", ErrInvalidQuota, key)
	case k.Integral && value > math.MaxInt64:
		return fmt.Errorf("%w: proposed value for %s is too large for a LONG", ErrInvalidQuota, key)
	case k.Integral && math.Abs(math.Mod(value, 1)) > 1e-6:
		return fmt.Errorf("%w: %s cannot be a fractional value", ErrInvalidQuota, key)
	}
	return nil
}

// applyQuota applies a ClientQuotaRecord. Entries are replaced, never
// mutated, so a copy of the map (copyTopics) shares them safely.
func (s *state) applyQuota(r *ClientQuotaRecord) error {
	entity, err := normalizeQuotaEntity(r.Entity)
	if err != nil {
		return fmt.Errorf("%w: %v", errBadRecord, err)
	}
	if !r.Remove {
		if err := validateQuotaValue(r.Key, r.Value); err != nil {
			return fmt.Errorf("%w: %v", errBadRecord, err)
		}
	}
	key := quotaEntityKey(entity)
	old := s.quotas[key]
	next := &ClientQuota{Entity: entity, Values: map[string]float64{}}
	if old != nil {
		next.Values = maps.Clone(old.Values)
	}
	if r.Remove {
		delete(next.Values, r.Key)
	} else {
		next.Values[r.Key] = r.Value
	}
	if s.quotas == nil {
		s.quotas = map[string]*ClientQuota{}
	}
	if len(next.Values) == 0 {
		delete(s.quotas, key)
	} else {
		s.quotas[key] = next
	}
	return nil
}

// quotaRecords is the state's quotas as records, sorted, for a snapshot.
func (s *state) quotaRecords() []ClientQuotaRecord {
	var out []ClientQuotaRecord
	for _, k := range slices.Sorted(maps.Keys(s.quotas)) {
		q := s.quotas[k]
		for _, n := range slices.Sorted(maps.Keys(q.Values)) {
			out = append(out, ClientQuotaRecord{Entity: q.Entity, Key: n, Value: q.Values[n]})
		}
	}
	return out
}

// ClientQuotas returns every entity with a quota, sorted by entity.
func (c *Catalog) ClientQuotas() []ClientQuota {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.clientQuotas()
}

func (s *state) clientQuotas() []ClientQuota {
	out := make([]ClientQuota, 0, len(s.quotas))
	for _, k := range slices.Sorted(maps.Keys(s.quotas)) {
		q := s.quotas[k]
		out = append(out, ClientQuota{Entity: cloneQuotaEntity(q.Entity), Values: maps.Clone(q.Values)})
	}
	return out
}

func cloneQuotaEntity(e []QuotaEntityPart) []QuotaEntityPart {
	out := make([]QuotaEntityPart, len(e))
	for i, p := range e {
		out[i] = p
		if p.Name != nil {
			n := *p.Name
			out[i].Name = &n
		}
	}
	return out
}

// AlterClientQuotas applies alterations as Kafka's controller does: each
// entity is validated on its own and answered its own error (nil: done);
// the records of every valid entity are written together, with one fsync,
// and only values that change are written. validateOnly changes nothing.
// A storage failure fails every entity that had records to write.
func (c *Catalog) AlterClientQuotas(alterations []QuotaAlteration, validateOnly bool) []error {
	c.mu.Lock()
	recs, recFrom, errs := c.st.quotaAlterationRecords(alterations)
	if validateOnly || len(recs) == 0 {
		c.mu.Unlock()
		return errs
	}
	g, err := c.changeAllLocked(recs)
	c.mu.Unlock()
	if err == nil {
		err = c.commit(g)
	}
	if err != nil {
		for _, i := range recFrom {
			errs[i] = err
		}
	}
	return errs
}

// quotaAlterationRecords validates alterations (each entity on its own,
// answered its own error) and returns the records of the valid ones that
// change a value, with recFrom[n] the alteration of recs[n]: the one home
// of AlterClientQuotas' checks, for the single-node catalogue and the
// cluster's controller (Machine).
func (s *state) quotaAlterationRecords(alterations []QuotaAlteration) (recs []record, recFrom []int, errs []error) {
	errs = make([]error, len(alterations))
	type plan struct {
		entity []QuotaEntityPart
		key    string
		ops    map[string]*float64
	}
	plans := make([]*plan, len(alterations))
	seen := map[string]int{}
	for i, a := range alterations {
		entity, err := normalizeQuotaEntity(a.Entity)
		if err != nil {
			errs[i] = err
			continue
		}
		p := &plan{entity: entity, key: quotaEntityKey(entity), ops: map[string]*float64{}}
		if j, dup := seen[p.key]; dup {
			// Kafka: the entity is ignored, all of its entries refused.
			errs[i] = fmt.Errorf("%w: ignoring duplicate entity", ErrInvalidQuota)
			errs[j], plans[j] = errs[i], nil
			continue
		}
		seen[p.key] = i
		for _, op := range a.Ops {
			if _, dup := p.ops[op.Key]; dup {
				err = fmt.Errorf("%w: duplicate quota key %s, not updating quota for this entity", ErrInvalidQuota, op.Key)
				break
			}
			if op.Value != nil {
				if err = validateQuotaValue(op.Key, *op.Value); err != nil {
					break
				}
			}
			p.ops[op.Key] = op.Value
		}
		if err != nil {
			errs[i] = err
			continue
		}
		plans[i] = p
	}

	for i, p := range plans {
		if p == nil {
			continue
		}
		var current map[string]float64
		if q := s.quotas[p.key]; q != nil {
			current = q.Values
		}
		for _, k := range slices.Sorted(maps.Keys(p.ops)) {
			v := p.ops[k]
			old, had := current[k]
			switch {
			case v == nil && had:
				recs = append(recs, &ClientQuotaRecord{Entity: p.entity, Key: k, Remove: true})
			case v != nil && (!had || old != *v):
				recs = append(recs, &ClientQuotaRecord{Entity: p.entity, Key: k, Value: *v})
			default:
				continue // no change: no record, as Kafka
			}
			recFrom = append(recFrom, i)
		}
	}
	return recs, recFrom, errs
}

// CheckQuotaAlterations is AlterClientQuotas' validation alone (a
// validate-only request in cluster mode): each alteration's own error.
func CheckQuotaAlterations(alterations []QuotaAlteration) []error {
	_, _, errs := newState().quotaAlterationRecords(alterations)
	return errs
}
