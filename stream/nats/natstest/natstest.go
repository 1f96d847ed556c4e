// Package natstest runs a real nats-server with JetStream for tests and
// benchmarks of the stream/nats transport: the program in test/natsserver
// (a Go module of its own, so that nats-server stays out of Sushka's
// go.mod), built once with `go build` into the user's cache directory and
// started as a child process on 127.0.0.1 with a free port and its own
// store directory.
//
// Start(t) is for tests: it stops the server when the test ends, and when
// the server cannot be built or started it skips the test with the reason,
// or fails it under CI (the environment variable CI set), so CI never
// passes by skipping. Launch is the same without a testing.TB, for a
// benchmark command.
//
// $SUSHKA_NATS_SERVER, when set, names a prebuilt natsserver binary to run
// instead of building one.
package natstest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sushka-io/sushka/test/testbroker"
)

// startTimeout bounds how long Launch waits for the server's URL.
const startTimeout = 30 * time.Second

// stopTimeout bounds how long Close waits for a graceful exit before it
// kills the process.
const stopTimeout = 10 * time.Second

// Start runs a server for t and returns its client URL (nats://127.0.0.1:PORT).
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t).URL
}

// StartServer is Start returning the Server, for tests that restart or
// stop it themselves.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s, err := Launch(Config{StoreDir: t.TempDir()})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("natstest: %v", err)
		}
		t.Skipf("natstest: no nats-server (set CI to make this a failure): %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("natstest: %v", err)
		}
	})
	return s
}

// Config says where a server listens and keeps its data.
type Config struct {
	// StoreDir is JetStream's file storage directory (required).
	StoreDir string
	// Listen is the client listener, host:port; default 127.0.0.1:0 (a
	// free port chosen by the kernel).
	Listen string
}

// Server is a running nats-server process.
type Server struct {
	URL      string // client URL, nats://host:port
	StoreDir string

	listen string // host:port it was asked to listen on (Restart reuses the port)
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}          // closed when the process has exited
	log    *testbroker.SyncBuffer // its standard error
}

// Launch builds the server program if needed and starts it.
func Launch(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natstest: Config.StoreDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{StoreDir: cfg.StoreDir, listen: cfg.Listen, done: make(chan struct{}), log: &testbroker.SyncBuffer{}}
	s.cmd = exec.Command(bin, "-listen", cfg.Listen, "-store-dir", cfg.StoreDir)
	s.cmd.Stderr = s.log
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("natstest: starting %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	urls := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		if lines.Scan() {
			urls <- strings.TrimSpace(lines.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case s.URL = <-urls:
	case <-s.done:
		return nil, fmt.Errorf("natstest: nats-server exited before it was ready: %s", s.log.String())
	case <-time.After(startTimeout):
		_ = s.Close()
		return nil, fmt.Errorf("natstest: nats-server printed no URL within %v: %s", startTimeout, s.log.String())
	}
	if u, err := url.Parse(s.URL); err != nil || u.Scheme != "nats" {
		_ = s.Close()
		return nil, fmt.Errorf("natstest: nats-server printed %q, not a nats:// URL", s.URL)
	}
	return s, nil
}

// Close stops the server: it closes its standard input (the program shuts
// down when it does), waits up to stopTimeout, then kills it. The store
// directory stays.
func (s *Server) Close() error {
	_ = s.stdin.Close()
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("natstest: nats-server did not stop within %v; killed: %s", stopTimeout, s.log.String())
	}
}

// Restart stops the server and starts it again on the same port with the
// same store directory, so clients reconnect to the same URL and find
// their streams and consumers.
func (s *Server) Restart() error {
	if err := s.Close(); err != nil {
		return err
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return err
	}
	next, err := Launch(Config{StoreDir: s.StoreDir, Listen: u.Host})
	if err != nil {
		return err
	}
	if next.URL != s.URL {
		_ = next.Close()
		return fmt.Errorf("natstest: restarted on %s, was %s", next.URL, s.URL)
	}
	*s = *next
	return nil
}

// Log returns what the server wrote to its standard error.
func (s *Server) Log() string { return s.log.String() }

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Binary returns the path of the natsserver program: $SUSHKA_NATS_SERVER,
// or test/natsserver built once per process into
// os.UserCacheDir()/sushka/natsserver/<hash of its sources>, so later runs
// (and the other test processes of one `go test`) reuse it.
func Binary() (string, error) {
	if p := os.Getenv("SUSHKA_NATS_SERVER"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() { buildBin, buildErr = build() })
	return buildBin, buildErr
}

func build() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("natstest: cannot locate the source tree (set SUSHKA_NATS_SERVER)")
	}
	src := filepath.Join(filepath.Dir(self), "..", "..", "..", "test", "natsserver")
	hash := sha256.New()
	fmt.Fprintln(hash, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", fmt.Errorf("natstest: reading the server's source (set SUSHKA_NATS_SERVER to a built test/natsserver): %w", err)
		}
		fmt.Fprintf(hash, "%s %d\n", name, len(b))
		hash.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sushka", "natsserver", hex.EncodeToString(hash.Sum(nil))[:16])
	bin := filepath.Join(dir, "natsserver")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	// Build beside the target and rename, so that a concurrent test
	// process never runs a half-written binary.
	tmp, err := os.CreateTemp(dir, "natsserver-*.tmp")
	if err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp.Name(), ".")
	cmd.Dir = src
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("natstest: go build in %s: %v\n%s", src, err, out.String())
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	return bin, nil
}
