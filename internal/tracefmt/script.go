package tracefmt

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Epoch is where a trace's clock starts: its times are printed as offsets
// from it.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rewrite is -rewrite of the packages whose tests run golden traces: the
// outputs are written back instead of compared.
var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata/")

// RunScripts runs every testdata/*.txt golden trace of the calling
// package as a subtest (etcd raft's interaction tests, pebble's
// datadriven). A trace is a script of commands, each followed by "----"
// and the full output it caused, then a blank line; lines starting with
// "#" and blank lines before a command are its comment. newRun starts a
// fresh harness for one file and returns the function that runs one
// command and returns its output. With -rewrite, the outputs are written
// back instead of compared (the diff is the review); pkg names the
// package in the hint printed on a mismatch.
func RunScripts(t *testing.T, pkg string, newRun func(t *testing.T) func(cmd string) string) {
	t.Helper()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no traces: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file, *rewrite, pkg, newRun(t))
		})
	}
}

type scriptBlock struct {
	comment []string // lines before the command (comments, blanks)
	cmd     string
	want    string
	line    int
}

func parseScript(t *testing.T, file string) (blocks []scriptBlock, tail []string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := scriptBlock{comment: pre, cmd: l, line: i + 1}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", file, i+1)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.want = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pre
}

func runScript(t *testing.T, file string, rewrite bool, pkg string, run func(cmd string) string) {
	blocks, tail := parseScript(t, file)
	var buf bytes.Buffer
	failed := false
	for _, b := range blocks {
		got := strings.TrimRight(run(b.cmd), "\n")
		if !rewrite && got != b.want {
			t.Errorf("%s:%d: %s\n--- want:\n%s\n--- got:\n%s", file, b.line, b.cmd, b.want, got)
			failed = true
		}
		for _, c := range b.comment {
			buf.WriteString(c + "\n")
		}
		buf.WriteString(b.cmd + "\n----\n")
		if got != "" {
			buf.WriteString(got + "\n")
		}
		buf.WriteString("\n")
	}
	for _, c := range tail {
		if strings.TrimSpace(c) != "" {
			buf.WriteString(c + "\n")
		}
	}
	if rewrite {
		out := strings.TrimRight(buf.String(), "\n") + "\n"
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if failed {
		t.Logf("run `go test %s -rewrite` to accept the new output", pkg)
	}
}
