package main

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { rootCmd.AddCommand(newClusterCmd()) }

func newClusterCmd() *cobra.Command {
	return newClientParentCmd("cluster", "Show the cluster: nodes, controller, partition leaders",
		newClusterStatusCmd,
	)
}

// newClusterStatusCmd is `sushka cluster status`: DescribeCluster (v2,
// fenced brokers included) and Metadata of every topic, from whichever
// broker answers: the nodes with the controller marked, fenced or not,
// the partitions each holds and leads, then every partition's leader,
// replicas and in-sync replicas. A single node shows itself.
func newClusterStatusCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Nodes (controller, fenced), partitions per node, partition leaders",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := cf.newClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := cf.reqCtx(cmd.Context())
			defer cancel()
			dreq := kmsg.NewPtrDescribeClusterRequest()
			dreq.IncludeFencedBrokers = true
			dresp, err := dreq.RequestWith(ctx, cl)
			if err == nil {
				err = kerr.ErrorForCode(dresp.ErrorCode)
			}
			if err != nil {
				return cf.explain("describe the cluster", err)
			}
			mreq := kmsg.NewPtrMetadataRequest()
			mresp, err := mreq.RequestWith(ctx, cl)
			if err != nil {
				return cf.explain("read the metadata", err)
			}
			return printClusterStatus(cmd.OutOrStdout(), dresp, mresp)
		},
	}
}

func printClusterStatus(w io.Writer, d *kmsg.DescribeClusterResponse, m *kmsg.MetadataResponse) error {
	controller := "none known"
	if d.ControllerID >= 0 {
		controller = "node " + strconv.Itoa(int(d.ControllerID))
	}
	fmt.Fprintf(w, "cluster id  %s\ncontroller  %s\n\n", d.ClusterID, controller)
	hosted, leads := map[int32]int{}, map[int32]int{}
	topics := make([]kmsg.MetadataResponseTopic, 0, len(m.Topics))
	for _, t := range m.Topics {
		if t.IsInternal || t.Topic == nil {
			continue // each node's own in this version (docs/replication.md, 4b)
		}
		topics = append(topics, t)
		for _, p := range t.Partitions {
			for _, r := range p.Replicas {
				hosted[r]++
			}
			if p.Leader >= 0 {
				leads[p.Leader]++
			}
		}
	}
	brokers := d.Brokers
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].NodeID < brokers[j].NodeID })
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "NODE\tADDRESS\tRACK\tSTATUS\tPARTITIONS\tLEADERS")
	for _, b := range brokers {
		status := "up"
		if b.IsFenced {
			status = "fenced"
		}
		if b.NodeID == d.ControllerID {
			status += ", controller"
		}
		rack := ""
		if b.Rack != nil {
			rack = *b.Rack
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\n", b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), orDash(rack), status, hosted[b.NodeID], leads[b.NodeID])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	sort.Slice(topics, func(i, j int) bool { return *topics[i].Topic < *topics[j].Topic })
	tw = newTabWriter(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tREPLICAS\tISR")
	for _, t := range topics {
		parts := t.Partitions
		sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
		for _, p := range parts {
			leader := strconv.Itoa(int(p.Leader))
			if p.Leader < 0 {
				leader = "none"
				if ke, ok := kerr.ErrorForCode(p.ErrorCode).(*kerr.Error); ok {
					leader += " (" + ke.Message + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", *t.Topic, p.Partition, leader, orDash(ids(p.Replicas)), orDash(ids(p.ISR)))
		}
	}
	return tw.Flush()
}

func ids(xs []int32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}
