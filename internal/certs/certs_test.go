package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
)

// TestSetVerifiesAndLoads: the server certificate verifies for each of its
// hosts (names and addresses) and only for server auth, the client
// certificate for client auth, both under the CA; the files load as TLS
// key pairs, keys mode 0600, and a second WriteSet overwrites nothing.
func TestSetVerifiesAndLoads(t *testing.T) {
	set, err := NewSet("example", []string{"broker.test", "127.0.0.1", "::1"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(set.CA.Cert)
	for _, host := range []string{"broker.test", "127.0.0.1", "::1"} {
		if _, err := set.Server.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := set.Server.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.test"}); err == nil {
		t.Error("server certificate verifies for a host it does not name")
	}
	if _, err := set.Client.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := set.Server.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the server certificate verifies as a client's")
	}
	if got := set.Client.Cert.Subject.String(); got != "CN=alice,O=example" {
		t.Errorf("client subject %q", got)
	}

	dir := filepath.Join(t.TempDir(), "tls")
	if err := WriteSet(dir, set); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{CACertFile, CAKeyFile}, {ServerCertFile, ServerKeyFile}, {ClientCertFile, ClientKeyFile}} {
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, pair[0]), filepath.Join(dir, pair[1])); err != nil {
			t.Errorf("%s: %v", pair[0], err)
		}
		fi, err := os.Stat(filepath.Join(dir, pair[1]))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", pair[1], fi.Mode().Perm(), err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	other, _ := NewSet("example", []string{"localhost"}, "bob")
	if err := WriteSet(dir, other); err == nil {
		t.Fatal("WriteSet over an existing set succeeded")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); string(after) != string(before) {
		t.Fatal("the CA key was overwritten")
	}
}

// TestPeerCertificate: a peer (node) certificate verifies for both server
// and client auth, with its hosts; a server certificate only for the first.
func TestPeerCertificate(t *testing.T) {
	ca, err := NewCA(pkix.Name{CommonName: "peers"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	node, err := Issue(ca, Options{Subject: pkix.Name{CommonName: "node-1"}, Hosts: []string{"127.0.0.1"}, Peer: true})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := node.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("peer certificate for usage %v: %v", usage, err)
		}
	}
	srv, err := Issue(ca, Options{Subject: pkix.Name{CommonName: "node-2"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a server certificate verifies for client auth")
	}
}
