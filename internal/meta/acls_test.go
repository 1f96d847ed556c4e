package meta

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/vfs"
)

func testBinding(i int) acl.Binding {
	return acl.Binding{ResourceType: acl.Topic, ResourceName: fmt.Sprintf("topic-%d", i), PatternType: acl.Literal,
		Principal: fmt.Sprintf("User:u%d", i%7), Host: acl.Wildcard, Operation: acl.Read, Permission: acl.Allow}
}

// TestACLsSurviveRestartAndSnapshots: bindings created and deleted across
// many snapshots (small compaction sizes) are what a reopened catalogue
// holds, and a binding created twice is stored once.
func TestACLsSurviveRestartAndSnapshots(t *testing.T) {
	fs := vfs.NewMem()
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	want := map[acl.Binding]bool{}
	for i := 0; i < 300; i++ {
		b := testBinding(i)
		for _, err := range c.CreateACLs([]acl.Binding{b, b}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		want[b] = true
		if i%5 == 4 {
			name := testBinding(i - 2).ResourceName
			got, err := c.DeleteACLs([]acl.Filter{{ResourceType: acl.Topic, ResourceName: &name, PatternType: acl.Literal,
				Operation: acl.AnyOperation, Permission: acl.AnyPermission}})
			if err != nil {
				t.Fatal(err)
			}
			if len(got[0]) != 1 || got[0][0] != testBinding(i-2) {
				t.Fatalf("deleted %v, want %v", got, testBinding(i-2))
			}
			delete(want, testBinding(i-2))
		}
		if i%61 == 0 {
			c.Close()
			if c, err = open(fs, "/meta", smallOptions); err != nil {
				t.Fatalf("reopen after %d: %v", i, err)
			}
		}
		if len(c.ACLs()) != len(want) {
			t.Fatalf("after %d: %d bindings, want %d", i, len(c.ACLs()), len(want))
		}
	}
	c.Close()
	if c, err = open(fs, "/meta", smallOptions); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[acl.Binding]bool{}
	for _, b := range c.ACLs() {
		got[b] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart %d bindings, want %d", len(got), len(want))
	}
	snap, err := vfs.ReadFile(fs, "/meta/"+snapshotFile)
	if err != nil || !strings.Contains(string(snap), `"resource_type":"TOPIC"`) {
		t.Fatalf("the snapshot holds no ACL: %.300s %v", snap, err)
	}
}

// TestACLRecordRefusesBadBinding: a record of an invalid binding (from a
// damaged or hand-edited log) is corruption, not a binding.
func TestACLRecordRefusesBadBinding(t *testing.T) {
	s := newState()
	b := testBinding(1)
	b.Principal = "nobody"
	r := aclRecord(topicID{1}, b)
	if err := s.apply(&r); err == nil {
		t.Fatal("a binding with principal \"nobody\" applied")
	}
	if err := s.apply(&RemoveAccessControlEntryRecord{ID: topicID{2}}); err == nil {
		t.Fatal("the removal of an unknown acl applied")
	}
	key, value := encodeRecord(&RemoveAccessControlEntryRecord{ID: topicID{2}})
	if r, err := decodeRecord(key, value); err != nil || r.recordType() != typeRemoveACL {
		t.Fatalf("decode: %v %v", r, err)
	}
}
