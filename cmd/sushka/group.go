package main

// sushka group: list, describe (members, assignments, lag per partition),
// delete and seek consumer groups, with kadm.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func init() { rootCmd.AddCommand(newGroupCmd()) }

func newGroupCmd() *cobra.Command {
	return newClientParentCmd("group", "List, describe, delete consumer groups and move their committed offsets",
		newGroupListCmd,
		newGroupDescribeCmd,
		newGroupDeleteCmd,
		newGroupSeekCmd,
	)
}

func newGroupListCmd(cf *clientFlags) *cobra.Command {
	var states []string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List consumer groups with their state",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			groups, err := adm.ListGroups(ctx, states...)
			if err != nil {
				return cf.explain("list groups", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL-TYPE\tTYPE\tCOORDINATOR")
			for _, g := range groups.Sorted() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", g.Group, g.State, g.ProtocolType, orDash(g.GroupType), g.Coordinator)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only groups in these states (Empty, Stable, PreparingRebalance, ...)")
	return cmd
}

func newGroupDescribeCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Show a group's state, members, assignments and lag per partition",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			lags, err := adm.Lag(ctx, args...)
			if err != nil {
				return cf.explain("describe groups", err)
			}
			w := cmd.OutOrStdout()
			return describeEach(w, args, func(name string) error {
				l, err := answerFor(lags, "group", name)
				if err != nil {
					return err
				}
				if err := l.Error(); err != nil {
					return cf.explain("describe group "+name, err)
				}
				fmt.Fprintf(w, "GROUP        %s\nSTATE        %s\nPROTOCOL     %s %s\nCOORDINATOR  %d\nMEMBERS      %d\nTOTAL-LAG    %d\n\n",
					l.Group, l.State, l.ProtocolType, l.Protocol, l.Coordinator.NodeID, len(l.Members), l.Lag.Total())
				tw := newTabWriter(w)
				fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER\tCLIENT-ID\tHOST")
				for _, ml := range l.Lag.Sorted() {
					committed := "-"
					if ml.Commit.At >= 0 {
						committed = strconv.FormatInt(ml.Commit.At, 10)
					}
					lag := strconv.FormatInt(ml.Lag, 10)
					if ml.Err != nil {
						lag = describeErr(ml.Err, "")
					}
					member, client, host := "-", "-", "-"
					if ml.Member != nil {
						member, client, host = ml.Member.MemberID, ml.Member.ClientID, ml.Member.ClientHost
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", ml.Topic, ml.Partition, committed, ml.End.Offset, lag, member, client, host)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				// Members with nothing assigned do not show up in the
				// lag table.
				for _, m := range l.Members {
					if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
						continue
					}
					fmt.Fprintf(w, "member %s (%s, %s): no partitions assigned\n", m.MemberID, m.ClientID, m.ClientHost)
				}
				return nil
			})
		},
	}
}

func newGroupDeleteCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete empty groups and their committed offsets",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resps, err := adm.DeleteGroups(ctx, args...)
			if err != nil {
				return cf.explain("delete groups", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "GROUP\tSTATUS")
			var firstErr error
			for _, name := range args {
				fmt.Fprintf(tw, "%s\t%s\n", name, statusCell(resps[name].Err, &firstErr))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if firstErr != nil {
				return cf.explain("delete groups (only empty groups can be deleted: stop their consumers first)", firstErr)
			}
			return nil
		},
	}
}

func newGroupSeekCmd(cf *clientFlags) *cobra.Command {
	var to, topicsFlag string
	cmd := &cobra.Command{
		Use:   "seek GROUP --to start|end|OFFSET [--topics t1,t2]",
		Short: "Set a group's committed offsets (the group must be empty)",
		Long: "Commits new offsets for an empty group: --to start (log start), end (high watermark)\n" +
			"or a number (clamped to the partition's range), for every partition of --topics, or of\n" +
			"the topics the group has committed offsets for.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var topics []string
			if topicsFlag != "" {
				topics = strings.Split(topicsFlag, ",")
			} else {
				committed, err := adm.FetchOffsets(ctx, group)
				if err != nil {
					return cf.explain("fetch offsets of "+group, err)
				}
				for t := range committed {
					topics = append(topics, t)
				}
			}
			if len(topics) == 0 {
				return errors.New("the group has no committed offsets: name the topics with --topics")
			}
			starts, err := adm.ListStartOffsets(ctx, topics...)
			if err != nil {
				return cf.explain("list start offsets", err)
			}
			ends, err := adm.ListEndOffsets(ctx, topics...)
			if err != nil {
				return cf.explain("list end offsets", err)
			}
			offsets := kadm.Offsets{}
			var failed error
			ends.Each(func(e kadm.ListedOffset) {
				if e.Err != nil {
					failed = fmt.Errorf("%s/%d: %w", e.Topic, e.Partition, e.Err)
					return
				}
				s, _ := starts.Lookup(e.Topic, e.Partition)
				at := e.Offset
				switch to {
				case "start":
					at = s.Offset
				case "end":
				default:
					n, err := strconv.ParseInt(to, 10, 64)
					if err != nil {
						failed = fmt.Errorf("--to %q: want start, end or an offset", to)
						return
					}
					at = min(max(n, s.Offset), e.Offset)
				}
				offsets.Add(kadm.Offset{Topic: e.Topic, Partition: e.Partition, At: at, LeaderEpoch: -1})
			})
			if failed != nil {
				return failed
			}
			resps, err := adm.CommitOffsets(ctx, group, offsets)
			if err != nil {
				return cf.explain("commit offsets", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET\tSTATUS")
			var firstErr error
			resps.Each(func(r kadm.OffsetResponse) {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Topic, r.Partition, r.At, statusCell(r.Err, &firstErr))
			})
			if err := tw.Flush(); err != nil {
				return err
			}
			if firstErr != nil {
				return cf.explain("seek "+group+" (is the group empty? stop its consumers first)", firstErr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "start, end, or an offset")
	cmd.Flags().StringVar(&topicsFlag, "topics", "", "comma-separated topics (default: those with committed offsets)")
	cmd.MarkFlagRequired("to")
	return cmd
}
