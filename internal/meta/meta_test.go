package meta

import (
	"errors"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/vfs"
)

func TestCatalogPersists(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateTopic("orders", 3, map[string]string{"retention.ms": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic("orders", 1, nil); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := c.CreateTopic("gone", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPartitions("orders", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPartitions("orders", 5); !errors.Is(err, ErrBadPartitions) {
		t.Fatalf("shrinking or equal count: %v", err)
	}
	pid1, _ := c.NextProducerID()
	pid2, _ := c.NextProducerID()
	if pid2 != pid1+1 {
		t.Fatalf("producer ids %d %d", pid1, pid2)
	}

	c2, err := Open(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c2.Topic("orders")
	if !ok || got.ID != created.ID || got.Partitions != 5 || got.Configs["retention.ms"] != "1000" {
		t.Fatalf("reloaded %+v", got)
	}
	if _, ok := c2.Topic("gone"); ok {
		t.Fatal("deleted topic came back")
	}
	if byID, ok := c2.TopicByID(created.ID); !ok || byID.Name != "orders" {
		t.Fatal("lookup by id")
	}
	if c2.ClusterID() == "" || c2.ClusterID() != c.ClusterID() {
		t.Fatalf("cluster id %q then %q", c.ClusterID(), c2.ClusterID())
	}
	pid3, _ := c2.NextProducerID()
	if pid3 <= pid2 {
		t.Fatalf("producer id %d repeated after restart (had %d)", pid3, pid2)
	}
}

func TestValidateTopicName(t *testing.T) {
	for _, ok := range []string{"a", "A.b_c-9", strings.Repeat("x", 249)} {
		if err := ValidateTopicName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", strings.Repeat("x", 250), "a b", "a/b", "ü"} {
		if err := ValidateTopicName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	good := map[string]string{"retention.ms": "-1", "cleanup.policy": "delete", "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2"}
	if err := ValidateConfigs(good); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"cleanup.policy": "compact", "retention.ms": "x", "segment.bytes": "1", "nope": "1", "message.timestamp.type": "Now"} {
		if err := ValidateConfig(k, &v); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
}

// TestMaxPartitions: creations and growths beyond the broker's bound fail
// with ErrBadPartitions naming the limit; deleting makes room again.
func TestMaxPartitions(t *testing.T) {
	c, err := Open(vfs.NewMem(), "/meta")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetMaxPartitions(10)
	if _, err := c.CreateTopic("a", 6, nil); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"create":       func() error { _, err := c.CreateTopic("b", 5, nil); return err }(),
		"check create": c.CheckCreate("b", 5, nil),
		"grow":         c.SetPartitions("a", 11),
		"check grow":   c.CheckPartitions("a", 11),
	} {
		if !errors.Is(err, ErrBadPartitions) || !strings.Contains(err.Error(), "limit of 10") {
			t.Errorf("%s beyond the limit: %v", name, err)
		}
	}
	if _, ok := c.Topic("b"); ok {
		t.Fatal("topic b was created beyond the limit")
	}
	if _, err := c.CreateTopic("b", 4, nil); err != nil {
		t.Fatalf("up to the limit: %v", err)
	}
	if err := c.DeleteTopic("a"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPartitions("b", 10); err != nil {
		t.Fatalf("after a deletion made room: %v", err)
	}
}
