// Package certs makes the certificates of a quick start (`sushka tls
// init`) and of tests: a self-signed CA and certificates it signs for
// servers (host names and IP addresses) and clients (a subject), all
// ECDSA P-256, in PEM.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Pair is a certificate and its private key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CertPEM is the certificate in PEM.
func (p Pair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw})
}

// KeyPEM is the private key in PEM (PKCS #8).
func (p Pair) KeyPEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(p.Key)
	if err != nil {
		panic(err) // an ECDSA P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Write writes the certificate to certFile (mode 0644) and the key to
// keyFile (mode 0600), refusing to overwrite either.
func (p Pair) Write(certFile, keyFile string) error {
	if err := writeNew(certFile, p.CertPEM(), 0o644); err != nil {
		return err
	}
	return writeNew(keyFile, p.KeyPEM(), 0o600)
}

func writeNew(name string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists already: remove it or choose another directory", name)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Options of a certificate; zero values mean the defaults.
type Options struct {
	// Subject of the certificate; CommonName is its usual part.
	Subject pkix.Name
	// Hosts are the DNS names and IP addresses of a server certificate
	// (none: a client certificate).
	Hosts []string
	// Validity, from an hour ago (clock skew). Default: a year for
	// certificates, ten years for a CA.
	Validity time.Duration
	// Peer makes a node certificate of a cluster's peer link, valid for
	// both server and client auth (a node accepts its peers' connections
	// and dials its own, with the same certificate: CockroachDB's node
	// certificates, etcd's peer certificates).
	Peer bool
}

// NewCA makes a self-signed CA.
func NewCA(subject pkix.Name, validity time.Duration) (Pair, error) {
	if validity <= 0 {
		validity = 10 * 365 * 24 * time.Hour
	}
	tmpl := template(subject, validity)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	return sign(tmpl, nil)
}

// Issue makes a certificate signed by ca: for a server (ServerAuth, with
// opts.Hosts as its subject alternative names) when opts has hosts, else
// for a client (ClientAuth); for both when opts.Peer is set.
func Issue(ca Pair, opts Options) (Pair, error) {
	if opts.Validity <= 0 {
		opts.Validity = 365 * 24 * time.Hour
	}
	tmpl := template(opts.Subject, opts.Validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	switch {
	case opts.Peer:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case len(opts.Hosts) > 0:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, h := range opts.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(tmpl, &ca)
}

func template(subject pkix.Name, validity time.Duration) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
	}
}

// sign makes a key for tmpl and signs it with parent (nil: self-signed).
func sign(tmpl *x509.Certificate, parent *Pair) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	issuer, issuerKey := tmpl, key
	if parent != nil {
		issuer, issuerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, issuerKey)
	if err != nil {
		return Pair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: cert, Key: key}, nil
}

// Set is what a quick start needs: a CA, a server certificate and a client
// certificate, written to a directory by WriteSet.
type Set struct {
	CA, Server, Client Pair
}

// The file names of a Set in its directory.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "broker.crt"
	ServerKeyFile  = "broker.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)

// NewSet makes a CA, a server certificate for hosts and a client
// certificate with the subject CN=client (O=org when org is set).
func NewSet(org string, hosts []string, clientName string) (Set, error) {
	name := func(cn string) pkix.Name {
		n := pkix.Name{CommonName: cn}
		if org != "" {
			n.Organization = []string{org}
		}
		return n
	}
	ca, err := NewCA(name("Sushka CA"), 0)
	if err != nil {
		return Set{}, err
	}
	srv, err := Issue(ca, Options{Subject: name(hosts[0]), Hosts: hosts})
	if err != nil {
		return Set{}, err
	}
	cl, err := Issue(ca, Options{Subject: name(clientName)})
	if err != nil {
		return Set{}, err
	}
	return Set{CA: ca, Server: srv, Client: cl}, nil
}

// CreateSet makes a set (NewSet) and writes it into dir (WriteSet).
func CreateSet(dir, org string, hosts []string, clientName string) (Set, error) {
	s, err := NewSet(org, hosts, clientName)
	if err != nil {
		return Set{}, err
	}
	return s, WriteSet(dir, s)
}

// WriteSet writes s into dir (created 0700 if missing), never overwriting
// a file.
func WriteSet(dir string, s Set) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range [][2]string{{CACertFile, CAKeyFile}, {ServerCertFile, ServerKeyFile}, {ClientCertFile, ClientKeyFile}} {
		if _, err := os.Stat(filepath.Join(dir, f[0])); err == nil {
			return fmt.Errorf("%s exists already: remove the old files or choose another --dir", filepath.Join(dir, f[0]))
		}
	}
	for _, w := range []struct {
		p     Pair
		files [2]string
	}{{s.CA, [2]string{CACertFile, CAKeyFile}}, {s.Server, [2]string{ServerCertFile, ServerKeyFile}}, {s.Client, [2]string{ClientCertFile, ClientKeyFile}}} {
		if err := w.p.Write(filepath.Join(dir, w.files[0]), filepath.Join(dir, w.files[1])); err != nil {
			return err
		}
	}
	return nil
}
