package main

// Shared client plumbing for the CLI helpers (topic, produce, consume):
// the --brokers / --timeout flags, client construction and error messages
// that name Kafka's error code and say what to do about it.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	ksasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sushka-io/sushka/internal/sasl"
)

const defaultBrokers = "127.0.0.1:9092"

// newClientParentCmd returns a command (topic, group) whose subcommands
// share one set of connection flags, registered as persistent flags.
func newClientParentCmd(use, short string, subcommands ...func(*clientFlags) *cobra.Command) *cobra.Command {
	cf := &clientFlags{}
	cmd := &cobra.Command{Use: use, Short: short}
	cf.register(cmd.PersistentFlags())
	for _, newSub := range subcommands {
		cmd.AddCommand(newSub(cf))
	}
	return cmd
}

// clientFlags are the connection flags every client command shares.
type clientFlags struct {
	brokers string
	timeout time.Duration
	tls     clientTLSFlags
	sasl    clientSASLFlags
}

// register adds --brokers/-b and --timeout to fs. The broker list defaults
// to $SUSHKA_BROKERS, then to 127.0.0.1:9092.
func (f *clientFlags) register(fs *pflag.FlagSet) {
	def := os.Getenv("SUSHKA_BROKERS")
	if def == "" {
		def = defaultBrokers
	}
	fs.StringVarP(&f.brokers, "brokers", "b", def,
		"comma-separated seed brokers host:port (env SUSHKA_BROKERS)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second,
		"how long to wait for the broker to answer a request")
	f.tls.register(fs)
	f.sasl.register(fs)
}

// seeds returns the broker list, split and trimmed.
func (f *clientFlags) seeds() []string {
	var out []string
	for _, s := range strings.Split(f.brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newClient returns a franz-go client for the seed brokers with extra
// options appended.
func (f *clientFlags) newClient(extra ...kgo.Opt) (*kgo.Client, error) {
	seeds := f.seeds()
	if len(seeds) == 0 {
		return nil, errors.New("no brokers given: pass --brokers host:port or set SUSHKA_BROKERS")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("sushka-cli"),
		kgo.DialTimeout(min(f.timeout, 5*time.Second)),
	}
	tlsCfg, err := f.tls.config()
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	mech, err := f.sasl.mechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return cl, nil
}

// newAdmin returns an admin client; close the returned kgo client when done.
func (f *clientFlags) newAdmin() (*kadm.Client, *kgo.Client, error) {
	cl, err := f.newClient()
	if err != nil {
		return nil, nil, err
	}
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(f.timeout.Milliseconds()))
	return adm, cl, nil
}

// reqCtx bounds one admin round trip by --timeout.
func (f *clientFlags) reqCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, f.timeout)
}

// adminRequest connects an admin client for one command whose requests
// are bounded together by --timeout; call done when the command ends to
// cancel the context and close the client.
func (f *clientFlags) adminRequest(parent context.Context) (ctx context.Context, adm *kadm.Client, done func(), err error) {
	adm, cl, err := f.newAdmin()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := f.reqCtx(parent)
	return ctx, adm, func() {
		cancel()
		cl.Close()
	}, nil
}

// hints maps Kafka error names to what the user can do about them.
var hints = map[string]string{
	"UNKNOWN_TOPIC_OR_PARTITION":   "check the name with `sushka topic list`, or create it with `sushka topic create NAME`",
	"TOPIC_ALREADY_EXISTS":         "pick another name, or delete the topic first with `sushka topic delete NAME`",
	"INVALID_REPLICATION_FACTOR":   "a single-node Sushka broker accepts -r 1 (or -r -1 for the broker default)",
	"INVALID_PARTITIONS":           "the partition count must be at least 1 (or -1 for the broker default)",
	"INVALID_TOPIC_EXCEPTION":      "topic names use only [a-zA-Z0-9._-], at most 249 characters, and are not \".\" or \"..\"",
	"INVALID_CONFIG":               "check the config name and value; `sushka topic describe NAME` lists the topic's configs",
	"INVALID_REQUEST":              "the broker refused the request as malformed; check the flags",
	"POLICY_VIOLATION":             "the broker's policy refused this request",
	"MESSAGE_TOO_LARGE":            "the record is bigger than the topic's max.message.bytes; raise it with `sushka topic alter-config NAME --set max.message.bytes=N`",
	"RECORD_LIST_TOO_LARGE":        "the batch is too big for the broker; lower --linger or raise max.message.bytes",
	"CORRUPT_MESSAGE":              "the broker rejected a batch whose checksum did not match; retry, and report it if it repeats",
	"NOT_ENOUGH_REPLICAS":          "fewer replicas are in sync than min.insync.replicas; try --acks 1",
	"OFFSET_OUT_OF_RANGE":          "the offset is outside [log start, high watermark]; see them with `sushka topic describe NAME`",
	"UNSUPPORTED_COMPRESSION_TYPE": "the broker does not accept this codec; try --compression none",
	"KAFKA_STORAGE_ERROR":          "the broker could not read or write its data directory; check the broker's log and disk",
	"REQUEST_TIMED_OUT":            "the broker did not finish in time; try a larger --timeout",
	"TOPIC_AUTHORIZATION_FAILED":   "the broker denied access to this topic",
	"UNSUPPORTED_VERSION":          "the broker does not serve this request version",
	"SASL_AUTHENTICATION_FAILED":   "check --sasl-user and --sasl-password (env SUSHKA_SASL_USER, SUSHKA_SASL_PASSWORD); `sushka user list` shows who has credentials",
	"UNSUPPORTED_SASL_MECHANISM":   "the listener does not enable this mechanism: pick another --sasl-mechanism (see the broker's --sasl-enabled-mechanisms)",
	"ILLEGAL_SASL_STATE":           "this listener does not use SASL: drop --sasl-*, or point --brokers at the SASL_PLAINTEXT/SASL_SSL listener",
	"RESOURCE_NOT_FOUND":           "no such user credential: `sushka user list` shows the users and their mechanisms",
	"UNACCEPTABLE_CREDENTIAL":      "SCRAM iterations must be 4096 to 16384, and a user needs a name",
	"DUPLICATE_RESOURCE":           "name each user once per request",
}

// kafkaErrName returns Kafka's error name (e.g. TOPIC_ALREADY_EXISTS) if err
// carries one.
func kafkaErrName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return ""
}

// hintFor returns a hint for err, or "".
func (f *clientFlags) hintFor(err error) string {
	if name := kafkaErrName(err); name != "" {
		return hints[name]
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "x509:"):
		return "the broker's certificate is not trusted here: pass its CA with --tls-ca-file (`sushka tls init` wrote ca.crt)"
	case strings.Contains(msg, "does not look like a TLS handshake"),
		f.tls.wanted() && (strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF")):
		// A PLAINTEXT listener closes on a ClientHello.
		return fmt.Sprintf("%s does not speak TLS: drop --tls, or point --brokers at the SSL/SASL_SSL listener", f.brokers)
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"):
		return "the broker wants a client certificate it trusts: pass --tls-cert-file and --tls-key-file"
	case !f.sasl.wanted() && (strings.Contains(msg, "SASL is required") || strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset")):
		// A SASL listener closes a connection whose first request is
		// not a SASL one.
		return fmt.Sprintf("%s closed the connection: a SASL_PLAINTEXT or SASL_SSL listener needs --sasl-user and --sasl-password", f.brokers)
	case errors.Is(err, syscall.ECONNREFUSED),
		strings.Contains(err.Error(), "connection refused"):
		return fmt.Sprintf("nothing listens on %s: is the broker running? Start one with `sushka serve`, "+
			"or point --brokers / SUSHKA_BROKERS at it", f.brokers)
	case errors.Is(err, context.DeadlineExceeded),
		strings.Contains(err.Error(), "unable to dial"):
		return fmt.Sprintf("no answer from %s within %s: is the broker running? Start one with `sushka serve`, "+
			"or point --brokers / SUSHKA_BROKERS at it (or raise --timeout)", f.brokers, f.timeout)
	}
	return ""
}

// describeErr renders err as "NAME: description (server message)".
func describeErr(err error, serverMsg string) string {
	var ke *kerr.Error
	var s string
	if errors.As(err, &ke) {
		s = ke.Message + ": " + ke.Description
	} else {
		s = err.Error()
	}
	if serverMsg != "" && !strings.Contains(s, serverMsg) {
		s += " (" + serverMsg + ")"
	}
	return s
}

// explain wraps err with Kafka's error name and a hint on what to do.
func (f *clientFlags) explain(what string, err error) error {
	if err == nil {
		return nil
	}
	msg := what + ": " + describeErr(err, "")
	if h := f.hintFor(err); h != "" {
		msg += "\nhint: " + h
	}
	return &cliError{msg: msg, err: err}
}

// cliError is an error already explained for the user.
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// parseKV parses "key=value".
func parseKV(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q is not key=value", s)
	}
	return k, v, nil
}

// clientTLSFlags are the TLS connection flags (SSL and SASL_SSL
// listeners): --tls, the CA to trust and a client certificate.
type clientTLSFlags struct {
	enabled  bool
	caFile   string
	certFile string
	keyFile  string
	fs       *pflag.FlagSet
}

// register adds --tls, --tls-ca-file, --tls-cert-file and --tls-key-file,
// defaulting to $SUSHKA_TLS, $SUSHKA_TLS_CA_FILE, ...
func (f *clientTLSFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	enabled, _ := strconv.ParseBool(os.Getenv("SUSHKA_TLS"))
	fs.BoolVar(&f.enabled, "tls", enabled, "connect with TLS (listeners SSL and SASL_SSL; implied by --tls-ca-file, or a client certificate given as a flag; env SUSHKA_TLS)")
	fs.StringVar(&f.caFile, "tls-ca-file", os.Getenv("SUSHKA_TLS_CA_FILE"), "PEM CA to verify the broker's certificate with (default: the system's; env SUSHKA_TLS_CA_FILE)")
	fs.StringVar(&f.certFile, "tls-cert-file", os.Getenv("SUSHKA_TLS_CERT_FILE"), "PEM client certificate, for listeners that ask for one (env SUSHKA_TLS_CERT_FILE)")
	fs.StringVar(&f.keyFile, "tls-key-file", os.Getenv("SUSHKA_TLS_KEY_FILE"), "PEM private key of --tls-cert-file (env SUSHKA_TLS_KEY_FILE)")
}

// wanted reports whether the flags ask for TLS: --tls, a CA, or a client
// certificate on the command line. A certificate only from the
// environment does not: SUSHKA_TLS_CERT_FILE is also `sushka serve`'s
// broker certificate, and a shell that exported it for the broker must
// still reach a PLAINTEXT listener.
func (f *clientTLSFlags) wanted() bool {
	return f.enabled || f.caFile != "" || f.fs.Changed("tls-cert-file") || f.fs.Changed("tls-key-file")
}

// config is the client's TLS configuration, nil without TLS.
func (f *clientTLSFlags) config() (*tls.Config, error) {
	if !f.wanted() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-file %s holds no PEM certificate", f.caFile)
		}
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// clientSASLFlags are the SASL connection flags (SASL_PLAINTEXT and
// SASL_SSL listeners).
type clientSASLFlags struct {
	mechanismName string
	user          string
	password      string
}

func (f *clientSASLFlags) register(fs *pflag.FlagSet) {
	mech := os.Getenv("SUSHKA_SASL_MECHANISM")
	if mech == "" {
		mech = sasl.NameScramSHA512
	}
	fs.StringVar(&f.mechanismName, "sasl-mechanism", mech, "SASL mechanism with --sasl-user: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (env SUSHKA_SASL_MECHANISM)")
	fs.StringVar(&f.user, "sasl-user", os.Getenv("SUSHKA_SASL_USER"), "authenticate with SASL as this user (listeners SASL_PLAINTEXT and SASL_SSL; env SUSHKA_SASL_USER)")
	fs.StringVar(&f.password, "sasl-password", os.Getenv("SUSHKA_SASL_PASSWORD"), "password of --sasl-user (env SUSHKA_SASL_PASSWORD, which keeps it out of the process list)")
}

// wanted reports whether the flags ask for SASL.
func (f *clientSASLFlags) wanted() bool { return f.user != "" }

// mechanism is the client's SASL mechanism, nil without --sasl-user.
func (f *clientSASLFlags) mechanism() (ksasl.Mechanism, error) {
	if !f.wanted() {
		return nil, nil
	}
	switch strings.ToUpper(f.mechanismName) {
	case sasl.NamePlain:
		return plain.Auth{User: f.user, Pass: f.password}.AsMechanism(), nil
	case sasl.NameScramSHA256:
		return scram.Auth{User: f.user, Pass: f.password}.AsSha256Mechanism(), nil
	case sasl.NameScramSHA512:
		return scram.Auth{User: f.user, Pass: f.password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("--sasl-mechanism %q: want SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN", f.mechanismName)
}
