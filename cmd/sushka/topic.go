package main

// sushka topic create|list|describe|delete|alter-config: topic admin in the
// style of rpk, over kadm.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { rootCmd.AddCommand(newTopicCmd()) }

func newTopicCmd() *cobra.Command {
	return newClientParentCmd("topic", "Create, list, describe, alter and delete topics",
		newTopicCreateCmd,
		newTopicListCmd,
		newTopicDescribeCmd,
		newTopicDeleteCmd,
		newTopicAlterConfigCmd,
	)
}

// statusRows prints "TOPIC STATUS" rows and returns an error naming the
// failures (with hints) if any row failed.
type statusRow struct {
	topic string
	err   error
	msg   string
}

func printStatus(cmd *cobra.Command, cf *clientFlags, what string, rows []statusRow) error {
	tw := newTabWriter(cmd.OutOrStdout())
	fmt.Fprintln(tw, "TOPIC\tSTATUS")
	failed := 0
	seenHint := map[string]bool{}
	var hintLines []string
	for _, r := range rows {
		status := "OK"
		if r.err != nil {
			failed++
			status = describeErr(r.err, r.msg)
			if h := cf.hintFor(r.err); h != "" && !seenHint[h] {
				seenHint[h] = true
				hintLines = append(hintLines, "hint: "+h)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\n", r.topic, status)
	}
	_ = tw.Flush()
	if failed == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s failed for %d of %d topic(s)", what, failed, len(rows))
	if len(hintLines) > 0 {
		msg += "\n" + strings.Join(hintLines, "\n")
	}
	return errors.New(msg)
}

func newTopicCreateCmd(cf *clientFlags) *cobra.Command {
	var (
		partitions int32
		replicas   int16
		configs    []string
	)
	cmd := &cobra.Command{
		Use:   "create NAME...",
		Short: "Create topics",
		Example: "  sushka topic create orders -p 3\n" +
			"  sushka topic create logs -c retention.ms=3600000 -c segment.bytes=67108864",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfgs := make(map[string]*string, len(configs))
			for _, c := range configs {
				k, v, err := parseKV(c)
				if err != nil {
					return fmt.Errorf("-c %s", err)
				}
				cfgs[k] = &v
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := adm.CreateTopics(ctx, partitions, replicas, cfgs, args...)
			if err != nil {
				return cf.explain("create topics", err)
			}
			rows := make([]statusRow, 0, len(args))
			for _, t := range args {
				r, ok := resp[t]
				if !ok {
					rows = append(rows, statusRow{topic: t, err: errors.New("no answer from the broker for this topic")})
					continue
				}
				rows = append(rows, statusRow{topic: t, err: r.Err, msg: r.ErrMessage})
			}
			return printStatus(cmd, cf, "create", rows)
		},
	}
	fs := cmd.Flags()
	fs.Int32VarP(&partitions, "partitions", "p", -1, "partitions per topic (-1: the broker's default)")
	fs.Int16VarP(&replicas, "replicas", "r", -1, "replication factor (-1: the broker's default)")
	fs.StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable)")
	return cmd
}

func newTopicListCmd(cf *clientFlags) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var tds kadm.TopicDetails
			if internal {
				tds, err = adm.ListTopicsWithInternal(ctx)
			} else {
				tds, err = adm.ListTopics(ctx)
			}
			if err != nil {
				return cf.explain("list topics", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tPARTITIONS\tREPLICAS")
			for _, td := range tds.Sorted() {
				if td.Err != nil {
					fmt.Fprintf(tw, "%s\t-\t-\t%s\n", td.Topic, describeErr(td.Err, ""))
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\n", td.Topic, len(td.Partitions), td.Partitions.NumReplicas())
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&internal, "internal", "i", false, "include internal topics")
	return cmd
}

func newTopicDescribeCmd(cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe NAME...",
		Short: "Describe topics: summary, configs, partitions with offsets",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, cl, err := cf.newAdmin()
			if err != nil {
				return err
			}
			defer cl.Close()
			return describeEach(cmd.OutOrStdout(), args, func(t string) error {
				return describeTopic(cmd.Context(), cmd.OutOrStdout(), cf, adm, t)
			})
		},
	}
	return cmd
}

func describeTopic(parent context.Context, w io.Writer, cf *clientFlags, adm *kadm.Client, topic string) error {
	ctx, cancel := cf.reqCtx(parent)
	defer cancel()
	tds, err := adm.ListTopicsWithInternal(ctx, topic)
	if err != nil {
		return cf.explain("describe "+topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		err := td.Err
		if !ok || err == nil {
			err = kerr.UnknownTopicOrPartition
		}
		return cf.explain("describe "+topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return cf.explain("list start offsets of "+topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return cf.explain("list end offsets of "+topic, err)
	}
	rcs, cfgErr := adm.DescribeTopicConfigs(ctx, topic)

	tw := newTabWriter(w)
	fmt.Fprintln(tw, "SUMMARY")
	fmt.Fprintln(tw, "=======")
	fmt.Fprintf(tw, "NAME\t%s\n", td.Topic)
	if td.ID != (kadm.TopicID{}) {
		fmt.Fprintf(tw, "ID\t%s\n", td.ID)
	}
	fmt.Fprintf(tw, "PARTITIONS\t%d\n", len(td.Partitions))
	fmt.Fprintf(tw, "REPLICAS\t%d\n", td.Partitions.NumReplicas())
	if td.IsInternal {
		fmt.Fprintf(tw, "INTERNAL\ttrue\n")
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "CONFIGS")
	fmt.Fprintln(w, "=======")
	tw = newTabWriter(w)
	rc, rcErr := rcs.On(topic, nil)
	switch {
	case cfgErr != nil:
		fmt.Fprintf(tw, "(could not describe configs: %s)\n", describeErr(cfgErr, ""))
	case rcErr != nil:
		fmt.Fprintf(tw, "(could not describe configs: %s)\n", describeErr(rcErr, ""))
	case rc.Err != nil:
		fmt.Fprintf(tw, "(could not describe configs: %s)\n", describeErr(rc.Err, rc.ErrMessage))
	default:
		fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
		cs := append([]kadm.Config(nil), rc.Configs...)
		sort.Slice(cs, func(i, j int) bool { return cs[i].Key < cs[j].Key })
		for _, c := range cs {
			v := c.MaybeValue()
			if c.Sensitive {
				v = "(sensitive)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Key, v, configSource(c.Source))
		}
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "PARTITIONS")
	fmt.Fprintln(w, "==========")
	tw = newTabWriter(w)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tLOG-START-OFFSET\tHIGH-WATERMARK")
	for _, p := range td.Partitions.Sorted() {
		if p.Err != nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t%s\n", p.Partition, describeErr(p.Err, ""))
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch, p.Replicas,
			offsetCell(starts, topic, p.Partition), offsetCell(ends, topic, p.Partition))
	}
	return tw.Flush()
}

func offsetCell(lo kadm.ListedOffsets, topic string, p int32) string {
	o, ok := lo.Lookup(topic, p)
	if !ok {
		return "-"
	}
	if o.Err != nil {
		return kafkaErrName(o.Err)
	}
	return fmt.Sprint(o.Offset)
}

func configSource(s kmsg.ConfigSource) string {
	switch s {
	case kmsg.ConfigSourceDynamicTopicConfig:
		return "DYNAMIC_TOPIC_CONFIG"
	case kmsg.ConfigSourceDynamicBrokerConfig:
		return "DYNAMIC_BROKER_CONFIG"
	case kmsg.ConfigSourceDynamicDefaultBrokerConfig:
		return "DYNAMIC_DEFAULT_BROKER_CONFIG"
	case kmsg.ConfigSourceStaticBrokerConfig:
		return "STATIC_BROKER_CONFIG"
	case kmsg.ConfigSourceDefaultConfig:
		return "DEFAULT_CONFIG"
	case kmsg.ConfigSourceDynamicBrokerLoggerConfig:
		return "DYNAMIC_BROKER_LOGGER_CONFIG"
	}
	return s.String()
}

func newTopicDeleteCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete topics",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := adm.DeleteTopics(ctx, args...)
			if err != nil {
				return cf.explain("delete topics", err)
			}
			rows := make([]statusRow, 0, len(args))
			for _, t := range args {
				r, ok := resp[t]
				if !ok {
					rows = append(rows, statusRow{topic: t, err: kerr.UnknownTopicOrPartition})
					continue
				}
				rows = append(rows, statusRow{topic: t, err: r.Err, msg: r.ErrMessage})
			}
			return printStatus(cmd, cf, "delete", rows)
		},
	}
}

func newTopicAlterConfigCmd(cf *clientFlags) *cobra.Command {
	var sets, dels []string
	cmd := &cobra.Command{
		Use:   "alter-config NAME... [--set key=value]... [--delete key]...",
		Short: "Set or delete topic configs (incrementally)",
		Example: "  sushka topic alter-config orders --set retention.ms=86400000\n" +
			"  sushka topic alter-config orders --delete retention.ms",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(sets) == 0 && len(dels) == 0 {
				return errors.New("nothing to do: give --set key=value or --delete key")
			}
			var alters []kadm.AlterConfig
			for _, s := range sets {
				k, v, err := parseKV(s)
				if err != nil {
					return fmt.Errorf("--set %s", err)
				}
				alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
			}
			for _, k := range dels {
				alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := adm.AlterTopicConfigs(ctx, alters, args...)
			if err != nil {
				return cf.explain("alter configs", err)
			}
			rows := make([]statusRow, 0, len(args))
			for _, t := range args {
				r, rerr := resp.On(t, nil)
				if rerr != nil {
					rows = append(rows, statusRow{topic: t, err: rerr})
					continue
				}
				rows = append(rows, statusRow{topic: t, err: r.Err, msg: r.ErrMessage})
			}
			return printStatus(cmd, cf, "alter-config", rows)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "set a config key=value (repeatable)")
	cmd.Flags().StringArrayVar(&dels, "delete", nil, "delete a config key, back to the default (repeatable)")
	return cmd
}
