package streambench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sushka-io/sushka/bench"
)

// Child is a `sushka serve` process started for the measurement, so that
// the broker does not share the generator's process (MEASURING.md rule 8).
type Child struct {
	Binary  string
	Addr    string
	Admin   string
	DataDir string
	cmd     *exec.Cmd
	done    chan struct{}
	log     syncBuffer
}

// StartChild runs bin serve with its data in dataDir and extra arguments
// after the ones it sets, and waits until it accepts connections. listen
// is its Kafka and admin listeners, "HOST:PORT,HOST:PORT", or "" for free
// 127.0.0.1 ports.
func StartChild(bin, dataDir, listen string, extra ...string) (*Child, error) {
	addr, admin, err := childAddrs(listen)
	if err != nil {
		return nil, err
	}
	c := &Child{Binary: bin, Addr: addr, Admin: admin, DataDir: dataDir, done: make(chan struct{})}
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", addr, "--admin-listen", admin}, extra...)
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = &c.log, &c.log
	dieWithParent(c.cmd)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-c.done:
			return nil, fmt.Errorf("%s serve exited at start: %v\n%s", bin, c.cmd.ProcessState, c.log.String())
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("%s serve: no listener on %s after 20s\n%s", bin, addr, c.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Describe is the passport's line for the child: how it runs, its runtime
// profile, storage and durability from its /v1/runtime.
func (c *Child) Describe(ctx context.Context) string {
	s := fmt.Sprintf("sushka serve as a child process (pid %d, %s, built from this repository), on %s", c.cmd.Process.Pid, c.Binary, c.Addr)
	// The admin listener may come up a moment after the Kafka one.
	rt, err := bench.FetchRuntime(ctx, c.Admin)
	for i := 0; err != nil && i < 50 && ctx.Err() == nil; i++ {
		time.Sleep(100 * time.Millisecond)
		rt, err = bench.FetchRuntime(ctx, c.Admin)
	}
	if err != nil {
		return s + "; runtime profile, storage and durability unknown (" + err.Error() + ")"
	}
	return s + fmt.Sprintf("; %s GOMAXPROCS=%d GOGC=%s GOMEMLIMIT=%s; storage %s (data dir %s); durability %s",
		rt.GoVersion, rt.GOMAXPROCS, rt.GOGC, rt.GOMEMLIMIT, rt.Storage, rt.DataDir, rt.Durability)
}

// Stop ends the child gracefully (SIGTERM), killing it after 10 s.
func (c *Child) Stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// Log is what the child printed.
func (c *Child) Log() string { return c.log.String() }

func childAddrs(listen string) (addr, admin string, err error) {
	if listen != "" {
		var ok bool
		if addr, admin, ok = strings.Cut(listen, ","); !ok || addr == "" || admin == "" {
			return "", "", fmt.Errorf("the child's listeners %q: want HOST:PORT,HOST:PORT (Kafka, admin)", listen)
		}
		return addr, admin, nil
	}
	if addr, err = freeAddr(); err == nil {
		admin, err = freeAddr()
	}
	return addr, admin, err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// syncBuffer is a bytes.Buffer safe for a child's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TempDataDir makes a fresh data directory for a child under parent ("":
// the system's temporary directory).
func TempDataDir(parent string) (string, error) {
	return os.MkdirTemp(parent, "sushka-bench-stream-")
}
