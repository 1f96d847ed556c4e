// Package netns runs Sushka brokers (or any program) as child processes in
// Linux network namespaces that a test creates, joined by a network the
// test controls, and injects network faults into it: partitions (both
// directions or one), isolation of a node, delay, jitter and loss on a
// node's link, and a bandwidth limit. It is the harness of issue 14's
// network-fault tests (docs/replication.md section 6).
//
// # Topology
//
// Each node is a namespace with its loopback up and one interface, eth0, a
// TUN device whose other end is a file descriptor held by the test process.
// The test process is the network: a switch (switch.go) reads each packet a
// node sends and writes it into the destination node's eth0, or drops or
// delays it as the faults in force say. Nothing is added to the root
// namespace (no route, no device, no address), so the nodes' /24 cannot
// collide with the host's networks or with another test package's Net, and
// no packet of a Net can leave the machine.
//
// Why not veth pairs into a bridge with tc netem: the kernel this project's
// machines and CI run has no netem (CONFIG_NET_SCH_NETEM is not set), no
// nftables queue (CONFIG_NFT_QUEUE) and neither iptables nor nft installed,
// so delay and jitter need user space anyway; with the switch in user space,
// every fault is one table in one place, changed under one lock, reversible
// by construction, and directional per pair of nodes. A TUN device vanishes
// when the descriptor closes, so a test process that dies leaves no device.
// The bandwidth limit is the kernel's own tbf qdisc (CONFIG_NET_SCH_TBF) on
// the node's eth0.
//
// # Clients
//
// The test's own clients (franz-go, net.Dial) reach the nodes from a node of
// their own: Node.DialContext creates the socket inside that node's
// namespace (setns on a locked OS thread), so a client node is
// partitioned, delayed and isolated like any other.
// kgo.Dialer(client.Dialer(timeout)) is all a franz-go client needs.
// Node.Listen and Node.ListenPacket serve from the test process inside a
// namespace.
//
// # Brokers
//
// StartBroker runs `sushka serve` in a node (listening on the node's
// address, port BrokerPort; admin at AdminAddr on the node's loopback);
// StartBrokers starts several before waiting for any, with per-node
// arguments (a cluster's node id, peers, voters). Kill is kill -9,
// Restart starts it again on the same data directory.
//
// # Lifetime
//
// Namespaces are named "sushkanet-PID-START-N-NODE" (PID and START the test
// process's id and start time, N a counter), so parallel test packages and
// leftovers of earlier runs never collide. Everything a Net creates is
// removed by t.Cleanup, which runs after a failure and after a panic in the
// test; New first sweeps namespaces with the prefix whose process is gone
// (a test binary killed by -timeout or SIGKILL runs no cleanup), killing
// what still runs in them. Children started here get SIGKILL when the test
// process dies (Pdeathsig).
//
// # What it needs from the machine
//
// Linux, root (CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2's ip and tc
// (Debian's iproute2, which .ci/run installs), /dev/net/tun
// (CONFIG_TUN), and tbf (CONFIG_NET_SCH_TBF) for Bandwidth only. Require
// skips a test with the missing piece named, and fails it when CI is set.
package netns
