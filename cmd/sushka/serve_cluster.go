package main

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sushka-io/sushka/broker"
	"github.com/sushka-io/sushka/internal/server"
)

// clusterFlags are serve's flags of cluster mode (docs/replication.md
// section 5); none given: a single node, exactly as before.
type clusterFlags struct {
	peerListen       string
	controllerVoters string
	rack             string
	peerTLSCertFile  string
	peerTLSKeyFile   string
	peerTLSCAFile    string
	sessionTimeout   time.Duration
	heartbeat        time.Duration
}

// given reports whether any cluster flag was given.
func (c clusterFlags) given() bool {
	return c.peerListen != "" || c.controllerVoters != "" || c.peerTLSCertFile != "" || c.peerTLSKeyFile != "" || c.peerTLSCAFile != ""
}

// parseVoters parses --controller-voters, KRaft's controller.quorum.voters:
// ID@HOST:PORT,... with distinct ids ≥ 0, each address the voter's peer
// listener.
func parseVoters(s string) (map[int32]string, error) {
	voters := map[int32]string{}
	addrs := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		idStr, addr, ok := strings.Cut(item, "@")
		if !ok {
			return nil, fmt.Errorf("--controller-voters %q: %q is not ID@HOST:PORT", s, item)
		}
		id, err := strconv.ParseInt(idStr, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--controller-voters %q: node id %q is not a number ≥ 0", s, idStr)
		}
		host, port, err := net.SplitHostPort(addr)
		if pn, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || pn <= 0 || pn > 65535 {
			return nil, fmt.Errorf("--controller-voters %q: %q is not a reachable HOST:PORT", s, addr)
		}
		if _, dup := voters[int32(id)]; dup {
			return nil, fmt.Errorf("--controller-voters %q: node %d named twice", s, id)
		}
		if addrs[addr] {
			return nil, fmt.Errorf("--controller-voters %q: address %s named twice", s, addr)
		}
		voters[int32(id)], addrs[addr] = addr, true
	}
	return voters, nil
}

// checkCluster validates the cluster flags against the rest: --peer-listen
// and --controller-voters together, this node among the voters (learners
// are not wired yet), the peer TLS files all three or none.
func checkCluster(f serveFlags) (map[int32]string, error) {
	c := f.cluster
	if !c.given() {
		if c.rack != "" {
			return nil, fmt.Errorf("--rack %q: only for a node of a cluster (--peer-listen, --controller-voters)", c.rack)
		}
		return nil, nil
	}
	tlsGiven := []bool{c.peerTLSCertFile != "", c.peerTLSKeyFile != "", c.peerTLSCAFile != ""}
	switch {
	case c.peerListen == "" || c.controllerVoters == "":
		return nil, fmt.Errorf("a node of a cluster needs both --peer-listen and --controller-voters (given: --peer-listen %q, --controller-voters %q)", c.peerListen, c.controllerVoters)
	case slices.Contains(tlsGiven, true) && slices.Contains(tlsGiven, false):
		return nil, fmt.Errorf("peer TLS needs all three of --peer-tls-cert-file, --peer-tls-key-file and --peer-tls-ca-file, or none (plaintext)")
	case c.heartbeat <= 0 || c.sessionTimeout <= c.heartbeat:
		return nil, fmt.Errorf("--broker-heartbeat-interval %s must be above 0 and below --broker-session-timeout %s", c.heartbeat, c.sessionTimeout)
	case f.nodeID < 0:
		return nil, fmt.Errorf("--node-id %d: must be at least 0", f.nodeID)
	}
	voters, err := parseVoters(c.controllerVoters)
	if err != nil {
		return nil, err
	}
	if _, ok := voters[f.nodeID]; !ok {
		ids := make([]int32, 0, len(voters))
		for id := range voters {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return nil, fmt.Errorf("--node-id %d is not one of --controller-voters (nodes %v): in this version every node of a cluster is a controller voter (learners are not wired yet)", f.nodeID, ids)
	}
	return voters, nil
}

// clusterConfig opens the peer listener and loads the peer TLS files
// (server.NewTLSConfig: reloaded when they change, client certificates
// required) into the broker's ClusterConfig; nil on a single node.
func clusterConfig(f serveFlags, voters map[int32]string, log *slog.Logger) (*broker.ClusterConfig, error) {
	if voters == nil {
		return nil, nil
	}
	cc := &broker.ClusterConfig{Voters: voters, Rack: f.cluster.rack, SessionTimeout: f.cluster.sessionTimeout, HeartbeatInterval: f.cluster.heartbeat}
	if f.cluster.peerTLSCertFile != "" {
		cfg, err := server.NewTLSConfig(server.TLSFiles{CertFile: f.cluster.peerTLSCertFile, KeyFile: f.cluster.peerTLSKeyFile,
			ClientCAFile: f.cluster.peerTLSCAFile, ClientAuth: server.ClientAuthRequired}, log)
		if err != nil {
			return nil, fmt.Errorf("peer TLS: %w", err)
		}
		cc.PeerTLS = cfg
	}
	l, err := net.Listen("tcp", f.cluster.peerListen)
	if err != nil {
		return nil, fmt.Errorf("peer listener on %s: %w (choose another --peer-listen)", f.cluster.peerListen, err)
	}
	cc.PeerListener = l
	return cc, nil
}

// clusterBanner is the banner's cluster line ("" on a single node).
func clusterBanner(f serveFlags, cc *broker.ClusterConfig) string {
	if cc == nil {
		return ""
	}
	peerTLS := "plaintext"
	if cc.PeerTLS != nil {
		peerTLS = "mutual TLS"
	}
	rack := ""
	if cc.Rack != "" {
		rack = ", rack " + cc.Rack
	}
	return fmt.Sprintf("  cluster          node %d of voters %s; peer listener %s (%s)%s; partitions rf=1 (replication not yet wired)\n",
		f.nodeID, f.cluster.controllerVoters, cc.PeerListener.Addr(), peerTLS, rack)
}
