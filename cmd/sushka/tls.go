package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sushka-io/sushka/internal/certs"
)

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tls", Short: "Certificates for TLS listeners (SSL, SASL_SSL)"}
	cmd.AddCommand(newTLSInitCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newTLSCmd()) }

func newTLSInitCmd() *cobra.Command {
	var (
		dir        string
		hosts      []string
		clientName string
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a self-signed CA, a broker certificate and a client certificate",
		Long: `Writes into --dir a self-signed CA (ca.crt, ca.key), a broker certificate for
the --host names and addresses (broker.crt, broker.key) and a client
certificate (client.crt, client.key), all ECDSA P-256; keys are mode 0600.
Existing files are never overwritten. Then prints the flags to serve TLS with
and a client command that connects.

For a quick start and tests: in production use your own CA's certificates
(--tls-cert-file/--tls-key-file are reloaded when renewed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(hosts) == 0 {
				hosts = defaultCertHosts()
			}
			set, err := certs.CreateSet(dir, "Sushka", hosts, clientName)
			if err != nil {
				return err
			}
			abs, _ := filepath.Abs(dir)
			printTLSInit(cmd.OutOrStdout(), abs, hosts, set.Client.Cert.Subject.String())
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./sushka-tls", "directory to write the certificates and keys into")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "host name or IP address clients connect to, repeatable (default localhost, 127.0.0.1, ::1 and this host's name)")
	cmd.Flags().StringVar(&clientName, "client-name", "client", "common name of the client certificate (its principal on an SSL listener: User:CN=NAME,O=Sushka)")
	return cmd
}

// defaultCertHosts are the names a broker on this machine is reached by.
func defaultCertHosts() []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if name, err := os.Hostname(); err == nil && name != "" && !slices.Contains(hosts, name) {
		hosts = append(hosts, name)
	}
	return hosts
}

func printTLSInit(w io.Writer, dir string, hosts []string, clientSubject string) {
	p := func(name string) string { return filepath.Join(dir, name) }
	fmt.Fprintf(w, `wrote %s: %s, %s (CA); %s, %s (broker: %v); %s, %s (client: %s)

Serve TLS (SASL_SSL needs a first user: --bootstrap-user admin:PASSWORD):
  sushka serve --listeners SASL_SSL://127.0.0.1:9093 \
    --tls-cert-file %s --tls-key-file %s \
    --bootstrap-user admin:change-me

or SSL with client certificates (the principal is the certificate's subject):
  sushka serve --listeners SSL://127.0.0.1:9093 \
    --tls-cert-file %s --tls-key-file %s \
    --tls-client-auth required --tls-client-ca-file %s

Connect:
  sushka topic list -b 127.0.0.1:9093 --tls-ca-file %s \
    --tls-cert-file %s --tls-key-file %s
  kcat -b 127.0.0.1:9093 -X security.protocol=ssl -X ssl.ca.location=%s \
    -X ssl.certificate.location=%s -X ssl.key.location=%s -L
`, dir, certs.CACertFile, certs.CAKeyFile, certs.ServerCertFile, certs.ServerKeyFile, hosts, certs.ClientCertFile, certs.ClientKeyFile, clientSubject,
		p(certs.ServerCertFile), p(certs.ServerKeyFile),
		p(certs.ServerCertFile), p(certs.ServerKeyFile), p(certs.CACertFile),
		p(certs.CACertFile), p(certs.ClientCertFile), p(certs.ClientKeyFile),
		p(certs.CACertFile), p(certs.ClientCertFile), p(certs.ClientKeyFile))
}
