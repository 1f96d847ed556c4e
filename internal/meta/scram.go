package meta

import (
	"errors"
	"fmt"
	"sort"

	"github.com/sushka-io/sushka/internal/sasl"
)

// SCRAM credentials in the metadata log, as KRaft keeps them in
// __cluster_metadata: UserScramCredentialRecord (an upsert of one user's
// credential for one mechanism) and RemoveUserScramCredentialRecord. A
// credential is its salt, iterations, StoredKey and ServerKey (RFC 5802):
// never a password, nor the salted password. See docs/format.md.

const (
	typeUserScramCredential       recordType = 6 // a credential created or replaced
	typeRemoveUserScramCredential recordType = 7 // a credential deleted
)

// UserScramCredentialRecord sets user Name's credential for Mechanism.
type UserScramCredentialRecord struct {
	Name       string         `json:"name"`
	Mechanism  sasl.Mechanism `json:"mechanism"`
	Salt       []byte         `json:"salt"`
	StoredKey  []byte         `json:"stored_key"`
	ServerKey  []byte         `json:"server_key"`
	Iterations int32          `json:"iterations"`
}

// RemoveUserScramCredentialRecord deletes user Name's credential for
// Mechanism.
type RemoveUserScramCredentialRecord struct {
	Name      string         `json:"name"`
	Mechanism sasl.Mechanism `json:"mechanism"`
}

func (UserScramCredentialRecord) recordType() recordType       { return typeUserScramCredential }
func (RemoveUserScramCredentialRecord) recordType() recordType { return typeRemoveUserScramCredential }

// scramKey names one credential: a user and a mechanism.
type scramKey struct {
	user      string
	mechanism sasl.Mechanism
}

// ErrNoScramCredential is the deletion of a credential that does not exist
// (Kafka's RESOURCE_NOT_FOUND).
var ErrNoScramCredential = errors.New("no such SCRAM credential")

// decodeScramRecord returns an empty record of a SCRAM record type.
func decodeScramRecord(typ recordType) record {
	switch typ {
	case typeUserScramCredential:
		return &UserScramCredentialRecord{}
	case typeRemoveUserScramCredential:
		return &RemoveUserScramCredentialRecord{}
	}
	return nil
}

// applyScram applies a SCRAM record; ok is false for other records.
func (s *state) applyScram(r record) (ok bool, err error) {
	switch r := r.(type) {
	case *UserScramCredentialRecord:
		if r.Name == "" || sasl.CheckParameters(r.Mechanism, r.Iterations, r.Salt, make([]byte, r.Mechanism.KeyBytes())) != nil ||
			len(r.StoredKey) != r.Mechanism.KeyBytes() || len(r.ServerKey) != r.Mechanism.KeyBytes() {
			return true, fmt.Errorf("%w: SCRAM credential of %q for %s with %d iterations", errBadRecord, r.Name, r.Mechanism, r.Iterations)
		}
		if s.scram == nil {
			s.scram = map[scramKey]sasl.Credential{}
		}
		s.scram[scramKey{r.Name, r.Mechanism}] = sasl.Credential{Salt: r.Salt, StoredKey: r.StoredKey, ServerKey: r.ServerKey, Iterations: r.Iterations}
		return true, nil
	case *RemoveUserScramCredentialRecord:
		k := scramKey{r.Name, r.Mechanism}
		if _, ok := s.scram[k]; !ok {
			return true, fmt.Errorf("%w: removal of the unknown SCRAM credential of %q for %s", errBadRecord, r.Name, r.Mechanism)
		}
		delete(s.scram, k)
		return true, nil
	}
	return false, nil
}

// scramRecords is the snapshot's part of the credentials, sorted so that
// the same state always gives the same bytes.
func (s *state) scramRecords() []UserScramCredentialRecord {
	out := make([]UserScramCredentialRecord, 0, len(s.scram))
	for k, c := range s.scram {
		out = append(out, UserScramCredentialRecord{Name: k.user, Mechanism: k.mechanism, Salt: c.Salt,
			StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Mechanism < out[j].Mechanism
	})
	return out
}

// copyScram returns a copy of the credential map (credentials are replaced,
// never mutated, by apply).
func (s *state) copyScram() map[scramKey]sasl.Credential {
	out := make(map[scramKey]sasl.Credential, len(s.scram))
	for k, c := range s.scram {
		out[k] = c
	}
	return out
}

// ScramCredential returns user's credential for m (sasl.Store).
func (c *Catalog) ScramCredential(user string, m sasl.Mechanism) (sasl.Credential, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cred, ok := c.st.scram[scramKey{user, m}]
	return cred, ok
}

// ScramInfo is what may be said of a credential: its mechanism and
// iterations (DescribeUserScramCredentials).
type ScramInfo struct {
	Mechanism  sasl.Mechanism
	Iterations int32
}

// ScramUsers returns every user with a SCRAM credential and what it has,
// by mechanism.
func (c *Catalog) ScramUsers() map[string][]ScramInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.scramUsers()
}

func (s *state) scramUsers() map[string][]ScramInfo {
	out := map[string][]ScramInfo{}
	for k, cred := range s.scram {
		out[k.user] = append(out[k.user], ScramInfo{Mechanism: k.mechanism, Iterations: cred.Iterations})
	}
	for _, infos := range out {
		sort.Slice(infos, func(i, j int) bool { return infos[i].Mechanism < infos[j].Mechanism })
	}
	return out
}

// ScramChange is one change of AlterScramCredentials: Credential set
// (upsert) or nil (delete).
type ScramChange struct {
	User       string
	Mechanism  sasl.Mechanism
	Credential *sasl.Credential
	// SaltedPassword is the upsertion's, as the client sent it: what a
	// node of a cluster forwards to the controller (the credential cannot
	// be turned back into it). Never stored.
	SaltedPassword []byte
}

// AlterScramCredentials applies the changes together: one commit, durable
// when it returns. A deletion of a credential that does not exist fails
// the whole call with ErrNoScramCredential before anything changes; the
// caller (AlterUserScramCredentials) checks every change first.
func (c *Catalog) AlterScramCredentials(changes []ScramChange) error {
	if len(changes) == 0 {
		return nil
	}
	c.mu.Lock()
	rs, err := c.st.scramChangeRecords(changes)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	g, err := c.changeAllLocked(rs)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.commit(g)
}

// scramChangeRecords checks changes against s (a deletion of a credential
// that does not exist is ErrNoScramCredential) and returns their records,
// to be applied together: the one home of AlterScramCredentials' checks,
// for the single-node catalogue and the cluster's controller (Machine).
func (s *state) scramChangeRecords(changes []ScramChange) ([]record, error) {
	next := s.copyScram()
	rs := make([]record, 0, len(changes))
	for _, ch := range changes {
		k := scramKey{ch.User, ch.Mechanism}
		if ch.Credential == nil {
			if _, ok := next[k]; !ok {
				return nil, fmt.Errorf("%w: user %q has no %s credential", ErrNoScramCredential, ch.User, ch.Mechanism)
			}
			delete(next, k)
			rs = append(rs, &RemoveUserScramCredentialRecord{Name: ch.User, Mechanism: ch.Mechanism})
			continue
		}
		next[k] = *ch.Credential
		cr := ch.Credential
		rs = append(rs, &UserScramCredentialRecord{Name: ch.User, Mechanism: ch.Mechanism, Salt: cr.Salt,
			StoredKey: cr.StoredKey, ServerKey: cr.ServerKey, Iterations: cr.Iterations})
	}
	return rs, nil
}

// EnsureScramUser gives user credentials for every SCRAM mechanism made
// from password, if the user has none (--bootstrap-user: how a first
// administrator exists). It reports whether it created them.
func (c *Catalog) EnsureScramUser(user, password string) (bool, error) {
	if user == "" {
		return false, errors.New("meta: a SCRAM user needs a name")
	}
	if users := c.ScramUsers(); len(users[user]) > 0 {
		return false, nil
	}
	var changes []ScramChange
	for _, m := range sasl.ScramMechanisms {
		cred, err := sasl.NewCredential(m, password, sasl.DefaultIterations)
		if err != nil {
			return false, err
		}
		changes = append(changes, ScramChange{User: user, Mechanism: m, Credential: &cred})
	}
	if err := c.AlterScramCredentials(changes); err != nil {
		return false, err
	}
	return true, nil
}
