package main

// The Kafka listeners of `sushka serve` (--listeners, --advertised-listeners,
// --listener-security-protocol-map: Kafka's listeners model), their TLS
// (--tls-*), and the admin listener's authentication (--admin-token,
// --admin-tls-client-ca-file).

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/internal/server"
)

// listenerSpec is one Kafka listener as the flags give it.
type listenerSpec struct {
	name       string // Kafka's listener name, upper case
	protocol   server.SecurityProtocol
	addr       string // host:port to listen on
	advertised string // host:port to advertise; "" for the listen address
}

// parseEndpoints parses Kafka's NAME://host:port,... list (listeners,
// advertised.listeners); names are upper-cased, as Kafka normalises them.
func parseEndpoints(flag, list string) ([][2]string, error) {
	var out [][2]string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "://")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s %q: want NAME://host:port, such as SASL_SSL://0.0.0.0:9093", flag, item)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, item, err)
		}
		name = strings.ToUpper(name)
		for _, prev := range out {
			if prev[0] == name {
				return nil, fmt.Errorf("%s: listener name %s given twice", flag, name)
			}
		}
		out = append(out, [2]string{name, addr})
	}
	return out, nil
}

// parseListeners reads the listener flags. Without --listeners the broker
// has one PLAINTEXT listener on --listen advertised at --advertised-addr
// (the shorthand and default). A listener's protocol is its name's entry
// in the protocol map, or its name when that is a protocol's name
// (Kafka's default map); --advertised-listeners may name any of them.
func parseListeners(f serveFlags) ([]listenerSpec, error) {
	protocols := map[string]server.SecurityProtocol{}
	for _, item := range strings.Split(f.listenerProtocolMap, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, proto, ok := strings.Cut(item, ":")
		p, err := server.ParseSecurityProtocol(proto)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("--listener-security-protocol-map %q: want NAME:PROTOCOL, such as EXTERNAL:SASL_SSL (%v)", item, err)
		}
		protocols[strings.ToUpper(name)] = p
	}
	var specs []listenerSpec
	if f.listeners == "" {
		specs = []listenerSpec{{name: server.Plaintext.String(), protocol: server.Plaintext, addr: f.listen, advertised: f.advertisedAddr}}
	} else {
		if f.listenGiven {
			return nil, errors.New("--listen and --listeners are both given: --listen is the shorthand for --listeners PLAINTEXT://HOST:PORT; use one")
		}
		if f.advertisedAddr != "" {
			return nil, errors.New("--advertised-addr goes with --listen; with --listeners use --advertised-listeners NAME://host:port")
		}
		eps, err := parseEndpoints("--listeners", f.listeners)
		if err != nil {
			return nil, err
		}
		for _, ep := range eps {
			p, ok := protocols[ep[0]]
			if !ok {
				if p, err = server.ParseSecurityProtocol(ep[0]); err != nil {
					return nil, fmt.Errorf("--listeners: listener %s has no security protocol: name it PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, or map it with --listener-security-protocol-map %s:SASL_SSL", ep[0], ep[0])
				}
			}
			specs = append(specs, listenerSpec{name: ep[0], protocol: p, addr: ep[1]})
		}
	}
	if len(specs) == 0 {
		return nil, errors.New("--listeners is empty")
	}
	adv, err := parseEndpoints("--advertised-listeners", f.advertisedListeners)
	if err != nil {
		return nil, err
	}
	for _, ep := range adv {
		i := -1
		for j := range specs {
			if specs[j].name == ep[0] {
				i = j
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("--advertised-listeners names %s, which is not in --listeners", ep[0])
		}
		specs[i].advertised = ep[1]
	}
	return specs, nil
}

// listenerTLS is the TLS configuration the TLS listeners share, from the
// --tls-* flags (nil when no listener needs it).
func listenerTLS(f serveFlags, specs []listenerSpec, log *slog.Logger) (*tls.Config, error) {
	needed := false
	for _, s := range specs {
		needed = needed || s.protocol.TLS()
	}
	if !needed {
		return nil, nil
	}
	if f.tlsCertFile == "" || f.tlsKeyFile == "" {
		return nil, errors.New("an SSL or SASL_SSL listener needs --tls-cert-file and --tls-key-file (PEM; `sushka tls init --dir DIR` makes a CA and a broker certificate)")
	}
	auth, err := server.ParseClientAuth(f.tlsClientAuth)
	if err != nil {
		return nil, fmt.Errorf("--tls-client-auth: %w", err)
	}
	if auth != server.ClientAuthNone && f.tlsClientCAFile == "" {
		return nil, fmt.Errorf("--tls-client-auth %s needs --tls-client-ca-file (the CA client certificates are verified against)", auth)
	}
	cfg, err := server.NewTLSConfig(server.TLSFiles{CertFile: f.tlsCertFile, KeyFile: f.tlsKeyFile, ClientCAFile: f.tlsClientCAFile, ClientAuth: auth}, log)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	return cfg, nil
}

// listen opens every listener's socket (closing those opened if one
// fails) and returns the broker's listeners: advertised as given, or at the
// host's name when listening on every interface without one, as Kafka
// does.
func listen(specs []listenerSpec, tlsCfg *tls.Config) ([]net.Listener, []broker.Listener, error) {
	var ls []net.Listener
	var bls []broker.Listener
	fail := func(err error) ([]net.Listener, []broker.Listener, error) {
		for _, l := range ls {
			l.Close()
		}
		return nil, nil, err
	}
	for _, s := range specs {
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fail(fmt.Errorf("listener %s on %s: %w (is another broker running? choose another address)", s.name, s.addr, err))
		}
		ls = append(ls, l)
		adv := s.advertised
		if host, _, _ := net.SplitHostPort(l.Addr().String()); adv == "" && net.ParseIP(host).IsUnspecified() {
			name, herr := os.Hostname()
			if herr != nil {
				return fail(fmt.Errorf("listener %s on %s listens on every interface and the host name is unknown (%v): advertise an address (--advertised-listeners, or --advertised-addr with --listen)", s.name, s.addr, herr))
			}
			adv = net.JoinHostPort(name, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
		}
		bl := broker.Listener{Name: s.name, Protocol: s.protocol, Advertised: adv}
		if s.protocol.TLS() {
			bl.TLS = tlsCfg
		}
		bls = append(bls, bl)
	}
	return ls, bls, nil
}

// listenerBanner is the banner's lines of the listeners.
func listenerBanner(b *broker.Broker, f serveFlags) string {
	var sb strings.Builder
	for _, ln := range b.Listeners() {
		name := ln.Name
		if name != ln.Protocol.String() {
			name += " (" + ln.Protocol.String() + ")"
		}
		// The address first: tools read it from "kafka listener ADDR".
		fmt.Fprintf(&sb, "  kafka listener   %s %s (advertised %s)", ln.Addr, name, ln.Advertised)
		if ln.Protocol.TLS() {
			fmt.Fprintf(&sb, ", TLS 1.2+ with %s, client certificates %s", f.tlsCertFile, f.tlsClientAuth)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// isLoopback reports whether the host of host:port addr is loopback only.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// adminAuth is how the admin HTTP listener authenticates its clients.
type adminAuth struct {
	token string      // a bearer token every request must carry ("": none)
	tls   *tls.Config // HTTPS (nil: plain HTTP)
	// clientCerts: tls requires client certificates of the admin CA.
	clientCerts bool
}

// checkAdminListen decides the admin listener's authentication. On
// loopback it is open unless a token or client CA is given; on any other
// address it needs one of them (metrics, runtime details and, with
// --admin-pprof, profiles must not be open to the network), and refuses
// to start without. It returns whether the address is remote.
func checkAdminListen(f serveFlags) (remote bool, auth adminAuth, err error) {
	if f.adminListen == "" {
		return false, auth, nil
	}
	local, err := isLoopback(f.adminListen)
	if err != nil {
		return false, auth, fmt.Errorf("--admin-listen %q: %w", f.adminListen, err)
	}
	auth.token = f.adminToken
	if f.adminClientCAFile != "" {
		if f.tlsCertFile == "" || f.tlsKeyFile == "" {
			return !local, auth, errors.New("--admin-tls-client-ca-file serves the admin listener over TLS with the broker's certificate: give --tls-cert-file and --tls-key-file too")
		}
		auth.tls, err = server.NewTLSConfig(server.TLSFiles{CertFile: f.tlsCertFile, KeyFile: f.tlsKeyFile,
			ClientCAFile: f.adminClientCAFile, ClientAuth: server.ClientAuthRequired}, nil)
		if err != nil {
			return !local, auth, fmt.Errorf("--admin-tls-client-ca-file: %w", err)
		}
		auth.clientCerts = true
	}
	if !local && auth.token != "" && auth.tls == nil && f.tlsCertFile != "" && f.tlsKeyFile != "" {
		// The token must not cross the network in clear when there is a
		// certificate to serve TLS with.
		if auth.tls, err = server.NewTLSConfig(server.TLSFiles{CertFile: f.tlsCertFile, KeyFile: f.tlsKeyFile}, nil); err != nil {
			return true, auth, fmt.Errorf("admin listener TLS: %w", err)
		}
	}
	if !local && auth.token == "" && auth.tls == nil {
		return true, auth, fmt.Errorf("--admin-listen %s is not a loopback address: the admin port must then authenticate its clients; "+
			"give --admin-token TOKEN (SUSHKA_ADMIN_TOKEN; clients send Authorization: Bearer TOKEN) or --admin-tls-client-ca-file CA.crt (mutual TLS), or listen on 127.0.0.1:PORT", f.adminListen)
	}
	return !local, auth, nil
}

// wrap puts the token check in front of h.
func (a adminAuth) wrap(h http.Handler) http.Handler {
	if a.token == "" {
		return h
	}
	want := []byte("Bearer " + a.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sushka admin"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <--admin-token>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// describe is the admin listener's authentication for the banner.
func (a adminAuth) describe() string {
	switch {
	case a.token != "" && a.clientCerts:
		return "HTTPS, bearer token and client certificates"
	case a.clientCerts:
		return "HTTPS, client certificates"
	case a.token != "" && a.tls != nil:
		return "HTTPS, bearer token"
	case a.token != "":
		return "bearer token (plain HTTP: give --tls-cert-file/--tls-key-file to serve HTTPS)"
	}
	return "no authentication"
}
