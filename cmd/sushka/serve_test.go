package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// TestAdminListenLoopbackOnly: a non-loopback admin address is refused
// unless explicitly allowed.
func TestAdminListenLoopbackOnly(t *testing.T) {
	for addr, wantRemote := range map[string]bool{
		"127.0.0.1:9644": false, "[::1]:9644": false, "localhost:9644": false, "127.0.0.2:0": false,
		"0.0.0.0:9644": true, ":9644": true, "10.1.2.3:9644": true, "[::]:9644": true,
	} {
		remote, err := checkAdminListen(addr, false)
		if remote != wantRemote || (err != nil) != wantRemote {
			t.Errorf("checkAdminListen(%q, false) = %v, %v", addr, remote, err)
		}
		if remote, err := checkAdminListen(addr, true); remote != wantRemote || err != nil {
			t.Errorf("checkAdminListen(%q, true) = %v, %v", addr, remote, err)
		}
	}
	if remote, err := checkAdminListen("", false); remote || err != nil {
		t.Errorf("disabled admin listener: %v, %v", remote, err)
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
