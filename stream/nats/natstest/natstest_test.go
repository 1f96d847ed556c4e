package natstest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// outcomeTB records how StartServer gave up; Skipf and Fatalf end the
// goroutine, as testing's do.
type outcomeTB struct {
	testing.TB
	skipped, failed string
}

func (o *outcomeTB) Skipf(format string, args ...any) {
	o.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestUnavailableServerSkipsOrFailsUnderCI: a server that cannot start
// skips the test with the reason, and fails it when CI is set.
func TestUnavailableServerSkipsOrFailsUnderCI(t *testing.T) {
	t.Setenv("SUSHKA_NATS_SERVER", filepath.Join(t.TempDir(), "no-such-binary"))
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		o := &outcomeTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			StartServer(o)
		}()
		<-done
		got, other := o.skipped, o.failed
		if ci != "" {
			got, other = o.failed, o.skipped
		}
		if !strings.Contains(got, "no-such-binary") || other != "" {
			t.Fatalf("CI=%q: skipped %q, failed %q; want the reason in the %s", ci, o.skipped, o.failed,
				map[bool]string{false: "skip", true: "failure"}[ci != ""])
		}
	}
}

// TestStartAndRestart: the server prints a nats:// URL on 127.0.0.1 and
// comes back on the same URL after a restart.
func TestStartAndRestart(t *testing.T) {
	s := StartServer(t)
	if !strings.HasPrefix(s.URL, "nats://127.0.0.1:") {
		t.Fatalf("URL %q", s.URL)
	}
	url := s.URL
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.URL != url {
		t.Fatalf("restarted on %s, was %s", s.URL, url)
	}
}

// TestSourceDirWithoutSourcePaths: in a binary built with -trimpath the
// compiled file name is not a path; the server's source is then found
// above the working directory.
func TestSourceDirWithoutSourcePaths(t *testing.T) {
	want, err := filepath.Abs(filepath.Join("..", "..", "..", "test", "natsserver"))
	if err != nil {
		t.Fatal(err)
	}
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	got, err := sourceDirFrom("github.com/sushka-io/sushka/stream/nats/natstest/natstest.go", wd)
	if err != nil || got != want {
		t.Fatalf("sourceDirFrom: %q, %v; want %q", got, err, want)
	}
	if _, err := sourceDirFrom("nowhere/natstest.go", t.TempDir()); err == nil {
		t.Fatal("found a source tree where there is none")
	}
}
