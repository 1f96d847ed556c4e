package netns

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/test/testbroker"
)

// logGate writes child processes' output to the test log, line by line,
// until the Net is removed (t.Log after a test's end panics).
type logGate struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (g *logGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// lineLog is one process's output: kept whole (for Broker.Log) and copied
// to the test log with the node's name before each line.
type lineLog struct {
	gate    *logGate
	prefix  string
	all     testbroker.SyncBuffer
	partial []byte // guarded by gate.mu
}

func (l *lineLog) Write(p []byte) (int, error) {
	_, _ = l.all.Write(p)
	l.gate.mu.Lock()
	defer l.gate.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if !l.gate.closed {
			l.gate.t.Logf("%s: %s", l.prefix, l.partial[:i])
		}
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// Command returns a command that runs name with args inside the node (`ip
// netns exec`, which execs the program itself: the process's id is the
// program's). Its output goes to the test log, prefixed with the node's
// name; it gets SIGKILL if the test process dies, and the Net's cleanup
// kills it if it still runs then.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.ns, name}, args...)...)
	out := &lineLog{gate: n.net.logs, prefix: n.name}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.net.cmdsMu.Lock()
	n.net.cmds = append(n.net.cmds, cmd)
	n.net.cmdsMu.Unlock()
	return cmd
}

// BrokerPort is the Kafka listener's port of a Broker on its node.
const BrokerPort = 9092

// brokerReadyTimeout bounds a broker's start until it answers ApiVersions.
const brokerReadyTimeout = 30 * time.Second

// AdminAddr is a Broker's admin listener (/metrics, /healthz), on its
// node's loopback: reached with the node's own DialContext, never across
// the Net.
const AdminAddr = "127.0.0.1:9644"

// Broker is `sushka serve` running in a node: its Kafka listener on the
// node's address, port BrokerPort; its admin listener at AdminAddr.
type Broker struct {
	Node    *Node
	Addr    string // host:port of the Kafka listener (advertised as is)
	DataDir string // kept across Kill and Restart

	t    testing.TB
	bin  string
	args []string

	mu   sync.Mutex // guards cmd, done, log
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *lineLog
}

// StartBroker runs `sushka serve` (the binary at bin, testbroker.Binary's)
// in the node with a data directory in t.TempDir() and extraArgs after the
// harness's own (--data-dir, --listen, --admin-listen), waits until it
// answers ApiVersions, and stops it when the test ends. It fails the test
// if the broker does not start.
func (n *Node) StartBroker(t testing.TB, bin string, extraArgs ...string) *Broker {
	t.Helper()
	return StartBrokers(t, bin, []*Node{n}, func(*Node) []string { return extraArgs })[0]
}

// StartBrokers is StartBroker on each node, with argsFor(node) as its
// extra arguments (a cluster's node id, peer listener, voters: every
// node's address is known before any starts, Node.HostPort). All are
// started before any is waited for, so brokers that need each other to
// answer can start together.
func StartBrokers(t testing.TB, bin string, nodes []*Node, argsFor func(*Node) []string) []*Broker {
	t.Helper()
	brokers := make([]*Broker, len(nodes))
	for i, node := range nodes {
		b := &Broker{
			Node:    node,
			Addr:    node.HostPort(BrokerPort),
			DataDir: filepath.Join(t.TempDir(), "data-"+node.name),
			t:       t,
			bin:     bin,
		}
		b.args = append([]string{"serve", "--data-dir", b.DataDir, "--listen", b.Addr,
			"--admin-listen", AdminAddr}, argsFor(node)...)
		t.Cleanup(b.Stop)
		if err := b.launch(); err != nil {
			t.Fatalf("netns: broker on %s: %v", node, err)
		}
		brokers[i] = b
	}
	for _, b := range brokers {
		if err := b.WaitReady(brokerReadyTimeout); err != nil {
			t.Fatalf("netns: broker on %s: %v", b.Node, err)
		}
	}
	return brokers
}

// launch starts the broker process.
func (b *Broker) launch() error {
	cmd := b.Node.Command(context.Background(), b.bin, b.args...)
	log := cmd.Stdout.(*lineLog)
	if err := os.MkdirAll(b.DataDir, 0o755); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done, b.log = cmd, done, log
	b.mu.Unlock()
	return nil
}

// Restart starts the broker again on the same data directory and
// arguments after Kill or Stop (it kills a broker still running first),
// and waits until it is ready. It fails the test if the broker does not
// start.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Kill()
	err := b.launch()
	if err == nil {
		err = b.WaitReady(brokerReadyTimeout)
	}
	if err != nil {
		b.t.Fatalf("netns: restarting the broker on %s: %v", b.Node, err)
	}
}

// Kill ends the broker with SIGKILL (kill -9: no shutdown, unsynced
// writes lost as at a crash) and waits until it has exited.
func (b *Broker) Kill() {
	cmd, done := b.process()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Stop ends the broker gracefully (SIGTERM), with SIGKILL after 10 s.
func (b *Broker) Stop() {
	cmd, done := b.process()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		b.t.Logf("netns: broker on %s did not stop within 10 s of SIGTERM; killed", b.Node)
	}
}

func (b *Broker) process() (*exec.Cmd, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd, b.done
}

// Running tells whether the broker process has not exited.
func (b *Broker) Running() bool {
	_, done := b.process()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the running (or last) broker process's id.
func (b *Broker) Pid() int {
	cmd, _ := b.process()
	return cmd.Process.Pid
}

// Log returns what the current (or last) broker process printed.
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log == nil {
		return ""
	}
	return b.log.all.String()
}

// WaitReady waits up to timeout until the broker answers ApiVersions on
// its address, asked from its own node (so a fault on the Net does not
// delay it: the node's own traffic stays inside its namespace).
func (b *Broker) WaitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, done := b.process()
	var last error
	for {
		if done != nil {
			select {
			case <-done:
				return fmt.Errorf("exited before it answered ApiVersions\n%s", b.Log())
			default:
			}
		}
		if last = apiVersions(ctx, b.Node, b.Addr); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no ApiVersions answer from %s within %s: %v\n%s", b.Addr, timeout, last, b.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// apiVersions asks address for ApiVersions (v0) from node and checks the
// answer: error code 0 and ApiVersions itself among the keys.
func apiVersions(ctx context.Context, node *Node, address string) error {
	attempt, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := node.DialContext(attempt, "tcp", address)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := attempt.Deadline()
	_ = conn.SetDeadline(deadline)
	req := kmsg.NewPtrApiVersionsRequest()
	const correlationID = 1
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("netns")).AppendRequest(nil, req, correlationID)
	if _, err := conn.Write(frame); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 1<<20 {
		return fmt.Errorf("ApiVersions response of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return err
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != correlationID {
		return fmt.Errorf("ApiVersions response for correlation id %d, want %d", got, correlationID)
	}
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if err := resp.ReadFrom(body[4:]); err != nil {
		return err
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("ApiVersions error code %d", resp.ErrorCode)
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == req.Key() {
			return nil
		}
	}
	return errors.New("ApiVersions answer without ApiVersions")
}
