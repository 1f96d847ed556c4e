package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sushka-io/sushka/test/testbroker"
)

func TestMain(m *testing.M) { testbroker.Main(m) }

// namespacesPresent returns those of names that exist now.
func namespacesPresent(t *testing.T, names []string) []string {
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var present []string
	for _, e := range entries {
		if slices.Contains(names, e.Name()) {
			present = append(present, e.Name())
		}
	}
	return present
}

// The child runs: TestChildProcess is a helper run by the tests below in
// a process of its own (its mode in SUSHKA_NETNS_CHILD), so that a test
// can fail, panic or be killed without failing the parent. It prints
// "NAMESPACES a b …" as soon as its Net exists, and "SLEEP pid" for a
// process it started in a node.
const childEnv = "SUSHKA_NETNS_CHILD"

func TestChildProcess(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("a helper: TestCleanupAfterFailure and TestSweep run it in a child process")
	}
	t.Run("deliberate", func(t *testing.T) {
		n := New(t, "a", "b")
		fmt.Printf("NAMESPACES %s\n", strings.Join(n.Namespaces(), " "))
		sleep := n.Node("a").Command(context.Background(), "sleep", "60")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SLEEP %d\n", sleep.Process.Pid)
		go func() { _ = sleep.Wait() }() // reaped once killed, so it leaves no zombie
		switch mode {
		case "fatal":
			t.Fatal("deliberate failure (the parent test expects it)")
		case "panic":
			panic("deliberate panic (the parent test expects it)")
		case "hang":
			fmt.Println("READY")
			time.Sleep(time.Minute) // the parent kills the process: no cleanup runs
		}
	})
	if mode == "fatal" {
		// Still in the child, whose process (and so Pdeathsig) lives on:
		// the subtest's cleanup itself must have ended the sleep.
		fmt.Println("AFTER")
	}
}

// runChild starts this test binary on TestChildProcess in mode and returns
// the command, a reader of its output lines, and the namespaces it
// reported.
type child struct {
	cmd        *exec.Cmd
	lines      chan string
	namespaces []string
	sleepPid   int
	output     strings.Builder
}

func startChild(t *testing.T, mode string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	return c
}

// readUntil reads the child's output until a line starts with stop (or
// the output ends), noting NAMESPACES and SLEEP.
func (c *child) readUntil(t *testing.T, stop string) bool {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return false
			}
			c.output.WriteString(line + "\n")
			if rest, found := strings.CutPrefix(line, "NAMESPACES "); found {
				c.namespaces = strings.Fields(rest)
			}
			if rest, found := strings.CutPrefix(line, "SLEEP "); found {
				c.sleepPid, _ = strconv.Atoi(rest)
			}
			if stop != "" && strings.HasPrefix(line, stop) {
				return true
			}
		case <-timeout:
			t.Fatalf("child: no %q within 60 s; output:\n%s", stop, c.output.String())
		}
	}
}

// exited reports whether process pid is gone (or a zombie).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// TestCleanupAfterFailure: a Net created in a subtest that calls t.Fatal,
// or panics, leaves no namespace and no process behind.
func TestCleanupAfterFailure(t *testing.T) {
	Require(t)
	for _, mode := range []string{"fatal", "panic"} {
		t.Run(mode, func(t *testing.T) {
			c := startChild(t, mode)
			if mode == "fatal" {
				if !c.readUntil(t, "AFTER") {
					t.Fatalf("the child ended before its subtest's end; output:\n%s", c.output.String())
				}
				// The child lives: its subtest's cleanup, not Pdeathsig,
				// ended what ran in the namespace.
				if c.sleepPid == 0 || !exited(c.sleepPid) {
					t.Errorf("the process started in the failed subtest's Net (pid %d) still runs", c.sleepPid)
				}
			}
			c.readUntil(t, "")
			err := c.cmd.Wait()
			if err == nil {
				t.Fatalf("the child passed; output:\n%s", c.output.String())
			}
			if len(c.namespaces) != 2 {
				t.Fatalf("the child reported namespaces %q; output:\n%s", c.namespaces, c.output.String())
			}
			if left := namespacesPresent(t, c.namespaces); len(left) > 0 {
				t.Errorf("after the child's %s, namespaces %q are left", mode, left)
			}
		})
	}
}

// TestSweep: a run killed before its cleanup leaves its namespaces (the
// check that finds them is the one TestCleanupAfterFailure relies on);
// Sweep removes them, and namespaces of dead runs or reused pids, but not
// a live process's nor one without the prefix.
func TestSweep(t *testing.T) {
	live := New(t, "live") // this process's: must stay (and New's own sweep is done)
	c := startChild(t, "hang")
	c.readUntil(t, "READY")
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	if left := namespacesPresent(t, c.namespaces); len(left) != 2 {
		t.Fatalf("a child killed with SIGKILL left %q of %q: want both (no cleanup ran)", left, c.namespaces)
	}

	start, err := selfStart()
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	deadPid, _ := strconv.Atoi(strings.TrimSpace(string(pidMax)))
	deadPid++                                                                // never a live process
	dead := fmt.Sprintf("%s%d-%d-%d-x", Prefix, deadPid, start, os.Getpid()) // our pid keeps it ours
	reused := fmt.Sprintf("%s%d-%d-1-x", Prefix, os.Getpid(), start+1)
	other := fmt.Sprintf("sushkatest-other-%d", os.Getpid()) // not the harness's
	for _, ns := range []string{dead, reused, other} {
		if err := ipCommand("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, ns := range namespacesPresent(t, []string{dead, reused, other}) {
			_ = ipCommand("netns", "del", ns)
		}
	})

	removed, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	// Another test process's sweep (a parallel package) may remove some of
	// the leftovers first: what counts is that they are gone, and that
	// Sweep removed nothing it must keep.
	gone := append([]string{dead, reused}, c.namespaces...)
	if left := namespacesPresent(t, gone); len(left) > 0 {
		t.Errorf("after Sweep, %q are left", left)
	}
	keep := append([]string{other}, live.Namespaces()...)
	if got := namespacesPresent(t, keep); len(got) != len(keep) {
		t.Errorf("Sweep removed some of %q: %q are left", keep, got)
	}
	for _, ns := range removed {
		if slices.Contains(keep, ns) {
			t.Errorf("Sweep reported removing %s, which it must keep", ns)
		}
	}
	t.Logf("Sweep removed %q", removed)
	if c.sleepPid == 0 || !exited(c.sleepPid) {
		t.Errorf("the killed child's process in its namespace (pid %d) still runs", c.sleepPid)
	}
}

// TestNamespacesRemoved: New's namespaces exist while the test runs, each
// with its loopback up and its address, and are gone after its cleanup.
func TestNamespacesRemoved(t *testing.T) {
	Require(t)
	var names []string
	t.Run("net", func(t *testing.T) {
		n := New(t, "a", "b", "c")
		names = n.Namespaces()
		if got := namespacesPresent(t, names); len(got) != 3 {
			t.Fatalf("namespaces %q present of %q", got, names)
		}
		for _, node := range n.Nodes() {
			out, err := ipOutput("-n", node.Namespace(), "-4", "-o", "addr", "show")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "127.0.0.1/8") || !strings.Contains(out, node.Addr().String()+"/24") {
				t.Errorf("%s: addresses %q: want 127.0.0.1/8 and %s/24", node, out, node.Addr())
			}
		}
		if !n.Subnet().Contains(n.Node("c").Addr()) || n.Node("a").Addr() == n.Node("b").Addr() {
			t.Errorf("addresses %v %v %v in %v", n.Node("a").Addr(), n.Node("b").Addr(), n.Node("c").Addr(), n.Subnet())
		}
	})
	if left := namespacesPresent(t, names); len(left) > 0 {
		t.Errorf("after the subtest, %q are left", left)
	}
}

// mustDial dials address from node within 5 s, or fails the test; the
// connection is closed when the test ends, if not before.
func mustDial(tb testing.TB, node *Node, network, address string) net.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := node.DialContext(ctx, network, address)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// echoServer serves an echo of every byte on node's port, until the test
// ends.
func echoServer(t *testing.T, node *Node, port int) string {
	t.Helper()
	l, err := node.Listen("tcp", node.HostPort(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return node.HostPort(port)
}

// roundTrips measures count one-byte round trips on conn, sorted.
func roundTrips(t *testing.T, conn net.Conn, count int) []time.Duration {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	rtts := make([]time.Duration, count)
	b := []byte{1}
	for i := range rtts {
		start := time.Now()
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts
}

// TestDelayRoundTrip: a 50 ms delay on one node's link adds 50 ms to every
// round trip through it; on both ends, 100 ms; ended, it is gone.
func TestDelayRoundTrip(t *testing.T) {
	n := New(t, "a", "b")
	a, b := n.Node("a"), n.Node("b")
	conn := mustDial(t, b, "tcp", echoServer(t, a, 7000))
	const samples = 15
	base := roundTrips(t, conn, samples)
	t.Logf("no delay: round trip min %v median %v max %v", base[0], base[samples/2], base[samples-1])
	if base[samples/2] >= 20*time.Millisecond {
		t.Fatalf("round trip without delay: median %v, want under 20 ms", base[samples/2])
	}
	const delay = 50 * time.Millisecond
	for _, c := range []struct {
		name   string
		shaped []*Node
		want   time.Duration
	}{
		{"one end", []*Node{a}, delay},
		{"both ends", []*Node{a, b}, 2 * delay},
	} {
		for _, node := range c.shaped {
			if err := node.Shape(Shaping{Delay: delay}); err != nil {
				t.Fatal(err)
			}
		}
		rtts := roundTrips(t, conn, samples)
		t.Logf("%s delayed %v: round trip min %v median %v max %v", c.name, delay, rtts[0], rtts[samples/2], rtts[samples-1])
		// Every packet waits the delay; the bound leaves a loaded 2-core
		// machine 40 ms of scheduling on the median.
		if rtts[0] < c.want || rtts[samples/2] >= c.want+40*time.Millisecond {
			t.Errorf("%s: round trips %v, want all at least %v and the median under %v", c.name, rtts, c.want, c.want+40*time.Millisecond)
		}
	}
	for _, node := range []*Node{a, b} {
		if err := node.Shape(Shaping{}); err != nil {
			t.Fatal(err)
		}
	}
	after := roundTrips(t, conn, samples)
	if after[samples/2] >= 20*time.Millisecond {
		t.Errorf("round trip after the delay ended: median %v, want under 20 ms", after[samples/2])
	}
	if err := a.Shape(Shaping{Loss: 2}); err == nil {
		t.Error("Shape accepted a loss of 2")
	}
}

// datagrams sends count numbered datagrams from node from to addr and
// returns the numbers that arrived at pc within wait after the last, with
// each one's one-way time.
func datagrams(t *testing.T, from *Node, pc net.PacketConn, addr string, count int, wait time.Duration) (got []int, oneWay []time.Duration) {
	t.Helper()
	conn := mustDial(t, from, "udp", addr)
	defer conn.Close()
	sent := make([]time.Time, count)
	type arrival struct {
		seq int
		at  time.Time
	}
	arrivals := make(chan arrival, count)
	readerDone := make(chan struct{})
	_ = pc.SetReadDeadline(time.Time{}) // the last call's deadline is past
	go func() {
		defer close(readerDone)
		buf := make([]byte, 64)
		for {
			m, _, err := pc.ReadFrom(buf)
			if err != nil {
				return // the deadline set below
			}
			if seq, err := strconv.Atoi(string(buf[:m])); err == nil && seq < count {
				arrivals <- arrival{seq, time.Now()}
			}
		}
	}()
	for i := range count {
		sent[i] = time.Now()
		if _, err := conn.Write([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(wait)
	// Stop the reader before returning, so that it takes nothing meant
	// for the next call on pc.
	_ = pc.SetReadDeadline(time.Now())
	<-readerDone
	close(arrivals)
	for a := range arrivals {
		got = append(got, a.seq)
		oneWay = append(oneWay, a.at.Sub(sent[a.seq]))
	}
	return got, oneWay
}

func udpListener(t *testing.T, node *Node, port int) (net.PacketConn, string) {
	t.Helper()
	pc, err := node.ListenPacket("udp", node.HostPort(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc, node.HostPort(port)
}

// TestJitterAndLoss: jitter keeps each delay within ±jitter and the order
// of packets; a loss of one half drops about half.
func TestJitterAndLoss(t *testing.T) {
	n := New(t, "a", "b")
	a, b := n.Node("a"), n.Node("b")
	pc, addr := udpListener(t, b, 7001)

	if err := a.Shape(Shaping{Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	got, oneWay := datagrams(t, a, pc, addr, 100, 500*time.Millisecond)
	if len(got) != 100 || !slices.IsSorted(got) {
		t.Fatalf("with jitter, arrived %d of 100 in the order %v: want all, in order", len(got), got)
	}
	slices.Sort(oneWay)
	minimum, median, maximum := oneWay[0], oneWay[len(oneWay)/2], oneWay[len(oneWay)-1]
	t.Logf("delay 30 ms jitter 20 ms: one way min %v median %v max %v", minimum, median, maximum)
	// Every packet waits at least delay-jitter (clamping to the packet
	// before may raise a delay, never lower it) and the delays vary; the
	// median and the maximum get 20 and 100 ms of slack for a loaded
	// machine.
	if minimum < 10*time.Millisecond || median > 70*time.Millisecond || maximum > 150*time.Millisecond {
		t.Errorf("one-way times min %v median %v max %v: want at least 10 ms, the median under 50 ms (+20 ms) and none over 50 ms (+100 ms)", minimum, median, maximum)
	}
	if maximum-minimum < 10*time.Millisecond {
		t.Errorf("one-way times from %v to %v: a jitter of ±20 ms made them vary by less than 10 ms", minimum, maximum)
	}

	if err := a.Shape(Shaping{Loss: 0.5}); err != nil {
		t.Fatal(err)
	}
	before := n.Counters().Lost
	got, _ = datagrams(t, a, pc, addr, 400, 300*time.Millisecond)
	lost := n.Counters().Lost - before
	t.Logf("loss 0.5: %d of 400 arrived, %d counted lost", len(got), lost)
	if len(got) < 120 || len(got) > 280 || int(lost)+len(got) != 400 {
		t.Errorf("loss 0.5: %d of 400 arrived and %d were lost: want 120 to 280, adding up to 400", len(got), lost)
	}
}

// TestPartitions: Block cuts one direction, Partition both, Isolate a node
// from all; Heal ends each. Datagrams, so that one direction shows alone.
func TestPartitions(t *testing.T) {
	n := New(t, "a", "b", "c")
	a, b, c := n.Node("a"), n.Node("b"), n.Node("c")
	pcA, addrA := udpListener(t, a, 7002)
	pcB, addrB := udpListener(t, b, 7002)
	pcC, addrC := udpListener(t, c, 7002)
	reaches := func(from *Node, pc net.PacketConn, addr string) bool {
		got, _ := datagrams(t, from, pc, addr, 5, 100*time.Millisecond)
		return len(got) > 0
	}
	type path struct {
		name string
		from *Node
		pc   net.PacketConn
		addr string
	}
	paths := []path{
		{"a→b", a, pcB, addrB}, {"b→a", b, pcA, addrA},
		{"a→c", a, pcC, addrC}, {"c→a", c, pcA, addrA},
		{"b→c", b, pcC, addrC}, {"c→b", c, pcB, addrB},
	}
	check := func(state string, cut ...string) {
		t.Helper()
		for _, p := range paths {
			want := !slices.Contains(cut, p.name)
			if got := reaches(p.from, p.pc, p.addr); got != want {
				t.Errorf("%s: %s delivers %v, want %v", state, p.name, got, want)
			}
		}
	}
	check("healthy")
	n.Block([]*Node{a}, []*Node{b})
	check("a→b blocked", "a→b")
	n.Heal()
	n.Partition([]*Node{a}, []*Node{b, c})
	check("a | b c", "a→b", "b→a", "a→c", "c→a")
	n.Heal()
	n.Isolate(b)
	check("b isolated", "a→b", "b→a", "b→c", "c→b")
	n.Heal()
	check("healed")
	if n.Counters().Blocked == 0 {
		t.Error("no packet counted Blocked")
	}
}

// TestBandwidthLimit: tbf on a node's link holds what it sends near the
// rate; removed, the link is fast again.
func TestBandwidthLimit(t *testing.T) {
	n := New(t, "a", "b")
	a, b := n.Node("a"), n.Node("b")
	l, err := b.Listen("tcp", b.HostPort(7003))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	received := make(chan int64, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			received <- n
		}
	}()
	send := func(size int) time.Duration {
		t.Helper()
		conn := mustDial(t, a, "tcp", b.HostPort(7003))
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		start := time.Now()
		if _, err := conn.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if got := <-received; got != int64(size) {
			t.Fatalf("received %d of %d bytes", got, size)
		}
		return time.Since(start)
	}
	const rate = 256 << 10 // bytes per second
	const size = 512 << 10
	if err := a.LimitBandwidth(rate); errors.Is(err, ErrNoTBF) {
		Unavailable(t, err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	limited := send(size)
	throughput := float64(size) / limited.Seconds()
	t.Logf("limited to %d B/s: %d bytes in %v (%.0f B/s)", rate, size, limited, throughput)
	if throughput > 1.3*rate || throughput < 0.5*rate {
		t.Errorf("throughput %.0f B/s under a limit of %d B/s: want 0.5 to 1.3 times the limit", throughput, rate)
	}
	if err := a.LimitBandwidth(0); err != nil {
		t.Fatal(err)
	}
	if free := send(size); free > limited/4 {
		t.Errorf("without the limit, %d bytes took %v (limited: %v)", size, free, limited)
	}
}

// TestBrokerThroughPartition: a broker in one namespace and a franz-go
// client in another. Produced records are consumed; under a partition a
// plain producer's produce fails within its delivery timeout and the
// idempotent producer's waits; healed, the same clients go on (the
// waiting record acknowledged once); after kill -9 and a restart every
// acknowledged record is there, at its offset.
func TestBrokerThroughPartition(t *testing.T) {
	n := New(t, "broker", "client")
	brokerNode, clientNode := n.Node("broker"), n.Node("client")
	b := brokerNode.StartBroker(t, testbroker.Binary(t))

	// The admin listener is on the broker node's loopback.
	admin := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: brokerNode.DialContext}}
	resp, err := admin.Get("http://" + AdminAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz on the broker's node: %s", resp.Status)
	}

	const topic = "netns"
	const deliveryTimeout = 4 * time.Second
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addr),
		kgo.Dialer(clientNode.Dialer(time.Second)),
		kgo.DefaultProduceTopic(topic),
		kgo.ProduceRequestTimeout(time.Second),
		kgo.RequestTimeoutOverhead(time.Second),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.RetryTimeout(deliveryTimeout),
		// kgo's idempotent producer never fails a batch it may have
		// written (it retries until the link returns): a produce that
		// fails within the client's timeout needs the plain producer.
		kgo.DisableIdempotentWrite(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	acked := map[int64]string{} // offset → value, of every acknowledged record
	produce := func(what string, count int) {
		t.Helper()
		for i := range count {
			value := fmt.Sprintf("%s-%d", what, i)
			r, err := cl.ProduceSync(ctx, kgo.StringRecord(value)).First()
			if err != nil {
				t.Fatalf("%s: producing %s: %v", what, value, err)
			}
			acked[r.Offset] = value
		}
	}
	produce("before", 20)

	// The same through franz-go's default, idempotent producer: it never
	// fails a batch it may have written, so its produce waits out the
	// partition and is acknowledged once after the heal.
	idempotent, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addr),
		kgo.Dialer(clientNode.Dialer(time.Second)),
		kgo.DefaultProduceTopic(topic),
		kgo.ProduceRequestTimeout(time.Second),
		kgo.RequestTimeoutOverhead(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer idempotent.Close()
	r, err := idempotent.ProduceSync(ctx, kgo.StringRecord("idempotent-before")).First()
	if err != nil {
		t.Fatal(err)
	}
	acked[r.Offset] = "idempotent-before"

	n.Partition([]*Node{clientNode}, []*Node{brokerNode})
	type produced struct {
		r   *kgo.Record
		err error
	}
	waiting := make(chan produced, 1)
	go func() {
		r, err := idempotent.ProduceSync(ctx, kgo.StringRecord("idempotent-during")).First()
		waiting <- produced{r, err}
	}()
	start := time.Now()
	_, err = cl.ProduceSync(ctx, kgo.StringRecord("during")).First()
	took := time.Since(start)
	t.Logf("produce under the partition: %v after %v", err, took)
	if err == nil {
		t.Fatal("a produce across a partition succeeded")
	}
	if !errors.Is(err, kgo.ErrRecordTimeout) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kerr.RequestTimedOut) {
		t.Errorf("produce across a partition: %v, want a timeout", err)
	}
	if took > deliveryTimeout+3*time.Second {
		t.Errorf("produce across a partition failed after %v, want within the delivery timeout %v (+3 s)", took, deliveryTimeout)
	}
	if n.Counters().Blocked == 0 {
		t.Error("the partition blocked no packet")
	}

	select {
	case p := <-waiting:
		t.Fatalf("the idempotent produce across the partition ended: %v", p.err)
	default:
	}

	n.Heal()
	produce("healed", 20)
	select {
	case p := <-waiting:
		if p.err != nil {
			t.Fatalf("the idempotent produce across the partition, after the heal: %v", p.err)
		}
		acked[p.r.Offset] = "idempotent-during"
	case <-time.After(15 * time.Second):
		t.Fatal("the idempotent produce across the partition was not acknowledged within 15 s of the heal")
	}

	pid := b.Pid()
	b.Kill()
	if b.Running() || !exited(pid) {
		t.Fatalf("after Kill, the broker (pid %d) still runs", pid)
	}
	b.Restart()
	if !b.Running() || b.Pid() == pid {
		t.Fatalf("after Restart: running %v, pid %d (was %d)", b.Running(), b.Pid(), pid)
	}
	produce("restarted", 20)

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addr),
		kgo.Dialer(clientNode.Dialer(time.Second)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	end := maxKey(acked)
	seen := map[int64]string{}
	for len(seen) == 0 || maxKey(seen) < end {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed up to %d of %d: %v", maxKey(seen), end, err)
		}
		fetches.EachRecord(func(r *kgo.Record) { seen[r.Offset] = string(r.Value) })
	}
	for o, v := range acked {
		if seen[o] != v {
			t.Errorf("offset %d: acknowledged %q, read %q", o, v, seen[o])
		}
	}
	counts := map[string]int{}
	for o, v := range seen {
		counts[v]++
		if _, ok := acked[o]; !ok && v != "during" {
			t.Errorf("offset %d: read %q, not acknowledged (only the plain producer's failed \"during\" may be there)", o, v)
		}
	}
	for _, v := range []string{"idempotent-before", "idempotent-during"} {
		if counts[v] != 1 {
			t.Errorf("%q read %d times, want once (idempotent producer)", v, counts[v])
		}
	}
	t.Logf("%d acknowledged records read back at their offsets, %d records in all", len(acked), len(seen))
}

func maxKey(m map[int64]string) int64 {
	end := int64(-1)
	for k := range m {
		end = max(end, k)
	}
	return end
}

// TestClientReachesEveryBroker: brokers started together in three nodes
// (StartBrokers, as a cluster's are), a client node that reaches each, and
// a partition that cuts the client from one only.
func TestClientReachesEveryBroker(t *testing.T) {
	n := New(t, "b0", "b1", "b2", "client")
	nodes := []*Node{n.Node("b0"), n.Node("b1"), n.Node("b2")}
	client := n.Node("client")
	var argsSeen []string
	brokers := StartBrokers(t, testbroker.Binary(t), nodes, func(node *Node) []string {
		argsSeen = append(argsSeen, node.Name())
		return []string{"--advertised-addr", node.HostPort(BrokerPort)}
	})
	if !slices.Equal(argsSeen, []string{"b0", "b1", "b2"}) {
		t.Errorf("argsFor called for %q", argsSeen)
	}
	reachable := func() []bool {
		out := make([]bool, len(brokers))
		for i, b := range brokers {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			out[i] = apiVersions(ctx, client, b.Addr) == nil
			cancel()
		}
		return out
	}
	if got := reachable(); !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("from the client, brokers answer %v", got)
	}
	n.Partition([]*Node{client}, []*Node{nodes[1]})
	if got := reachable(); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("client | b1: brokers answer %v, want b1 only cut", got)
	}
	n.Heal()
	if got := reachable(); !slices.Equal(got, []bool{true, true, true}) {
		t.Errorf("healed: brokers answer %v", got)
	}
}
