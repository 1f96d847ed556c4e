package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startServeSASL runs `sushka serve` with a PLAINTEXT and a SASL_PLAINTEXT
// listener and the bootstrap user admin; it returns their addresses.
func startServeSASL(t *testing.T, extra ...string) (plain, sasl string) {
	t.Helper()
	plain, sasl = "127.0.0.1:"+strconv.Itoa(freePort(t)), "127.0.0.1:"+strconv.Itoa(freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	serveCmd := newServeCmd()
	serveCmd.SetArgs(append([]string{"--data-dir", t.TempDir(), "--admin-listen", "", "--log-level", "error",
		"--listeners", "PLAINTEXT://" + plain + ",SASL_PLAINTEXT://" + sasl, "--bootstrap-user", "admin:admin-secret"}, extra...))
	served := make(chan error, 1)
	go func() { served <- serveCmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", sasl)
		if err == nil {
			c.Close()
			return plain, sasl
		}
		select {
		case err := <-served:
			t.Fatalf("serve ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the SASL listener never came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUserCommands: `sushka user create|list|delete` over the SASL
// listener as the bootstrap user; the new user produces and consumes with
// each mechanism; wrong or missing credentials fail with a hint.
func TestUserCommands(t *testing.T) {
	_, addr := startServeSASL(t)
	admin := []string{"--sasl-user", "admin", "--sasl-password", "admin-secret"}
	as := func(args ...string) []string { return append(args, admin...) }

	out := mustCLI(t, addr, "alice-secret\n", as("user", "create", "alice", "--password-stdin")...)
	if !strings.Contains(out, "SCRAM-SHA-256 credential set") || !strings.Contains(out, "SCRAM-SHA-512 credential set") {
		t.Fatalf("user create: %q", out)
	}
	mustCLI(t, addr, "", as("user", "create", "bob", "--password", "bob-secret", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192")...)
	list := mustCLI(t, addr, "", as("user", "list")...)
	if row := strings.Join(rowWith(list, "alice"), " "); !strings.Contains(row, "SCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (4096") {
		t.Fatalf("user list, alice: %q\n%s", row, list)
	}
	if row := strings.Join(rowWith(list, "bob"), " "); row != "bob SCRAM-SHA-512 (8192 iterations)" || rowWith(list, "admin") == nil {
		t.Fatalf("user list:\n%s", list)
	}

	mustCLI(t, addr, "", as("topic", "create", "sasl-cli", "-p", "1")...)
	for i, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		alice := []string{"--sasl-user", "alice", "--sasl-password", "alice-secret", "--sasl-mechanism", mech}
		mustCLI(t, addr, mech+"\n", append([]string{"produce", "sasl-cli"}, alice...)...)
		got := mustCLI(t, addr, "", append([]string{"consume", "sasl-cli", "-o", "start", "-n", strconv.Itoa(i + 1)}, alice...)...)
		if !strings.HasSuffix(got, mech+"\n") {
			t.Fatalf("consume as alice with %s: %q", mech, got)
		}
	}

	for name, c := range map[string]struct {
		args []string
		hint string
	}{
		"wrong password":    {[]string{"--sasl-user", "alice", "--sasl-password", "nope"}, "--sasl-password"},
		"unknown user":      {[]string{"--sasl-user", "mallory", "--sasl-password", "x", "--sasl-mechanism", "PLAIN"}, "SASL_AUTHENTICATION_FAILED"},
		"no SASL flags":     {nil, "needs --sasl-user"},
		"unknown mechanism": {[]string{"--sasl-user", "alice", "--sasl-password", "x", "--sasl-mechanism", "GSSAPI"}, "--sasl-mechanism"},
	} {
		_, _, err := runCLI(t, addr, "", append([]string{"topic", "list", "--timeout", "3s"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.hint) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.hint)
		}
	}

	if _, _, err := runCLI(t, addr, "", as("user", "create", "carol")...); err == nil || !strings.Contains(err.Error(), "--password-stdin") {
		t.Errorf("create without a password: %v", err)
	}
	if _, _, err := runCLI(t, addr, "", as("user", "create", "carol", "--password", "x", "--iterations", "100")...); err == nil || !strings.Contains(err.Error(), "4096") {
		t.Errorf("create with 100 iterations: %v", err)
	}
	out = mustCLI(t, addr, "", as("user", "delete", "alice", "--mechanism", "SCRAM-SHA-256")...)
	if !strings.Contains(out, "SCRAM-SHA-256 credential deleted") {
		t.Fatalf("delete one mechanism: %q", out)
	}
	if row := strings.Join(rowWith(mustCLI(t, addr, "", as("user", "list")...), "alice"), " "); row != "alice SCRAM-SHA-512 (4096 iterations)" {
		t.Fatalf("after deleting SCRAM-SHA-256: %q", row)
	}
	mustCLI(t, addr, "", as("user", "delete", "alice")...)
	if _, _, err := runCLI(t, addr, "", as("user", "delete", "alice")...); err == nil || !strings.Contains(err.Error(), "RESOURCE_NOT_FOUND") {
		t.Errorf("deleting a deleted user: %v", err)
	}
	if _, _, err := runCLI(t, addr, "", "topic", "list", "--timeout", "3s", "--sasl-user", "alice", "--sasl-password", "alice-secret"); err == nil {
		t.Error("a deleted user still authenticates")
	}
}
