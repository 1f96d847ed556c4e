package meta

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/internal/vfs"
)

// TestScramCredentialsDurable: credentials survive a reopen from the log
// and from snapshots, deletions too, and no password reaches the files.
func TestScramCredentialsDurable(t *testing.T) {
	fs := vfs.NewMem()
	dir := filepath.Join("data", "meta")
	c, err := open(fs, dir, smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	const password = "correct-horse-battery-staple"
	if created, err := c.EnsureScramUser("admin", password); err != nil || !created {
		t.Fatalf("EnsureScramUser: %v %v", created, err)
	}
	if created, _ := c.EnsureScramUser("admin", "other"); created {
		t.Fatal("EnsureScramUser replaced an existing user's credentials")
	}
	// Enough users to cross several snapshots (smallOptions compacts
	// after 2 KiB), then delete some.
	for i := range 40 {
		cred, err := sasl.NewCredential(sasl.ScramSHA256, fmt.Sprintf("pw%d", i), 4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AlterScramCredentials([]ScramChange{{User: fmt.Sprintf("u%d", i), Mechanism: sasl.ScramSHA256, Credential: &cred}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i += 2 {
		if err := c.AlterScramCredentials([]ScramChange{{User: fmt.Sprintf("u%d", i), Mechanism: sasl.ScramSHA256}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AlterScramCredentials([]ScramChange{{User: "u0", Mechanism: sasl.ScramSHA256}}); !errors.Is(err, ErrNoScramCredential) {
		t.Fatalf("deleting a deleted credential: %v", err)
	}
	check := func(c *Catalog) {
		t.Helper()
		users := c.ScramUsers()
		if len(users) != 21 || len(users["admin"]) != 2 {
			t.Fatalf("users after reopen: %d, admin %v", len(users), users["admin"])
		}
		for _, m := range sasl.ScramMechanisms {
			cred, ok := c.ScramCredential("admin", m)
			if !ok || !cred.VerifyPassword(m, password) || cred.Iterations != sasl.DefaultIterations {
				t.Fatalf("admin's %s credential after reopen: %v", m, ok)
			}
		}
		if _, ok := c.ScramCredential("u0", sasl.ScramSHA256); ok {
			t.Fatal("a deleted credential came back")
		}
		if cred, ok := c.ScramCredential("u1", sasl.ScramSHA256); !ok || !cred.VerifyPassword(sasl.ScramSHA256, "pw1") {
			t.Fatal("u1's credential lost")
		}
	}
	check(c)
	c.Close()
	c, err = open(fs, dir, smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	check(c)
	// Everything written, snapshot and log, holds no password.
	for _, name := range []string{snapshotFile, logFile} {
		raw, err := vfs.ReadFile(fs, filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), password) || strings.Contains(string(raw), "pw1") {
			t.Fatalf("%s contains a password", name)
		}
	}
	snap, _ := vfs.ReadFile(fs, filepath.Join(dir, snapshotFile))
	if !strings.Contains(string(snap), `"scram_credentials"`) {
		t.Fatal("no credential reached a snapshot: the test did not cross one")
	}
	c.Close()
}

// TestScramRecordChecks: a record a broker would never write does not apply.
func TestScramRecordChecks(t *testing.T) {
	s := newState()
	good, _ := sasl.NewCredential(sasl.ScramSHA512, "pw", 4096)
	rec := UserScramCredentialRecord{Name: "a", Mechanism: sasl.ScramSHA512, Salt: good.Salt, StoredKey: good.StoredKey, ServerKey: good.ServerKey, Iterations: 4096}
	for name, bad := range map[string]func(r *UserScramCredentialRecord){
		"no name":        func(r *UserScramCredentialRecord) { r.Name = "" },
		"mechanism":      func(r *UserScramCredentialRecord) { r.Mechanism = 9 },
		"iterations":     func(r *UserScramCredentialRecord) { r.Iterations = 100 },
		"short key":      func(r *UserScramCredentialRecord) { r.StoredKey = r.StoredKey[:10] },
		"no salt":        func(r *UserScramCredentialRecord) { r.Salt = nil },
		"server key 256": func(r *UserScramCredentialRecord) { r.ServerKey = r.ServerKey[:32] },
	} {
		r := rec
		bad(&r)
		if err := s.apply(&r); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := s.apply(&rec); err != nil {
		t.Fatal(err)
	}
	if err := s.apply(&RemoveUserScramCredentialRecord{Name: "a", Mechanism: sasl.ScramSHA256}); !errors.Is(err, errBadRecord) {
		t.Fatalf("removing a credential that does not exist: %v", err)
	}
	key, value := encodeRecord(&rec)
	r, err := decodeRecord(key, value)
	if err != nil || r.(*UserScramCredentialRecord).Iterations != 4096 {
		t.Fatalf("round trip: %v %v", r, err)
	}
}
