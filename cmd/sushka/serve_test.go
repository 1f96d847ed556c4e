package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sushka-io/sushka/internal/certs"
)

// TestHostileAdminPprofOnlyWithFlag: an unauthenticated client of the
// admin port gets no profiles unless --admin-pprof was given.
func TestHostileAdminPprofOnlyWithFlag(t *testing.T) {
	for _, withPprof := range []bool{false, true} {
		srv := httptest.NewServer(adminMux(nil, prometheus.NewRegistry(), "", "", withPprof))
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusNotFound
			if withPprof {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("pprof %v: GET %s = %d, want %d", withPprof, path, resp.StatusCode, want)
			}
		}
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz = %d", resp.StatusCode)
		}
		srv.Close()
	}
}

// TestAdminListenRemoteNeedsAuthentication: the admin listener is open on
// loopback; on any other address it refuses to start without a token or
// client certificates (--admin-allow-remote is no longer enough).
func TestAdminListenRemoteNeedsAuthentication(t *testing.T) {
	for addr, wantRemote := range map[string]bool{
		"127.0.0.1:9644": false, "[::1]:9644": false, "localhost:9644": false, "127.0.0.2:0": false,
		"0.0.0.0:9644": true, ":9644": true, "10.1.2.3:9644": true, "[::]:9644": true,
	} {
		remote, _, err := checkAdminListen(serveFlags{adminListen: addr, adminAllowRemote: true})
		if remote != wantRemote || (err != nil) != wantRemote {
			t.Errorf("checkAdminListen(%q) without authentication = %v, %v", addr, remote, err)
		}
		remote, auth, err := checkAdminListen(serveFlags{adminListen: addr, adminToken: "s3cret"})
		if remote != wantRemote || err != nil || auth.token != "s3cret" {
			t.Errorf("checkAdminListen(%q) with a token = %v, %+v, %v", addr, remote, auth, err)
		}
	}
	if remote, _, err := checkAdminListen(serveFlags{}); remote || err != nil {
		t.Errorf("disabled admin listener: %v, %v", remote, err)
	}
	if _, _, err := checkAdminListen(serveFlags{adminListen: "0.0.0.0:0", adminClientCAFile: "ca.crt"}); err == nil {
		t.Error("admin client certificates without the broker's certificate accepted")
	}
}

// TestAdminTokenAndClientCertificates: with a token every admin request
// needs it; with a client CA the admin listener is HTTPS and needs a
// client certificate of that CA.
func TestAdminTokenAndClientCertificates(t *testing.T) {
	dir := t.TempDir()
	set, err := certs.NewSet("example", []string{"127.0.0.1"}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteSet(dir, set); err != nil {
		t.Fatal(err)
	}
	_, auth, err := checkAdminListen(serveFlags{adminListen: "0.0.0.0:0", adminToken: "s3cret",
		tlsCertFile: filepath.Join(dir, certs.ServerCertFile), tlsKeyFile: filepath.Join(dir, certs.ServerKeyFile),
		adminClientCAFile: filepath.Join(dir, certs.CACertFile)})
	if err != nil || !auth.clientCerts || auth.tls == nil {
		t.Fatalf("auth %+v, %v", auth, err)
	}
	srv := httptest.NewUnstartedServer(auth.wrap(adminMux(nil, prometheus.NewRegistry(), "", "", false)))
	srv.TLS = auth.tls
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(set.CA.Cert)
	get := func(withCert bool, header string) (int, error) {
		cfg := &tls.Config{RootCAs: pool}
		if withCert {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{set.Client.Cert.Raw}, PrivateKey: set.Client.Key}}
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		req, _ := http.NewRequest("GET", srv.URL+"/healthz", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(true, "Bearer s3cret"); err != nil || code != http.StatusOK {
		t.Fatalf("certificate and token: %d, %v", code, err)
	}
	if code, err := get(true, "Bearer wrong"); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("certificate and a wrong token: %d, %v", code, err)
	}
	if code, err := get(true, ""); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("certificate without a token: %d, %v", code, err)
	}
	if code, err := get(false, "Bearer s3cret"); err == nil {
		t.Fatalf("no client certificate: served %d", code)
	}
}

// TestServeAuthorizerFlags: --super-users takes Kafka's super.users form
// and refuses a principal that is not Type:name before anything starts;
// the banner line says what is in force.
func TestServeAuthorizerFlags(t *testing.T) {
	cmd := newServeCmd()
	cmd.SetArgs([]string{"--authorizer", "--super-users", "User:admin;alice", "--data-dir", t.TempDir()})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `"alice" is not of the form Type:name`) {
		t.Fatalf("--super-users with a bare name: %v", err)
	}
	if got := superUsers(" User:admin ; User:ops;"); len(got) != 2 || got[0] != "User:admin" || got[1] != "User:ops" {
		t.Errorf("superUsers: %q", got)
	}
	on := authorizationDesc(serveFlags{authorizer: true, superUsers: "User:admin"})
	if !strings.Contains(on, "without ACLs: denied") || !strings.Contains(on, "User:admin") {
		t.Errorf("banner with the authorizer: %q", on)
	}
	if off := authorizationDesc(serveFlags{}); !strings.HasPrefix(off, "off") {
		t.Errorf("banner without it: %q", off)
	}
}

// TestServeRecoveryThreadsFlag: --recovery-threads (and its environment
// variable) must be at least 1.
func TestServeRecoveryThreadsFlag(t *testing.T) {
	for _, args := range [][]string{{"--recovery-threads", "0"}, {"--recovery-threads=-3"}} {
		cmd := newServeCmd()
		cmd.SetArgs(append(args, "--data-dir", t.TempDir()))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--recovery-threads") {
			t.Fatalf("serve %v: %v, want a refusal naming --recovery-threads", args, err)
		}
	}
}

// TestServeEarlyWritebackFlag: --early-writeback-bytes (and its environment
// variable) must be at least 0.
func TestServeEarlyWritebackFlag(t *testing.T) {
	for _, tc := range []struct{ args, env []string }{
		{args: []string{"--early-writeback-bytes=-1"}},
		{env: []string{"SUSHKA_EARLY_WRITEBACK_BYTES", "-4096"}},
	} {
		if tc.env != nil {
			t.Setenv(tc.env[0], tc.env[1])
		}
		cmd := newServeCmd()
		cmd.SetArgs(append(tc.args, "--data-dir", t.TempDir()))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--early-writeback-bytes") {
			t.Fatalf("serve %v %v: %v, want a refusal naming --early-writeback-bytes", tc.args, tc.env, err)
		}
	}
}
