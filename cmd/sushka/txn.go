package main

// sushka txn: list and describe transactions (ListTransactions,
// DescribeTransactions), with kadm.

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(newTxnCmd()) }

func newTxnCmd() *cobra.Command {
	return newClientParentCmd("txn", "List and describe transactions (transactional ids, their producers and partitions)",
		newTxnListCmd,
		newTxnDescribeCmd,
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
			for i, id := range args {
				if i > 0 {
					fmt.Fprintln(w)
				}
				t, ok := described[id]
				if !ok {
					return fmt.Errorf("transactional id %s: no answer from the broker", id)
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
			}
			return nil
		},
	}
}
