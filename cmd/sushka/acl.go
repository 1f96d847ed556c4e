package main

// sushka acl: create, list and delete ACLs (CreateACLs, DescribeACLs,
// DeleteACLs) with kadm, in the manner of kafka-acls.sh.

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { rootCmd.AddCommand(newACLCmd()) }

func newACLCmd() *cobra.Command {
	cmd := newClientParentCmd("acl", "Create, list and delete ACLs (who may do what on which topic, group, transactional id or the cluster)",
		newACLCreateCmd,
		newACLListCmd,
		newACLDeleteCmd,
	)
	cmd.Long = `Manage the ACLs a broker started with --authorizer checks, as kafka-acls.sh does:

  sushka acl create --allow-principal User:alice --operation read --operation describe --topic orders
  sushka acl create --allow-principal User:alice --operation read --group app --resource-pattern-type prefixed
  sushka acl list --principal User:alice
  sushka acl delete --topic orders --principal User:alice

Managing ACLs needs ALTER (create, delete) or DESCRIBE (list) on the cluster:
start the broker with --super-users for the first administrator.`
	return cmd
}

// aclResourceFlags name the resources of an ACL or a filter.
type aclResourceFlags struct {
	topics, groups, txnIDs []string
	cluster                bool
	pattern                string
}

func (f *aclResourceFlags) register(fs *pflag.FlagSet, defaultPattern, patterns string) {
	fs.StringArrayVar(&f.topics, "topic", nil, "topic name (repeatable)")
	fs.StringArrayVar(&f.groups, "group", nil, "consumer group id (repeatable)")
	fs.StringArrayVar(&f.txnIDs, "transactional-id", nil, "transactional id (repeatable)")
	fs.BoolVar(&f.cluster, "cluster", false, "the cluster resource")
	fs.StringVar(&f.pattern, "resource-pattern-type", defaultPattern, "how resource names match: "+patterns)
}

func (f *aclResourceFlags) any() bool {
	return len(f.topics)+len(f.groups)+len(f.txnIDs) > 0 || f.cluster
}

// apply sets the resources on b; none given: every resource (filters).
func (f *aclResourceFlags) apply(b *kadm.ACLBuilder) error {
	pattern, err := kmsg.ParseACLResourcePatternType(f.pattern)
	if err != nil {
		return fmt.Errorf("--resource-pattern-type %q: want literal, prefixed, any or match", f.pattern)
	}
	b.ResourcePatternType(pattern)
	if !f.any() {
		b.AnyResource()
		return nil
	}
	b.MaybeTopics(f.topics...).MaybeGroups(f.groups...).MaybeTransactionalIDs(f.txnIDs...).MaybeClusters(f.cluster)
	return nil
}

// parseOperations parses Kafka's operation names (read, describe_configs,
// ...), case-insensitive.
func parseOperations(names []string) ([]kadm.ACLOperation, error) {
	var ops []kadm.ACLOperation
	for _, n := range names {
		op, err := kmsg.ParseACLOperation(n)
		if err != nil {
			return nil, fmt.Errorf("--operation %q: want one of %s", n, strings.ToLower(strings.Join(kmsg.ACLOperationStrings(), ", ")))
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func newACLCreateCmd(cf *clientFlags) *cobra.Command {
	var res aclResourceFlags
	var allow, deny, hosts, operations []string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create ACLs: each principal × host × operation × resource",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(allow)+len(deny) == 0 {
				return fmt.Errorf("give --allow-principal or --deny-principal (User:name)")
			}
			if !res.any() {
				return fmt.Errorf("give a resource: --topic, --group, --transactional-id or --cluster")
			}
			if len(operations) == 0 {
				return fmt.Errorf("give at least one --operation (read, write, describe, all, ...)")
			}
			ops, err := parseOperations(operations)
			if err != nil {
				return err
			}
			b := kadm.NewACLs().Operations(ops...)
			if err := res.apply(b); err != nil {
				return err
			}
			if len(allow) > 0 {
				b.Allow(allow...).AllowHosts(hosts...)
			}
			if len(deny) > 0 {
				b.Deny(deny...).DenyHosts(hosts...)
			}
			if err := b.ValidateCreate(); err != nil {
				return err
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			results, err := adm.CreateACLs(ctx, b)
			if err != nil {
				return cf.explain("create ACLs", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE-TYPE\tRESOURCE-NAME\tPATTERN\tERROR")
			var failed int
			var firstErr string
			for _, r := range results {
				msg := ""
				if r.Err != nil {
					failed++
					msg = describeErr(r.Err, r.ErrMessage)
					if firstErr == "" {
						firstErr = msg
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Host, r.Operation, r.Permission, r.Type, r.Name, r.Pattern, msg)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d ACLs were not created: %s", failed, len(results), firstErr)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&allow, "allow-principal", nil, "principal allowed (User:name, User:* for everyone; repeatable)")
	fl.StringArrayVar(&deny, "deny-principal", nil, "principal denied (User:name; repeatable)")
	fl.StringArrayVar(&hosts, "host", nil, "IP address the principals connect from (repeatable; default * for every host)")
	fl.StringArrayVar(&operations, "operation", nil, "operation: all, read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write (repeatable)")
	res.register(fl, "literal", "literal or prefixed")
	return cmd
}

// aclFilterFlags select ACLs for list and delete.
type aclFilterFlags struct {
	res        aclResourceFlags
	principals []string
	hosts      []string
	operations []string
	permission string
}

func (f *aclFilterFlags) register(fs *pflag.FlagSet) {
	f.res.register(fs, "any", "literal, prefixed, any (every pattern) or match (every ACL that applies to the named resource)")
	fs.StringArrayVar(&f.principals, "principal", nil, "only ACLs of this principal (repeatable)")
	fs.StringArrayVar(&f.hosts, "host", nil, "only ACLs for this host (repeatable)")
	fs.StringArrayVar(&f.operations, "operation", nil, "only ACLs of this operation (repeatable)")
	fs.StringVar(&f.permission, "permission", "", "only allow or deny ACLs")
}

func (f *aclFilterFlags) any() bool {
	return f.res.any() || len(f.principals)+len(f.hosts)+len(f.operations) > 0 || f.permission != ""
}

func (f *aclFilterFlags) builder() (*kadm.ACLBuilder, error) {
	ops, err := parseOperations(f.operations)
	if err != nil {
		return nil, err
	}
	b := kadm.NewACLs().Operations(ops...)
	if err := f.res.apply(b); err != nil {
		return nil, err
	}
	switch strings.ToLower(f.permission) {
	case "":
		b.Allow(f.principals...).AllowHosts(f.hosts...).Deny(f.principals...).DenyHosts(f.hosts...)
	case "allow":
		b.Allow(f.principals...).AllowHosts(f.hosts...)
	case "deny":
		b.Deny(f.principals...).DenyHosts(f.hosts...)
	default:
		return nil, fmt.Errorf("--permission %q: want allow or deny", f.permission)
	}
	return b, b.ValidateFilter()
}

// aclRow is one ACL as list and delete print it.
func aclRow(principal, host string, op kadm.ACLOperation, perm kmsg.ACLPermissionType, rt kmsg.ACLResourceType, name string, pattern kadm.ACLPattern) []string {
	return []string{principal, host, op.String(), perm.String(), rt.String(), name, pattern.String()}
}

// runACLFilter is list's and delete's body: the filters' builder, the
// request (call returns the rows of its answer), the table.
func runACLFilter(cmd *cobra.Command, cf *clientFlags, f *aclFilterFlags, what string, call func(ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) ([][]string, error)) error {
	b, err := f.builder()
	if err != nil {
		return err
	}
	ctx, adm, done, err := cf.adminRequest(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	rows, err := call(ctx, adm, b)
	if err != nil {
		return cf.explain(what, err)
	}
	tw := newTabWriter(cmd.OutOrStdout())
	fmt.Fprintln(tw, "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE-TYPE\tRESOURCE-NAME\tPATTERN")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func newACLListCmd(cf *clientFlags) *cobra.Command {
	var f aclFilterFlags
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List ACLs (all, or those the filters select)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runACLFilter(cmd, cf, &f, "list ACLs", func(ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) ([][]string, error) {
				results, err := adm.DescribeACLs(ctx, b)
				if err != nil {
					return nil, err
				}
				var rows [][]string
				seen := map[string]bool{} // filters may overlap
				for _, r := range results {
					if r.Err != nil {
						return nil, r.Err
					}
					for _, d := range r.Described {
						row := aclRow(d.Principal, d.Host, d.Operation, d.Permission, d.Type, d.Name, d.Pattern)
						if k := strings.Join(row, "\x00"); !seen[k] {
							seen[k] = true
							rows = append(rows, row)
						}
					}
				}
				return rows, nil
			})
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func newACLDeleteCmd(cf *clientFlags) *cobra.Command {
	var f aclFilterFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Delete the ACLs the filters select, and list them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !f.any() && !all {
				return fmt.Errorf("give a filter (--topic, --group, --principal, ...), or --all to delete every ACL")
			}
			return runACLFilter(cmd, cf, &f, "delete ACLs", func(ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) ([][]string, error) {
				results, err := adm.DeleteACLs(ctx, b)
				if err != nil {
					return nil, err
				}
				var rows [][]string
				for _, r := range results {
					if r.Err != nil {
						return nil, r.Err
					}
					for _, d := range r.Deleted {
						rows = append(rows, aclRow(d.Principal, d.Host, d.Operation, d.Permission, d.Type, d.Name, d.Pattern))
					}
				}
				return rows, nil
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&all, "all", false, "delete every ACL")
	return cmd
}
