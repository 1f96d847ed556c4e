package main

import (
	"strings"
	"testing"

	"github.com/sushka-io/sushka/test/testbroker"
)

// TestQuotaCommands: quota alter sets and removes quotas of users, client
// ids and their defaults; quota describe shows all of them or those of an
// entity; a refused change says what Kafka says.
func TestQuotaCommands(t *testing.T) {
	b := testbroker.StartInProcess(t)
	if out := runGroupCLI(t, b, "", "quota", "alter", "--user", "alice", "--add", "producer_byte_rate=1048576,consumer_byte_rate=2097152"); !strings.Contains(out, "altered {user=alice}") {
		t.Fatalf("alter: %q", out)
	}
	runGroupCLI(t, b, "", "quota", "alter", "--user", "alice", "--client-id", "app", "--add", "request_percentage=25")
	runGroupCLI(t, b, "", "quota", "alter", "--client-id-default", "--add", "producer_byte_rate=4096")
	if out := runGroupCLI(t, b, "", "quota", "alter", "--user-default", "--add", "producer_byte_rate=1", "--validate-only"); !strings.Contains(out, "valid") {
		t.Fatalf("validate only: %q", out)
	}

	all := runGroupCLI(t, b, "", "quota", "describe")
	want := []string{
		"USER   CLIENT-ID  QUOTA               VALUE",
		"-      <default>  producer_byte_rate  4096",
		"alice  -          consumer_byte_rate  2097152",
		"alice  -          producer_byte_rate  1048576",
		"alice  app        request_percentage  25",
	}
	if got := strings.TrimSpace(all); got != strings.Join(want, "\n") {
		t.Fatalf("describe:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if out := runGroupCLI(t, b, "", "quota", "describe", "--user", "alice", "--strict"); strings.Contains(out, "app") || !strings.Contains(out, "consumer_byte_rate") {
		t.Fatalf("describe --user alice --strict:\n%s", out)
	}
	if out := runGroupCLI(t, b, "", "quota", "describe", "--client-id-default"); !strings.Contains(out, "4096") || strings.Contains(out, "alice") {
		t.Fatalf("describe --client-id-default:\n%s", out)
	}

	runGroupCLI(t, b, "", "quota", "alter", "--user", "alice", "--delete", "consumer_byte_rate")
	if out := runGroupCLI(t, b, "", "quota", "describe", "--user", "alice"); strings.Contains(out, "consumer_byte_rate") {
		t.Fatalf("deleted quota still shown:\n%s", out)
	}

	for _, bad := range [][]string{
		{"--user", "bob", "--add", "producer_byte_rate=-5"},
		{"--user", "bob", "--add", "bytes_per_fortnight=5"},
		{"--user", "bob", "--add", "consumer_byte_rate=1.5"},
	} {
		_, errOut, err := runCLI(t, b, "", append([]string{"quota", "alter"}, bad...)...)
		if err == nil || !strings.Contains(err.Error()+errOut, "INVALID_REQUEST") {
			t.Errorf("quota alter %v: %v %s, want INVALID_REQUEST", bad, err, errOut)
		}
	}
	if _, _, err := runCLI(t, b, "", "quota", "alter", "--add", "producer_byte_rate=5"); err == nil || !strings.Contains(err.Error(), "name an entity") {
		t.Errorf("alter without an entity: %v", err)
	}
}
