package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ArtifactsEnv names the directory where failing histories are kept;
// unset, $SUSHKA_TEST_ARTIFACTS/history, and unset too,
// DefaultArtifactsDir under the test's package directory (ignored by git).
const ArtifactsEnv = "SUSHKA_HISTORY_ARTIFACTS"

// DefaultArtifactsDir is where failing histories go when neither
// $SUSHKA_HISTORY_ARTIFACTS nor $SUSHKA_TEST_ARTIFACTS is set: relative to
// the working directory, which is the package's directory under go test.
const DefaultArtifactsDir = "testdata/history-artifacts"

// ArtifactsDir is the directory failing histories are written under.
func ArtifactsDir() string {
	if dir := os.Getenv(ArtifactsEnv); dir != "" {
		return dir
	}
	if dir := os.Getenv("SUSHKA_TEST_ARTIFACTS"); dir != "" {
		return filepath.Join(dir, "history")
	}
	return DefaultArtifactsDir
}

// Require checks the recorder's history and fails t with the report when
// it has an anomaly, after writing the history to a directory of its own
// under ArtifactsDir (named in the failure): history.jsonl (the events,
// one JSON object a line), report.txt, and linearizability.html
// (porcupine's visualization). A clean report is logged.
func Require(t testing.TB, r *Recorder, opts Options) *Report {
	t.Helper()
	events := r.Events()
	rep := Check(events, opts)
	if rep.OK() {
		t.Logf("%s", rep)
		return rep
	}
	dir, err := WriteArtifacts(filepath.Join(ArtifactsDir(), artifactName(t.Name())), events, rep)
	if err != nil {
		t.Errorf("history: writing the artifacts: %v", err)
	}
	t.Fatalf("%shistory kept in %s", rep, dir)
	return rep
}

func artifactName(testName string) string {
	name := strings.Map(func(c rune) rune {
		if c == '/' || c == ' ' || c == os.PathSeparator {
			return '_'
		}
		return c
	}, testName)
	return name + "-" + time.Now().UTC().Format("20060102T150405.000")
}

// WriteArtifacts writes events and rep into dir (created) and returns
// dir as an absolute path.
func WriteArtifacts(dir string, events []Event, rep *Report) (string, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, err
	}
	f, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return dir, err
	}
	err = WriteJSONLines(f, events)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(rep.String()), 0o644); err != nil {
		return dir, err
	}
	if rep.linearized {
		if err := porcupine.VisualizePath(logModel, rep.linearization, filepath.Join(dir, "linearizability.html")); err != nil {
			return dir, fmt.Errorf("porcupine visualization: %w", err)
		}
	}
	return dir, nil
}
