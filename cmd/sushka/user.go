package main

// sushka user: SCRAM users (create, list, delete) over kadm's
// AlterUserScramCredentials / DescribeUserScramCredentials. The password
// is salted and iterated here (kadm) and only the salted password travels;
// the broker keeps StoredKey and ServerKey (internal/sasl).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sushka-io/sushka/internal/sasl"
)

func init() { rootCmd.AddCommand(newUserCmd()) }

func newUserCmd() *cobra.Command {
	return newClientParentCmd("user", "Create, list and delete SCRAM users (SASL credentials)",
		newUserCreateCmd,
		newUserListCmd,
		newUserDeleteCmd,
	)
}

// scramMechanisms parses --mechanism: one SCRAM mechanism or "both".
func scramMechanisms(s string) ([]kadm.ScramMechanism, error) {
	if strings.EqualFold(s, "both") {
		return []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512}, nil
	}
	m, err := sasl.ParseMechanism(s)
	if err != nil {
		return nil, fmt.Errorf("--mechanism %q: want SCRAM-SHA-256, SCRAM-SHA-512 or both", s)
	}
	return []kadm.ScramMechanism{kadm.ScramMechanism(m)}, nil
}

func newUserCreateCmd(cf *clientFlags) *cobra.Command {
	var (
		password      string
		passwordStdin bool
		mechanism     string
		iterations    int32
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a SCRAM user, or set its password",
		Long: `Create a SCRAM user, or set its password (one credential per mechanism; both by default).
The password is salted and iterated by this command: the broker never sees it, and
stores only what SCRAM needs to verify it (PLAIN is verified against the same credential).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			mechs, err := scramMechanisms(mechanism)
			if err != nil {
				return err
			}
			switch {
			case passwordStdin && password != "":
				return errors.New("give --password or --password-stdin, not both")
			case passwordStdin:
				if password, err = readPasswordLine(cmd.InOrStdin()); err != nil {
					return err
				}
			case password == "":
				return errors.New("give the password with --password-stdin (or --password P, which other users of this host can see)")
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			// One request per mechanism: Kafka refuses a user named twice
			// in one request (DUPLICATE_RESOURCE).
			for _, m := range mechs {
				res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: name, Mechanism: m, Iterations: iterations, Password: password}})
				if err == nil {
					err = res.Error()
				}
				if err != nil {
					return cf.explain(fmt.Sprintf("create user %s (%s)", name, m), withServerMessage(err, res[name].ErrMessage))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "user %s: %s credential set (%d iterations)\n", name, m, iterations)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&password, "password", "", "the password (visible in the process list: prefer --password-stdin)")
	fl.BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of standard input")
	fl.StringVar(&mechanism, "mechanism", "both", "SCRAM-SHA-256, SCRAM-SHA-512 or both")
	fl.Int32Var(&iterations, "iterations", sasl.DefaultIterations, fmt.Sprintf("SCRAM iterations (%d to %d)", sasl.MinIterations, sasl.MaxIterations))
	return cmd
}

// readPasswordLine reads one line (without its line end) from r.
func readPasswordLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", fmt.Errorf("reading the password from standard input: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("the password read from standard input is empty")
	}
	return line, nil
}

// withServerMessage adds the broker's error message to err.
func withServerMessage(err error, msg string) error {
	if msg == "" || strings.Contains(err.Error(), msg) {
		return err
	}
	return fmt.Errorf("%w (%s)", err, msg)
}

func newUserListCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the SCRAM users with their mechanisms and iterations",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			users, err := adm.DescribeUserSCRAMs(ctx)
			if err == nil {
				err = users.Error()
			}
			if err != nil {
				return cf.explain("list users", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "USER\tMECHANISMS")
			for _, u := range users.Sorted() {
				var ms []string
				for _, c := range u.CredInfos {
					ms = append(ms, fmt.Sprintf("%s (%d iterations)", c.Mechanism, c.Iterations))
				}
				fmt.Fprintf(tw, "%s\t%s\n", u.User, strings.Join(ms, ", "))
			}
			return tw.Flush()
		},
	}
}

func newUserDeleteCmd(cf *clientFlags) *cobra.Command {
	var mechanism string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a SCRAM user's credentials (every mechanism it has, by default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			mechs, err := scramMechanisms(mechanism)
			if err != nil {
				return err
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if strings.EqualFold(mechanism, "both") {
				// Only the mechanisms the user has.
				users, err := adm.DescribeUserSCRAMs(ctx, name)
				if err == nil {
					err = users.Error()
				}
				if err != nil {
					return cf.explain("delete user "+name, withServerMessage(err, users[name].ErrMessage))
				}
				mechs = mechs[:0]
				for _, c := range users[name].CredInfos {
					mechs = append(mechs, c.Mechanism)
				}
			}
			for _, m := range mechs {
				res, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: name, Mechanism: m}}, nil)
				if err == nil {
					err = res.Error()
				}
				if err != nil {
					return cf.explain(fmt.Sprintf("delete user %s (%s)", name, m), withServerMessage(err, res[name].ErrMessage))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "user %s: %s credential deleted\n", name, m)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mechanism, "mechanism", "both", "SCRAM-SHA-256, SCRAM-SHA-512 or both")
	return cmd
}
