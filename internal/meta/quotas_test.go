package meta

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/sushka-io/sushka/internal/vfs"
)

func quotaName(s string) *string    { return &s }
func quotaValue(v float64) *float64 { return &v }

func user(n string) []QuotaEntityPart {
	return []QuotaEntityPart{{Type: QuotaEntityUser, Name: quotaName(n)}}
}

// describeQuotas renders c's quotas as "entity:key=value,..." lines, sorted.
func describeQuotas(c *Catalog) string {
	var lines []string
	for _, q := range c.ClientQuotas() {
		var ent, vals []string
		for _, p := range q.Entity {
			n := "<default>"
			if p.Name != nil {
				n = *p.Name
			}
			ent = append(ent, p.Type+"="+n)
		}
		for k, v := range q.Values {
			vals = append(vals, fmt.Sprintf("%s=%g", k, v))
		}
		sort.Strings(vals)
		lines = append(lines, strings.Join(ent, "/")+":"+strings.Join(vals, ","))
	}
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

// TestClientQuotasDurable: quotas set, changed and removed survive a
// restart, also once compacted into a snapshot; removing the last key
// removes the entity.
func TestClientQuotasDurable(t *testing.T) {
	fs := vfs.NewMem()
	c, err := open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	alice := []QuotaEntityPart{{Type: QuotaEntityUser, Name: quotaName("alice")}}
	aliceApp := []QuotaEntityPart{{Type: QuotaEntityClientID, Name: quotaName("app")}, {Type: QuotaEntityUser, Name: quotaName("alice")}}
	defaultClient := []QuotaEntityPart{{Type: QuotaEntityClientID}}
	errs := c.AlterClientQuotas([]QuotaAlteration{
		{Entity: alice, Ops: []QuotaOp{{ProducerByteRate, quotaValue(1024)}, {ConsumerByteRate, quotaValue(2048)}}},
		{Entity: aliceApp, Ops: []QuotaOp{{RequestPercentage, quotaValue(12.5)}}},
		{Entity: defaultClient, Ops: []QuotaOp{{ProducerByteRate, quotaValue(4096)}}},
	}, false)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("alteration %d: %v", i, err)
		}
	}
	want := "client-id=<default>:producer_byte_rate=4096 client-id=app/user=alice:request_percentage=12.5 user=alice:consumer_byte_rate=2048,producer_byte_rate=1024"
	if got := describeQuotas(c); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Many changes cross snapshots; the last value wins.
	for i := 1; i <= 200; i++ {
		if errs := c.AlterClientQuotas([]QuotaAlteration{{Entity: alice, Ops: []QuotaOp{{ProducerByteRate, quotaValue(float64(i))}}}}, false); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if _, err := c.CreateTopic(fmt.Sprintf("t%d", i), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if errs := c.AlterClientQuotas([]QuotaAlteration{
		{Entity: defaultClient, Ops: []QuotaOp{{Key: ProducerByteRate}}},
		{Entity: alice, Ops: []QuotaOp{{Key: ConsumerByteRate}}},
	}, false); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	want = "client-id=app/user=alice:request_percentage=12.5 user=alice:producer_byte_rate=200"
	if got := describeQuotas(c); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	c.Close()
	c, err = open(fs, "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := describeQuotas(c); got != want {
		t.Fatalf("after restart\ngot  %s\nwant %s", got, want)
	}
	snap, _ := vfs.ReadFile(fs, "/meta/"+snapshotFile)
	if !strings.Contains(string(snap), `"client_quotas"`) {
		t.Fatalf("no quotas in the snapshot: %.300s", snap)
	}
}

// TestClientQuotasValidation: Kafka's refusals, each on its own entity;
// validate-only and refused entities change nothing.
func TestClientQuotasValidation(t *testing.T) {
	c, err := open(vfs.NewMem(), "/meta", smallOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := []struct {
		name string
		alt  QuotaAlteration
		msg  string
	}{
		{"unknown key", QuotaAlteration{user("a"), []QuotaOp{{"bytes_per_hour", quotaValue(1)}}}, "invalid configuration key"},
		{"zero", QuotaAlteration{user("b"), []QuotaOp{{ProducerByteRate, quotaValue(0)}}}, "greater than 0"},
		{"negative", QuotaAlteration{user("c"), []QuotaOp{{RequestPercentage, quotaValue(-1)}}}, "greater than 0"},
		{"fraction of a byte", QuotaAlteration{user("d"), []QuotaOp{{ConsumerByteRate, quotaValue(1.5)}}}, "fractional"},
		{"mutation rate", QuotaAlteration{user("e"), []QuotaOp{{ControllerMutationRate, quotaValue(1)}}}, "not supported"},
		{"unknown entity type", QuotaAlteration{[]QuotaEntityPart{{Type: "group", Name: quotaName("g")}}, []QuotaOp{{ProducerByteRate, quotaValue(1)}}}, "entity type"},
		{"ip", QuotaAlteration{[]QuotaEntityPart{{Type: QuotaEntityIP}}, []QuotaOp{{ProducerByteRate, quotaValue(1)}}}, "ip quotas"},
		{"empty entity", QuotaAlteration{nil, []QuotaOp{{ProducerByteRate, quotaValue(1)}}}, "empty"},
		{"empty name", QuotaAlteration{user(""), []QuotaOp{{ProducerByteRate, quotaValue(1)}}}, "empty user"},
		{"type twice", QuotaAlteration{append(user("f"), user("g")...), []QuotaOp{{ProducerByteRate, quotaValue(1)}}}, "duplicate entity entry"},
		{"key twice", QuotaAlteration{user("h"), []QuotaOp{{ProducerByteRate, quotaValue(1)}, {ProducerByteRate, quotaValue(2)}}}, "duplicate quota key"},
	}
	alts := []QuotaAlteration{{user("ok"), []QuotaOp{{ProducerByteRate, quotaValue(100)}}}}
	for _, tc := range cases {
		alts = append(alts, tc.alt)
	}
	// Validate-only: the same answers, nothing written.
	for _, validateOnly := range []bool{true, false} {
		errs := c.AlterClientQuotas(alts, validateOnly)
		if errs[0] != nil {
			t.Fatalf("valid entity refused: %v", errs[0])
		}
		for i, tc := range cases {
			err := errs[i+1]
			if !errors.Is(err, ErrInvalidQuota) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s (validate only %v): %v, want ErrInvalidQuota with %q", tc.name, validateOnly, err, tc.msg)
			}
		}
		want := "user=ok:producer_byte_rate=100"
		if validateOnly {
			want = ""
		}
		if got := describeQuotas(c); got != want {
			t.Fatalf("validate only %v: quotas %q, want %q", validateOnly, got, want)
		}
	}
	// An entity named twice: both refused, Kafka's "ignoring duplicate entity".
	errs := c.AlterClientQuotas([]QuotaAlteration{
		{user("x"), []QuotaOp{{ProducerByteRate, quotaValue(1)}}},
		{user("x"), []QuotaOp{{ConsumerByteRate, quotaValue(1)}}},
	}, false)
	if !errors.Is(errs[0], ErrInvalidQuota) || !errors.Is(errs[1], ErrInvalidQuota) {
		t.Fatalf("entity named twice: %v", errs)
	}
	if got := describeQuotas(c); strings.Contains(got, "user=x") {
		t.Fatalf("duplicate entity applied: %s", got)
	}
}

// TestClientQuotasAllOrNothing: the records of one alteration are one
// batch: the log cut anywhere in it brings back none of them, and the
// quotas before it all.
func TestClientQuotasAllOrNothing(t *testing.T) {
	fs := vfs.NewMem()
	opts := options{minCompactBytes: 1 << 30}
	c, err := open(fs, "/meta", opts)
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.AlterClientQuotas([]QuotaAlteration{{user("first"), []QuotaOp{{ProducerByteRate, quotaValue(1)}}}}, false); errs[0] != nil {
		t.Fatal(errs[0])
	}
	before := c.logSize
	errs := c.AlterClientQuotas([]QuotaAlteration{
		{user("a"), []QuotaOp{{ProducerByteRate, quotaValue(10)}, {ConsumerByteRate, quotaValue(20)}}},
		{user("b"), []QuotaOp{{RequestPercentage, quotaValue(30)}}},
	}, false)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	after := c.logSize
	c.Close()
	for cut := before; cut < after; cut += max(1, (after-before)/40) {
		disk := fs.Crash(nil)
		f, _ := disk.OpenReadWrite("/meta/" + logFile)
		f.Truncate(cut)
		f.Close()
		c, err := open(disk, "/meta", opts)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if got := describeQuotas(c); got != "user=first:producer_byte_rate=1" {
			t.Fatalf("cut at %d of [%d, %d): %s", cut, before, after, got)
		}
		c.Close()
	}
	c, err = open(fs.Crash(nil), "/meta", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := describeQuotas(c), "user=a:consumer_byte_rate=20,producer_byte_rate=10 user=b:request_percentage=30 user=first:producer_byte_rate=1"; got != want {
		t.Fatalf("whole log: %s, want %s", got, want)
	}
}
