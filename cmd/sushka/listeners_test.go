package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sushka-io/sushka/internal/certs"
	"github.com/sushka-io/sushka/internal/server"
	"github.com/sushka-io/sushka/test/testbroker"
)

// TestParseListeners: Kafka's listeners, advertised.listeners and
// listener.security.protocol.map, and what they refuse.
func TestParseListeners(t *testing.T) {
	specs, err := parseListeners(serveFlags{
		listeners:           "internal://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093,SSL://:9094",
		advertisedListeners: "EXTERNAL://broker.example.com:9093",
		listenerProtocolMap: "INTERNAL:PLAINTEXT,EXTERNAL:sasl_ssl",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []listenerSpec{
		{name: "INTERNAL", protocol: server.Plaintext, addr: "127.0.0.1:9092"},
		{name: "EXTERNAL", protocol: server.SASLSSL, addr: "0.0.0.0:9093", advertised: "broker.example.com:9093"},
		{name: "SSL", protocol: server.SSL, addr: ":9094"},
	}
	if len(specs) != len(want) {
		t.Fatalf("specs %+v", specs)
	}
	for i := range want {
		if specs[i] != want[i] {
			t.Errorf("listener %d: %+v, want %+v", i, specs[i], want[i])
		}
	}
	// No --listeners: --listen is one PLAINTEXT listener.
	specs, err = parseListeners(serveFlags{listen: "127.0.0.1:9092", advertisedAddr: "h:1"})
	if err != nil || len(specs) != 1 || specs[0] != (listenerSpec{name: "PLAINTEXT", protocol: server.Plaintext, addr: "127.0.0.1:9092", advertised: "h:1"}) {
		t.Fatalf("--listen shorthand: %+v, %v", specs, err)
	}
	for name, f := range map[string]serveFlags{
		"unmapped name":          {listeners: "EXTERNAL://:9093"},
		"no scheme":              {listeners: "127.0.0.1:9092"},
		"no port":                {listeners: "PLAINTEXT://localhost"},
		"name twice":             {listeners: "PLAINTEXT://:1,plaintext://:2"},
		"advertised unknown":     {listeners: "PLAINTEXT://:1", advertisedListeners: "SSL://h:2"},
		"bad protocol in map":    {listeners: "A://:1", listenerProtocolMap: "A:TLS"},
		"--listen beside":        {listeners: "PLAINTEXT://:1", listenGiven: true},
		"--advertised-addr with": {listeners: "PLAINTEXT://:1", advertisedAddr: "h:1"},
	} {
		if specs, err := parseListeners(f); err == nil {
			t.Errorf("%s: accepted as %+v", name, specs)
		}
	}
}

// TestTLSInitServeAndConnect is the quick start: `sushka tls init`, then
// `sushka serve` with a PLAINTEXT and an SSL listener requiring client
// certificates, then the CLI over each; the wrong way round fails with a
// hint that says what to do.
func TestTLSInitServeAndConnect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	initCmd := newTLSInitCmd()
	initCmd.SetArgs([]string{"--dir", dir, "--host", "127.0.0.1"})
	var initOut bytes.Buffer
	initCmd.SetOut(&initOut)
	if err := initCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{certs.CACertFile, certs.CAKeyFile, certs.ServerCertFile, certs.ServerKeyFile, certs.ClientCertFile, certs.ClientKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if !strings.Contains(initOut.String(), "--tls-cert-file "+filepath.Join(dir, certs.ServerCertFile)) {
		t.Fatalf("tls init printed no serve flags:\n%s", initOut.String())
	}
	// A second init never overwrites the keys.
	again := newTLSInitCmd()
	again.SetArgs([]string{"--dir", dir})
	again.SetOut(&bytes.Buffer{})
	again.SetErr(&bytes.Buffer{})
	if err := again.Execute(); err == nil {
		t.Fatal("tls init overwrote an existing CA")
	}

	plain, ssl := "127.0.0.1:"+strconv.Itoa(testbroker.FreePort(t)), "127.0.0.1:"+strconv.Itoa(testbroker.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	serveCmd := newServeCmd()
	serveCmd.SetArgs([]string{"--data-dir", t.TempDir(), "--admin-listen", "", "--log-level", "error",
		"--listeners", "PLAINTEXT://" + plain + ",SSL://" + ssl,
		"--tls-cert-file", filepath.Join(dir, certs.ServerCertFile), "--tls-key-file", filepath.Join(dir, certs.ServerKeyFile),
		"--tls-client-auth", "required", "--tls-client-ca-file", filepath.Join(dir, certs.CACertFile)})
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
		c, err := net.Dial("tcp", ssl)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-served:
			t.Fatalf("serve ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the SSL listener never came up")
		}
		time.Sleep(20 * time.Millisecond)
	}

	tlsArgs := []string{"--tls-ca-file", filepath.Join(dir, certs.CACertFile),
		"--tls-cert-file", filepath.Join(dir, certs.ClientCertFile), "--tls-key-file", filepath.Join(dir, certs.ClientKeyFile)}
	mustCLI(t, ssl, "", append([]string{"topic", "create", "secure", "-p", "1", "-r", "1"}, tlsArgs...)...)
	if _, errOut, err := runCLI(t, ssl, "one\ntwo\n", append([]string{"produce", "secure"}, tlsArgs...)...); err != nil {
		t.Fatalf("produce over TLS: %v\n%s", err, errOut)
	}
	if out := mustCLI(t, ssl, "", append([]string{"consume", "secure", "-n", "2", "--offset", "start"}, tlsArgs...)...); out != "one\ntwo\n" {
		t.Fatalf("consumed over TLS %q", out)
	}
	if out := mustCLI(t, plain, "", "consume", "secure", "-n", "2", "--offset", "start"); out != "one\ntwo\n" {
		t.Fatalf("consumed over PLAINTEXT %q", out)
	}

	for name, c := range map[string]struct {
		addr string
		args []string
		hint string
	}{
		"TLS to the PLAINTEXT listener": {plain, tlsArgs, "does not speak TLS"},
		"an untrusted broker":           {ssl, []string{"--tls"}, "--tls-ca-file"},
		"no client certificate":         {ssl, []string{"--tls-ca-file", filepath.Join(dir, certs.CACertFile)}, "--tls-cert-file"},
	} {
		_, _, err := runCLI(t, c.addr, "", append([]string{"topic", "list", "--timeout", "3s"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.hint) {
			t.Errorf("%s: %v, want a hint naming %s", name, err, c.hint)
		}
	}
}

// TestClientTLSFromEnvironment: a client certificate exported for the
// broker (SUSHKA_TLS_CERT_FILE is serve's flag too) does not switch a
// client to TLS; --tls, a CA or a certificate flag does.
func TestClientTLSFromEnvironment(t *testing.T) {
	t.Setenv("SUSHKA_TLS_CERT_FILE", "broker.crt")
	t.Setenv("SUSHKA_TLS_KEY_FILE", "broker.key")
	for args, want := range map[string]bool{"": false, "--tls": true, "--tls-ca-file ca.crt": true, "--tls-cert-file c.crt --tls-key-file c.key": true} {
		cf := &clientFlags{}
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		cf.register(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		if got := cf.tls.wanted(); got != want {
			t.Errorf("%q: TLS %v, want %v", args, got, want)
		}
	}
}
