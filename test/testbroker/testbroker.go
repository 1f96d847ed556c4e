// Package testbroker starts a real Sushka broker for tests: the sushka
// binary built into a temporary directory and run as a child process on a
// free 127.0.0.1 port, with its data directory in t.TempDir() (Start), or
// the broker package served in the test's own process (StartInProcess).
package testbroker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Binary builds ./cmd/sushka once per test process and returns its path;
// $SUSHKA_TEST_BINARY, when set, names a prebuilt binary to test instead.
// Call Cleanup from TestMain to remove the build.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SUSHKA_TEST_BINARY"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sushka-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "sushka")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", buildBin, "github.com/sushka-io/sushka/cmd/sushka")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sushka: %v\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Cleanup removes the built binary; call it at the end of TestMain.
//
// Binary builds once per process, so Cleanup is for the end of the
// process (Main calls it); called from a test's t.Cleanup it would remove
// the binary under the package's later tests.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// Proc is a running broker process.
type Proc struct {
	Addr    string // host:port of the Kafka listener (StartListeners: the first listener's)
	Admin   string // host:port of the admin HTTP listener (/metrics, /healthz)
	DataDir string
	// Listeners maps each listener's name to its host:port: {"PLAINTEXT":
	// Addr} for Start, one entry per name for StartListeners.
	Listeners map[string]string
	cmd       *exec.Cmd
	log       *SyncBuffer
	done      chan struct{}
}

// Pid is the broker process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Log returns what the broker printed so far.
func (p *Proc) Log() string { return p.log.String() }

// FreePort returns a port that was free a moment ago on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs `sushka serve` from bin on a free 127.0.0.1 port with a fresh
// data directory, waits until it accepts connections and stops it (SIGTERM,
// then SIGKILL) when the test ends.
func Start(t testing.TB, bin string, extraArgs ...string) *Proc {
	t.Helper()
	return start(t, bin, []string{"PLAINTEXT"}, func(addrs []string) []string {
		return []string{"--listen", addrs[0]}
	}, extraArgs)
}

// StartListeners is Start with one listener per name instead of --listen:
// each name (a security protocol such as "SASL_SSL", or a name that
// extraArgs map to one with --listener-security-protocol-map) gets a free
// 127.0.0.1 port in Kafka's --listeners "NAME://host:port,...". Proc.Addr
// is the first listener's address, Proc.Listeners has them all; the broker
// is ready when every listener accepts connections.
func StartListeners(t testing.TB, bin string, names []string, extraArgs ...string) *Proc {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("testbroker.StartListeners: no listener names")
	}
	return start(t, bin, names, func(addrs []string) []string {
		ls := make([]string, len(names))
		for i, name := range names {
			ls[i] = name + "://" + addrs[i]
		}
		return []string{"--listeners", strings.Join(ls, ",")}
	}, extraArgs)
}

// start runs the broker with listenArgs(addresses), one free 127.0.0.1
// address per listener name, trying fresh ports up to three times.
func start(t testing.TB, bin string, names []string, listenArgs func(addrs []string) []string, extraArgs []string) *Proc {
	t.Helper()
	dataDir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addrs := make([]string, len(names))
		listeners := make(map[string]string, len(names))
		for i, name := range names {
			addrs[i] = "127.0.0.1:" + strconv.Itoa(FreePort(t))
			listeners[name] = addrs[i]
		}
		admin := "127.0.0.1:" + strconv.Itoa(FreePort(t))
		p := &Proc{Addr: addrs[0], Admin: admin, DataDir: dataDir, Listeners: listeners, log: &SyncBuffer{}, done: make(chan struct{})}
		args := append(append([]string{"serve", "--data-dir", dataDir}, listenArgs(addrs)...), "--admin-listen", admin)
		args = append(args, extraArgs...)
		p.cmd = exec.Command(bin, args...)
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		p.cmd.Env = append(os.Environ(), "SUSHKA_BROKERS="+p.Addr)
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		if lastErr = p.waitReady(20*time.Second, addrs); lastErr == nil {
			t.Cleanup(func() { p.Stop(t) })
			return p
		}
		p.Stop(t)
	}
	t.Fatalf("sushka serve did not start: %v", lastErr)
	return nil
}

func (p *Proc) waitReady(d time.Duration, addrs []string) error {
	deadline := time.Now().Add(d)
	for _, addr := range addrs {
		for {
			select {
			case <-p.done:
				return fmt.Errorf("exited early: %v\n%s", p.cmd.ProcessState, p.log.String())
			default:
			}
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no listener on %s after %s\n%s", addr, d, p.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Stop ends the broker gracefully (SIGTERM), killing it after 10 s.
func (p *Proc) Stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	if Terminate(p.cmd, p.done, 10*time.Second) {
		t.Logf("sushka serve did not stop within 10s of SIGTERM; killed\n%s", p.log.String())
	}
}

// Terminate ends a started process gracefully (SIGTERM), killing it if it
// has not exited (done closed) within grace; it reports whether it had to
// kill it.
func Terminate(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) (killed bool) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return false
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
		return true
	}
}

// SyncBuffer is a bytes.Buffer safe for a child process's output and a
// concurrent reader.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
