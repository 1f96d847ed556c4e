package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix begins the name of every namespace this package creates, and
// only those: Sweep removes nothing else.
const Prefix = "sushkanet-"

// netnsDir is where `ip netns add` keeps a namespace's bind mount.
const netnsDir = "/run/netns"

// The nodes' addresses come from 198.18.0.0/15, which RFC 2544 reserves
// for testing network devices: no host routes there, and a Net's /24 is
// checked against the root namespace's routes all the same (pickSubnet).
var subnetRange = netip.MustParsePrefix("198.18.0.0/15")

// DefaultMTU is the nodes' eth0 MTU: Ethernet's, so a large message is
// many packets, as it is between real hosts.
const DefaultMTU = 1500

// commandTimeout bounds every ip and tc command the harness runs.
const commandTimeout = 10 * time.Second

// maxNodes bounds a Net: the /24's host addresses .1 to .250.
const maxNodes = 250

// Net is a set of nodes (network namespaces) joined by a switch the test
// controls. Create it with New; t.Cleanup removes it.
type Net struct {
	t      testing.TB
	id     string // "sushkanet-PID-START-N"
	subnet netip.Prefix
	nodes  []*Node
	sw     *fabric
	logs   *logGate

	cmdsMu sync.Mutex
	cmds   []*exec.Cmd // every Node.Command, killed by remove if still running
}

// Node is one namespace of a Net: loopback up, eth0 at Addr in the Net's
// /24.
type Node struct {
	net   *Net
	name  string // the test's name for it ("b0")
	ns    string // the namespace's name ("sushkanet-…-b0")
	index int
	addr  netip.Addr
	nsFD  int      // /run/netns/NS, open for setns while the Net lives
	port  *os.File // the TUN device's descriptor: the switch's end of eth0
}

// Name is the test's name of the node.
func (n *Node) Name() string { return n.name }

// Namespace is the network namespace's name (for `ip netns exec`).
func (n *Node) Namespace() string { return n.ns }

// Addr is the node's address on the Net.
func (n *Node) Addr() netip.Addr { return n.addr }

// HostPort is the node's address with port, as a dial or listen address.
func (n *Node) HostPort(port int) string {
	return netip.AddrPortFrom(n.addr, uint16(port)).String()
}

func (n *Node) String() string { return n.name + "(" + n.addr.String() + ")" }

var (
	netCounter atomic.Int64
	sweepOnce  sync.Once
	selfStart  = sync.OnceValues(processStartTime)
)

// New creates one node per name (at least one, at most 250, names
// unique), each a network namespace whose eth0 is a port of the Net's
// switch, and registers their removal with t.Cleanup. It skips the test
// when the machine cannot (Require) and sweeps the leftovers of dead runs
// once per process first.
func New(t testing.TB, names ...string) *Net {
	t.Helper()
	Require(t)
	sweepOnce.Do(func() {
		removed, err := Sweep()
		for _, ns := range removed {
			t.Logf("netns: removed %s, left by a run that is gone", ns)
		}
		if err != nil {
			t.Logf("netns: sweep: %v", err)
		}
	})
	if len(names) == 0 || len(names) > maxNodes {
		t.Fatalf("netns.New: %d nodes: want 1 to %d", len(names), maxNodes)
	}
	seen := map[string]bool{}
	for _, name := range names {
		if name == "" || seen[name] || strings.ContainsAny(name, "/ \t\n") {
			t.Fatalf("netns.New: node name %q: empty, repeated or not a file name", name)
		}
		seen[name] = true
	}
	start, err := selfStart()
	if err != nil {
		t.Fatalf("netns.New: %v", err)
	}
	subnet, err := pickSubnet()
	if err != nil {
		t.Fatalf("netns.New: %v", err)
	}
	n := &Net{
		t:      t,
		id:     fmt.Sprintf("%s%d-%d-%d", Prefix, os.Getpid(), start, netCounter.Add(1)),
		subnet: subnet,
		logs:   &logGate{t: t},
	}
	// Registered before anything exists, so that whatever the loop below
	// made is removed even when it stops half way.
	t.Cleanup(n.remove)
	for i, name := range names {
		if err := n.addNode(i, name); err != nil {
			t.Fatalf("netns.New: node %s: %v", name, err)
		}
	}
	n.sw = newFabric(n.nodes)
	return n
}

// Node returns the node named name; it fails the test for a name New was
// not given.
func (n *Net) Node(name string) *Node {
	for _, node := range n.nodes {
		if node.name == name {
			return node
		}
	}
	n.t.Fatalf("netns: no node %q", name)
	return nil
}

// Nodes returns every node, in New's order.
func (n *Net) Nodes() []*Node { return append([]*Node(nil), n.nodes...) }

// Namespaces returns the namespaces' names, in New's order.
func (n *Net) Namespaces() []string {
	out := make([]string, len(n.nodes))
	for i, node := range n.nodes {
		out[i] = node.ns
	}
	return out
}

// Subnet is the Net's /24.
func (n *Net) Subnet() netip.Prefix { return n.subnet }

// addNode creates the namespace, its eth0 (a port of the switch) and
// their addresses. The node joins n.nodes as soon as its namespace exists,
// so that remove finds whatever a failure left.
func (n *Net) addNode(index int, name string) error {
	node := &Node{net: n, name: name, ns: n.id + "-" + name, index: index, nsFD: -1}
	a := n.subnet.Addr().As4()
	a[3] = byte(index + 1)
	node.addr = netip.AddrFrom4(a)
	if err := ipCommand("netns", "add", node.ns); err != nil {
		return err
	}
	n.nodes = append(n.nodes, node)
	fd, err := unix.Open(netnsDir+"/"+node.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s/%s: %w", netnsDir, node.ns, err)
	}
	node.nsFD = fd
	if node.port, err = node.openTUN("eth0"); err != nil {
		return err
	}
	script := fmt.Sprintf("link set lo up\nlink set eth0 addrgenmode none mtu %d up\naddr add %s/%d dev eth0\n",
		DefaultMTU, node.addr, n.subnet.Bits())
	return ipBatch(node.ns, script)
}

// remove undoes New: every process left in the namespaces is killed, the
// switch stopped (closing the TUN descriptors removes the devices), and the
// namespaces deleted. A namespace that cannot be deleted fails the test.
func (n *Net) remove() {
	// The commands first, by process: one that `ip netns exec` has not
	// yet moved into its namespace is not found there.
	n.cmdsMu.Lock()
	for _, cmd := range n.cmds {
		if cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL) // an exited one answers "already finished"
		}
	}
	n.cmdsMu.Unlock()
	for _, node := range n.nodes {
		if err := killAll(node.ns); err != nil {
			n.t.Errorf("netns: %v", err)
		}
	}
	if n.sw != nil {
		n.sw.stop()
	}
	for _, node := range n.nodes {
		if node.port != nil && n.sw == nil {
			_ = node.port.Close()
		}
		if node.nsFD >= 0 {
			_ = unix.Close(node.nsFD)
			node.nsFD = -1
		}
		if err := ipCommand("netns", "del", node.ns); err != nil {
			n.t.Errorf("netns: removing %s: %v", node.ns, err)
		}
	}
	n.logs.close()
}

// killAll sends SIGKILL to every process in namespace ns and waits (5 s
// at most) until none is left, so the namespace dies with its name. It
// returns an error if some still run.
func killAll(ns string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := nsPids(ns)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still run in %s", pids, ns)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nsPids lists the processes in namespace ns, as `ip netns pids` does:
// those whose /proc/PID/ns/net is the namespace's file (same device and
// inode). Zombies have no namespace and are not listed.
func nsPids(ns string) []int {
	var target unix.Stat_t
	if err := unix.Stat(netnsDir+"/"+ns, &target); err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Dev == target.Dev && st.Ino == target.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Sweep removes the namespaces a dead run of this package left: those
// named with Prefix whose creating process (PID and start time in the
// name) no longer runs. Processes still in them are killed first.
// Namespaces without the prefix, and those of live processes (parallel
// test packages), are left alone; one that another process's sweep
// removes first is neither an error nor reported. New calls it once per
// process.
func Sweep() (removed []string, err error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		pid, start, ok := parseName(name)
		if !ok || processAlive(pid, start) {
			continue
		}
		if err := killAll(name); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ipCommand("netns", "del", name); err != nil {
			if _, statErr := os.Stat(netnsDir + "/" + name); errors.Is(statErr, os.ErrNotExist) {
				continue // another process's sweep removed it meanwhile
			}
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// parseName reads PID and START from "sushkanet-PID-START-…".
func parseName(name string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(name, Prefix)
	if !found {
		return 0, 0, false
	}
	fields := strings.SplitN(rest, "-", 3)
	if len(fields) < 3 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(fields[0])
	start, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

// processAlive tells whether process pid runs and started at start (so a
// pid reused by another process counts as gone).
func processAlive(pid int, start uint64) bool {
	got, err := startTimeOf(strconv.Itoa(pid))
	return err == nil && got == start
}

func processStartTime() (uint64, error) { return startTimeOf("self") }

// startTimeOf reads a process's start time (clock ticks after boot: field
// 22 of /proc/PID/stat, counted after the command's closing parenthesis).
func startTimeOf(pid string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no command field", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3 // fields 1 (pid) and 2 (comm) are before i; index 0 is field 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}

// pickSubnet returns the first /24 of subnetRange that no route of the
// root namespace (any table) overlaps. The nodes never see the host's
// routes; the check keeps a Net's addresses from ever meaning a real
// network on this machine, in logs or in a mistaken dial from the root
// namespace.
func pickSubnet() (netip.Prefix, error) {
	out, err := ipOutput("-j", "-4", "route", "show", "table", "all")
	if err != nil {
		return netip.Prefix{}, err
	}
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return netip.Prefix{}, fmt.Errorf("ip -j route: %w", err)
	}
	var used []netip.Prefix
	for _, r := range routes {
		if r.Dst == "default" {
			continue // overlaps everything and means no network of its own
		}
		dst := r.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil {
			used = append(used, p)
		}
	}
	base := subnetRange.Addr().As4()
	for i := 0; i < 1<<(24-subnetRange.Bits()); i++ {
		a := base
		a[1] += byte(i >> 8)
		a[2] = byte(i)
		candidate := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		free := true
		for _, p := range used {
			if p.Overlaps(candidate) {
				free = false
				break
			}
		}
		if free {
			return candidate, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /24 of %s is routed on this host", subnetRange)
}

// ipCommand runs ip with args, bounded by commandTimeout.
func ipCommand(args ...string) error {
	_, err := ipOutput(args...)
	return err
}

// ipOutput runs ip with args and returns its standard output; an error
// carries what it printed.
func ipOutput(args ...string) (string, error) {
	return runTool(nil, "ip", args...)
}

// ipBatch runs ip's commands in script (one a line) in namespace ns, in
// one process.
func ipBatch(ns, script string) error {
	_, err := runTool(strings.NewReader(script), "ip", "-n", ns, "-batch", "-")
	return err
}

func runTool(stdin *strings.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Require skips the test, naming what is missing, unless this machine can
// run a Net: Linux, root, iproute2's ip and tc, /dev/net/tun and a
// namespace that can be created. When CI is set it fails the test instead:
// CI must run these tests (.ci/run installs iproute2).
func Require(t testing.TB) {
	t.Helper()
	if reason := requirement(); reason != "" {
		Unavailable(t, reason)
	}
}

// Unavailable skips the test because the machine lacks what reason names,
// or fails it when CI is set (CI must run every test of this package).
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("netns: %s (CI is set: these tests must run)", reason)
	}
	t.Skipf("netns: %s", reason)
}

var requirement = sync.OnceValue(func() string {
	if runtime.GOOS != "linux" {
		return "network namespaces need Linux, not " + runtime.GOOS
	}
	if os.Geteuid() != 0 {
		return "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN for ip netns add and TUN devices)"
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found: install Debian's iproute2"
		}
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("cannot open /dev/net/tun (CONFIG_TUN): %v", err)
	}
	_ = unix.Close(fd)
	start, err := selfStart()
	if err != nil {
		return err.Error()
	}
	probe := fmt.Sprintf("%s%d-%d-%d-probe", Prefix, os.Getpid(), start, netCounter.Add(1))
	if err := ipCommand("netns", "add", probe); err != nil {
		return fmt.Sprintf("cannot create a network namespace: %v", err)
	}
	if err := ipCommand("netns", "del", probe); err != nil {
		return fmt.Sprintf("cannot delete a network namespace: %v", err)
	}
	return ""
})
