// Package cli_test runs the sushka CLI helpers as a user does: the built
// binary against `sushka serve` in a child process.
package cli_test

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sushka-io/sushka/test/testbroker"
)

func TestMain(m *testing.M) { testbroker.Main(m) }

func run(t *testing.T, bin, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := testbroker.RunCommand(stdin, bin, args...)
	if err != nil {
		t.Fatalf("sushka %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// TestRoundTripAndInterrupt produces and consumes through the binary and
// checks that Ctrl-C (SIGINT) ends a waiting consumer cleanly, with exit
// status 0 and every record it had printed.
func TestRoundTripAndInterrupt(t *testing.T) {
	bin := testbroker.Binary(t)
	p := testbroker.Start(t, bin)
	b := []string{"--brokers", p.Addr}

	run(t, bin, "", append([]string{"topic", "create", "cli", "-p", "2", "-r", "1"}, b...)...)
	var in strings.Builder
	for i := range 100 {
		fmt.Fprintf(&in, "key%d=value%d\n", i, i)
	}
	run(t, bin, in.String(), append([]string{"produce", "cli", "--key-separator", "="}, b...)...)
	out := run(t, bin, "", append([]string{"consume", "cli", "--offset", "start", "-n", "100", "--format", `%k=%v\n`}, b...)...)
	if got := strings.Count(out, "\n"); got != 100 {
		t.Fatalf("consumed %d records, want 100", got)
	}
	for i := range 100 {
		if !strings.Contains(out, fmt.Sprintf("key%d=value%d\n", i, i)) {
			t.Fatalf("record %d missing", i)
		}
	}
	desc := run(t, bin, "", append([]string{"topic", "describe", "cli"}, b...)...)
	if !strings.Contains(desc, "PARTITIONS  2") {
		t.Fatalf("describe:\n%s", desc)
	}

	// A consumer with no -n waits for more; SIGINT ends it with status 0.
	cmd := exec.Command(bin, append([]string{"consume", "cli", "--offset", "start"}, b...)...)
	cout, cerr := &testbroker.SyncBuffer{}, &testbroker.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = cout, cerr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(cout.String(), "\n") < 100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consume after SIGINT: %v\n%s", err, cerr.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("consume did not exit within 10s of SIGINT")
	}
	if got := strings.Count(cout.String(), "\n"); got != 100 {
		t.Fatalf("consumer printed %d records before SIGINT, want 100", got)
	}
}
