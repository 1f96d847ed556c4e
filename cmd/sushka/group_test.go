package main

import (
	"testing"

	"github.com/sushka-io/sushka/test/testbroker"
)

// runGroupCLI is mustCLI with --timeout 10s (runCLI defaults to 5s).
func runGroupCLI(t *testing.T, brokers, stdin string, args ...string) string {
	t.Helper()
	return mustCLI(t, brokers, stdin, append(append([]string{}, args...), "--timeout", "10s")...)
}

// TestGroupCommands: consume --group commits, group list/describe show the
// group and its lag, seek moves it back, delete removes it.
func TestGroupCommands(t *testing.T) {
	b := testbroker.StartInProcess(t)
	runGroupCLI(t, b, "", "topic", "create", "gt", "-p", "1")
	runGroupCLI(t, b, "m1\nm2\nm3\nm4\nm5\n", "produce", "gt")
	if out := runGroupCLI(t, b, "", "consume", "gt", "--group", "cg", "-o", "start", "-n", "3"); out != "m1\nm2\nm3\n" {
		t.Fatalf("consume --group read %q", out)
	}
	if row := rowWith(runGroupCLI(t, b, "", "group", "list"), "cg"); len(row) < 3 || row[1] != "Empty" || row[2] != "consumer" {
		t.Fatalf("group list row %v", row)
	}
	desc := runGroupCLI(t, b, "", "group", "describe", "cg")
	if row := rowWith(desc, "gt"); len(row) < 5 || row[2] != "3" || row[3] != "5" || row[4] != "2" {
		t.Fatalf("describe: want committed 3, end 5, lag 2:\n%s", desc)
	}
	// The group resumes where it committed.
	if out := runGroupCLI(t, b, "", "consume", "gt", "--group", "cg", "-n", "2"); out != "m4\nm5\n" {
		t.Fatalf("resumed consume read %q", out)
	}
	runGroupCLI(t, b, "", "group", "seek", "cg", "--to", "1")
	if out := runGroupCLI(t, b, "", "consume", "gt", "--group", "cg", "-n", "4"); out != "m2\nm3\nm4\nm5\n" {
		t.Fatalf("consume after seek read %q", out)
	}
	runGroupCLI(t, b, "", "group", "delete", "cg")
	if row := rowWith(runGroupCLI(t, b, "", "group", "list"), "cg"); row != nil {
		t.Fatalf("cg still listed after delete: %v", row)
	}
}
