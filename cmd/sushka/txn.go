package main

// sushka txn: list and describe transactions (ListTransactions,
// DescribeTransactions) and the producers of partitions
// (DescribeProducers), with kadm.

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func init() { rootCmd.AddCommand(newTxnCmd()) }

func newTxnCmd() *cobra.Command {
	return newClientParentCmd("txn", "List and describe transactions (transactional ids, their producers and partitions)",
		newTxnListCmd,
		newTxnDescribeCmd,
		newTxnProducersCmd,
	)
}

func newTxnListCmd(cf *clientFlags) *cobra.Command {
	var states []string
	var producerIDs []int64
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List transactional ids with their producer id and transaction state",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			txns, err := adm.ListTransactions(ctx, producerIDs, states)
			if err != nil {
				return cf.explain("list transactions", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TRANSACTIONAL-ID\tPRODUCER-ID\tSTATE\tCOORDINATOR")
			for _, t := range txns.Sorted() {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", t.TxnID, t.ProducerID, t.State, t.Coordinator)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only transactions in these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort)")
	cmd.Flags().Int64SliceVar(&producerIDs, "producer-id", nil, "only transactions of these producer ids")
	return cmd
}

func newTxnDescribeCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TRANSACTIONAL-ID...",
		Short: "Show a transaction's state, producer id and epoch, timeout, start and partitions",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			described, err := adm.DescribeTransactions(ctx, args...)
			if err != nil {
				return cf.explain("describe transactions", err)
			}
			w := cmd.OutOrStdout()
			return describeEach(w, args, func(id string) error {
				t, err := answerFor(described, "transactional id", id)
				if err != nil {
					return err
				}
				if t.Err != nil {
					return cf.explain("describe transaction "+id, t.Err)
				}
				started := "-"
				if t.StartTimestamp >= 0 {
					started = time.UnixMilli(t.StartTimestamp).UTC().Format(time.RFC3339Nano)
				}
				var partitions []string
				for _, tp := range t.Topics.Sorted() {
					for _, p := range tp.Partitions {
						partitions = append(partitions, fmt.Sprintf("%s/%d", tp.Topic, p))
					}
				}
				fmt.Fprintf(w, "TRANSACTIONAL-ID  %s\nSTATE             %s\nPRODUCER-ID       %d\nPRODUCER-EPOCH    %d\nTIMEOUT           %s\nSTARTED           %s\nCOORDINATOR       %d\nPARTITIONS        %s\n",
					t.TxnID, t.State, t.ProducerID, t.ProducerEpoch, time.Duration(t.TimeoutMillis)*time.Millisecond, started, t.Coordinator, orDash(strings.Join(partitions, " ")))
				return nil
			})
		},
	}
}

func newTxnProducersCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "producers TOPIC...",
		Short: "Show the idempotent and transactional producers of each partition (epoch, last sequence, open transaction's first offset)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, adm, done, err := cf.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			set := kadm.TopicsSet{}
			for _, topic := range args {
				set.Add(topic)
			}
			described, err := adm.DescribeProducers(ctx, set)
			if err != nil {
				return cf.explain("describe producers", err)
			}
			tw := newTabWriter(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tPRODUCER-ID\tEPOCH\tLAST-SEQUENCE\tLAST-WRITE\tTXN-START-OFFSET")
			for _, p := range described.SortedPartitions() {
				if p.Err != nil {
					return cf.explain(fmt.Sprintf("describe producers of %s/%d", p.Topic, p.Partition), p.Err)
				}
				for _, pr := range p.ActiveProducers.Sorted() {
					txnStart := "-"
					if pr.CurrentTxnStartOffset >= 0 {
						txnStart = fmt.Sprint(pr.CurrentTxnStartOffset)
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", pr.Topic, pr.Partition, pr.ProducerID, pr.ProducerEpoch, pr.LastSequence,
						time.UnixMilli(pr.LastTimestamp).UTC().Format(time.RFC3339), txnStart)
				}
			}
			return tw.Flush()
		},
	}
}
