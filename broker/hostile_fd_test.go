package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHostileFileDescriptorExhaustion runs a broker in a child process (this
// test binary again) with RLIMIT_NOFILE a few descriptors above what it
// uses, opens more connections than it has descriptors for, and checks that
// the broker survives (Serve does not return), says why in its log, and
// serves again once the connections close.
func TestHostileFileDescriptorExhaustion(t *testing.T) {
	if os.Getenv("SUSHKA_FD_CHILD") != "" {
		fdChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostileFileDescriptorExhaustion$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SUSHKA_FD_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	}()

	var addr string
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the child exited before serving; stderr:\n%s", stderr.String())
			}
			if a, found := strings.CutPrefix(line, "ADDR "); found {
				addr = a
			}
		case <-ctx.Done():
			t.Fatal("the child did not start")
		}
	}

	var conns []net.Conn
	for range 40 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			// The kernel completes handshakes the broker cannot accept
			// yet: a refusal means the listener is gone.
			time.Sleep(100 * time.Millisecond)
			t.Fatalf("the broker stopped listening after %d connections (%v); it printed %q; stderr:\n%s", len(conns), err, drain(lines), stderr.String())
		}
		conns = append(conns, nc)
	}
	var printed []string
	if !waitFor(10*time.Second, func() bool {
		printed = append(printed, drain(lines)...)
		return strings.Contains(stderr.String(), "too many open files") || strings.Contains(strings.Join(printed, "\n"), "SERVE ")
	}) {
		t.Fatalf("the broker never ran out of descriptors; stderr:\n%s", stderr.String())
	}
	for _, line := range printed {
		if strings.HasPrefix(line, "SERVE ") {
			t.Fatalf("Serve returned on descriptor exhaustion: %s", line)
		}
	}
	time.Sleep(300 * time.Millisecond) // a few backoff rounds
	for _, line := range drain(lines) {
		if strings.HasPrefix(line, "SERVE ") {
			t.Fatalf("Serve returned on descriptor exhaustion: %s", line)
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the broker exited when out of descriptors (%v); stderr:\n%s", err, stderr.String())
	default:
	}
	for _, nc := range conns {
		nc.Close()
	}
	if !waitFor(10*time.Second, func() bool { return servedOnce(addr) }) {
		t.Fatalf("the broker does not serve again after the descriptors were freed; stderr:\n%s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "accept failed"); n > 20 {
		t.Errorf("accept failures logged %d times: not rate limited", n)
	}
}

// drain returns what lines holds now, without waiting.
func drain(lines <-chan string) []string {
	var out []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return out
			}
			out = append(out, l)
		default:
			return out
		}
	}
}

// servedOnce reports whether a new connection to addr gets an ApiVersions
// answer within a second.
func servedOnce(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	if _, err := nc.Write(encodeRequest(&kmsg.ApiVersionsRequest{Version: 0}, 3)); err != nil {
		return false
	}
	var size [4]byte
	_, err = io.ReadFull(nc, size[:])
	return err == nil
}

// fdChild is the broker side of TestHostileFileDescriptorExhaustion.
func fdChild(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Println("NEW", err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("LISTEN", err)
		os.Exit(2)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Println("FDS", err)
		os.Exit(2)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("RLIMIT", err)
		os.Exit(2)
	}
	lim.Cur = uint64(len(fds) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("RLIMIT", err)
		os.Exit(2)
	}
	go func() {
		err := b.Serve(l)
		if !errors.Is(err, ErrServerClosed) {
			fmt.Println("SERVE", err)
			os.Exit(3)
		}
	}()
	for b.AdvertisedAddr() == "" {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ADDR", b.AdvertisedAddr())
	io.Copy(io.Discard, os.Stdin) // until the parent is done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.Shutdown(ctx)
	os.Exit(0)
}
