package main

// sushka quota: client quotas (DescribeClientQuotas, AlterClientQuotas), in
// the manner of kafka-configs.sh --entity-type users/clients: an entity is
// a user, a client id, or both, each by name or its <default>.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { rootCmd.AddCommand(newQuotaCmd()) }

func newQuotaCmd() *cobra.Command {
	return newClientParentCmd("quota", "Set and show client quotas (producer_byte_rate, consumer_byte_rate, request_percentage) per user and client id",
		newQuotaAlterCmd,
		newQuotaDescribeCmd,
	)
}

// quotaEntityFlags name a quota entity: a user and/or a client id, each by
// name or the default.
type quotaEntityFlags struct {
	user, clientID               string
	userDefault, clientIDDefault bool
}

func (e *quotaEntityFlags) register(cmd *cobra.Command, verb string) {
	cmd.Flags().StringVar(&e.user, "user", "", verb+" the quotas of this user (the principal's name; ANONYMOUS without SASL)")
	cmd.Flags().StringVar(&e.clientID, "client-id", "", verb+" the quotas of this client id")
	cmd.Flags().BoolVar(&e.userDefault, "user-default", false, verb+" the default quotas of users (<default>)")
	cmd.Flags().BoolVar(&e.clientIDDefault, "client-id-default", false, verb+" the default quotas of client ids (<default>)")
	cmd.MarkFlagsMutuallyExclusive("user", "user-default")
	cmd.MarkFlagsMutuallyExclusive("client-id", "client-id-default")
}

func (e *quotaEntityFlags) hasUser() bool   { return e.user != "" || e.userDefault }
func (e *quotaEntityFlags) hasClient() bool { return e.clientID != "" || e.clientIDDefault }

// entity is the named entity (nil components are left out).
func (e *quotaEntityFlags) entity() kadm.ClientQuotaEntity {
	var out kadm.ClientQuotaEntity
	if e.hasUser() {
		c := kadm.ClientQuotaEntityComponent{Type: "user"}
		if !e.userDefault {
			c.Name = &e.user
		}
		out = append(out, c)
	}
	if e.hasClient() {
		c := kadm.ClientQuotaEntityComponent{Type: "client-id"}
		if !e.clientIDDefault {
			c.Name = &e.clientID
		}
		out = append(out, c)
	}
	return out
}

func newQuotaAlterCmd(cf *clientFlags) *cobra.Command {
	var ent quotaEntityFlags
	var add, del []string
	var validateOnly bool
	cmd := &cobra.Command{
		Use:   "alter (--user U | --user-default) and/or (--client-id C | --client-id-default) [--add KEY=VALUE,...] [--delete KEY,...]",
		Short: "Set or remove quotas of a user, a client id, or a user's client id (as kafka-configs.sh --alter)",
		Long: `Set (--add) or remove (--delete) quotas of one entity. Keys (Kafka's):
  producer_byte_rate   bytes per second a producer may send
  consumer_byte_rate   bytes per second a consumer may fetch
  request_percentage   percent of one request handler's time (100 = one handler busy all the time)
A client over its quota is throttled (throttle_time_ms, and its connection muted), never refused.
Precedence as Kafka's: user and client id, user and <default> client id, user, <default> user and
client id, <default> user and <default> client id, <default> user, client id, <default> client id.`,
		Example: `  sushka quota alter --user alice --add producer_byte_rate=1048576,consumer_byte_rate=2097152
  sushka quota alter --client-id-default --add request_percentage=50
  sushka quota alter --user alice --delete consumer_byte_rate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !ent.hasUser() && !ent.hasClient() {
				return fmt.Errorf("name an entity: --user, --user-default, --client-id and/or --client-id-default")
			}
			var ops []kadm.AlterClientQuotaOp
			for _, kv := range add {
				k, v, err := parseKV(kv)
				if err != nil {
					return fmt.Errorf("--add: %w", err)
				}
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("--add %s: %q is not a number", k, v)
				}
				ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Value: f})
			}
			for _, k := range del {
				ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
			}
			if len(ops) == 0 {
				return fmt.Errorf("nothing to change: give --add KEY=VALUE and/or --delete KEY")
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			entry := []kadm.AlterClientQuotaEntry{{Entity: ent.entity(), Ops: ops}}
			alter := adm.AlterClientQuotas
			if validateOnly {
				alter = adm.ValidateAlterClientQuotas
			}
			res, err := alter(ctx, entry)
			if err != nil {
				return cf.explain("alter quotas", err)
			}
			for _, r := range res {
				if r.Err != nil {
					return cf.explain("alter quotas of "+r.Entity.String(), fmt.Errorf("%s: %w", describeErr(r.Err, r.ErrMessage), r.Err))
				}
				what := "altered"
				if validateOnly {
					what = "valid (nothing changed)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", what, r.Entity)
			}
			return nil
		},
	}
	ent.register(cmd, "alter")
	cmd.Flags().StringSliceVar(&add, "add", nil, "quotas to set, KEY=VALUE (comma-separated or repeated)")
	cmd.Flags().StringSliceVar(&del, "delete", nil, "quota keys to remove")
	cmd.Flags().BoolVar(&validateOnly, "validate-only", false, "check the change without making it")
	return cmd
}

func newQuotaDescribeCmd(cf *clientFlags) *cobra.Command {
	var ent quotaEntityFlags
	var strict bool
	cmd := &cobra.Command{
		Use:   "describe [--user U | --user-default] [--client-id C | --client-id-default] [--strict]",
		Short: "Show client quotas: all of them, or those of the entities named (as kafka-configs.sh --describe)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var comps []kadm.DescribeClientQuotaComponent
			for _, c := range ent.entity() {
				dc := kadm.DescribeClientQuotaComponent{Type: c.Type, MatchName: c.Name, MatchType: kmsg.QuotasMatchTypeExact}
				if c.Name == nil {
					dc.MatchType = kmsg.QuotasMatchTypeDefault
				}
				comps = append(comps, dc)
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			described, err := adm.DescribeClientQuotas(ctx, strict, comps)
			if err != nil {
				return cf.explain("describe quotas", err)
			}
			type row struct{ user, client, key, value string }
			var rows []row
			for _, q := range described {
				user, client := "-", "-"
				for _, c := range q.Entity {
					name := "<default>"
					if c.Name != nil {
						name = *c.Name
					}
					switch c.Type {
					case "user":
						user = name
					case "client-id":
						client = name
					}
				}
				for _, v := range q.Values {
					rows = append(rows, row{user, client, v.Key, strconv.FormatFloat(v.Value, 'f', -1, 64)})
				}
			}
			sort.Slice(rows, func(i, j int) bool {
				a, b := rows[i], rows[j]
				return strings.Join([]string{a.user, a.client, a.key}, "\x00") < strings.Join([]string{b.user, b.client, b.key}, "\x00")
			})
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "USER\tCLIENT-ID\tQUOTA\tVALUE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.user, r.client, r.key, r.value)
			}
			return tw.Flush()
		},
	}
	ent.register(cmd, "show")
	cmd.Flags().BoolVar(&strict, "strict", false, "only entities of exactly the types named (without it, --user alice also shows alice's client-id quotas)")
	return cmd
}
